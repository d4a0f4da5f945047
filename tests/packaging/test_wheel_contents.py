"""The built wheel and sdist: tags, contents, and the shim inside the wheel
as a file (glibc baseline, NEEDED, exports, loads under LD_BIND_NOW=1)."""
from __future__ import annotations

import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from gslice.testing import GLIBC_OWN_LIBRARIES

from packaging_harness import ROOT, project_version
from elf_facts import dynamic_section, exported, glibc_versions, highest_glibc, needed, version_tuple

pytestmark = pytest.mark.packaging

# manylinux2014: what the shim must need at most, to load in every CUDA
# base image people run (Ubuntu 20.04: 2.31, UBI 8: 2.28, ...).
SHIM_GLIBC_MAX = "2.17"
# The simulated GPU (demo/test driver) in the wheel has the same baseline:
# the wheel as a whole is manylinux_2_17, see tools/toolchain.py.
WHEEL_GLIBC_MAX = "2.17"
GLIBC_LIBRARIES = GLIBC_OWN_LIBRARIES


def table_names() -> set[str]:
    text = (ROOT / "hook" / "intercept_table.h").read_text()
    return set(re.findall(r"^\s*X\((\w+),", text, flags=re.M))


def tag_glibc(tag: str) -> str:
    """manylinux_2_28_x86_64 -> 2.28"""
    major, minor = re.fullmatch(r"manylinux_(\d+)_(\d+)_x86_64", tag).groups()
    return f"{major}.{minor}"


# The wheel-file checks run on both wheels: the one built from the sdist and
# the one a developer builds in this working tree after a test run.
WHEELS = {"from-sdist": "wheel_path", "in-tree": "tree_wheel_path"}


@pytest.fixture(params=list(WHEELS))
def any_wheel(request) -> Path:
    return request.getfixturevalue(WHEELS[request.param])


@pytest.fixture
def any_wheel_tree(any_wheel, tmp_path) -> Path:
    with zipfile.ZipFile(any_wheel) as whl:
        whl.extractall(tmp_path)
    return tmp_path


def native_files(tree: Path) -> list[Path]:
    return sorted(p for p in tree.rglob("*") if p.is_file() and p.read_bytes()[:4] == b"\x7fELF")


def test_wheel_is_tagged_for_any_python3_on_manylinux(any_wheel):
    wheel_path = any_wheel
    name, version, python, abi, platform = wheel_path.stem.split("-")
    assert (name, version) == ("gslice", project_version())
    assert (python, abi) == ("py3", "none")
    tags = platform.split(".")
    for tag in tags:
        assert version_tuple(tag_glibc(tag)) <= version_tuple(WHEEL_GLIBC_MAX), tag
    with zipfile.ZipFile(wheel_path) as whl:
        meta = whl.read(f"gslice-{version}.dist-info/WHEEL").decode()
    assert "Root-Is-Purelib: false" in meta
    assert f"Tag: py3-none-{tags[0]}" in meta


def test_wheel_carries_the_shim_the_simulated_gpu_and_the_generated_code(any_wheel):
    with zipfile.ZipFile(any_wheel) as whl:
        names = set(whl.namelist())
    for required in ("gslice/lib/libgslice.so", "gslice/simgpu/libcuda.so.1", "gslice/simgpu/libnvidia-ml.so.1",
                     "gslice/v1/client_pb2.py", "gslice/v1/client_pb2_grpc.py", "gslice/v1/admin_pb2_grpc.py",
                     "gslice/v1/common_pb2.py", "gslice/cli.py", "gslice/tokend/__main__.py"):
        assert required in names, required
    # The CPython test module is not in it: the wheel serves every Python 3.
    assert not [n for n in names if "_shim_api" in n or re.search(r"\.cpython-|\.abi3\.", n)]
    assert not [n for n in names if n.endswith(".so") and "/simgpu/" in n]


def test_shim_in_wheel_needs_glibc_2_17_at_most(wheel_shim):
    versions = glibc_versions(wheel_shim)
    assert versions, "no GLIBC symbol versions found: is this a glibc build?"
    highest = highest_glibc(wheel_shim)
    assert version_tuple(highest) <= version_tuple(SHIM_GLIBC_MAX), sorted(versions, key=version_tuple)


def test_shim_in_wheel_needs_only_glibc_and_has_no_run_path(wheel_shim):
    assert needed(wheel_shim) <= {"libc.so.6", "libdl.so.2", "libpthread.so.0"}, needed(wheel_shim)
    section = dynamic_section(wheel_shim)
    assert "RUNPATH" not in section and "RPATH" not in section


def test_shim_in_wheel_exports_the_table_dlsym_and_the_c_api_only(wheel_shim):
    names = exported(wheel_shim)
    api = {n for n in names if n.startswith("gslice_")}
    assert names - api == table_names() | {"dlsym"}
    # nghttp2 and nanopb are linked in, and hidden.
    assert not [n for n in names if n.startswith(("nghttp2_", "pb_"))]


def test_shim_in_wheel_loads_with_bind_now(wheel_shim):
    for program in (["/bin/true"], [sys.executable, "-c", "pass"]):
        r = subprocess.run(program, env={"LD_PRELOAD": str(wheel_shim), "LD_BIND_NOW": "1"},
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and r.stderr == "", (program, r.stderr)


def test_every_native_file_in_wheel_needs_glibc_2_17_at_most(any_wheel_tree):
    """Every ELF file, the simulated GPU's included: built with the manylinux
    toolchain whatever the tree held before."""
    found = {p.relative_to(any_wheel_tree).as_posix(): p for p in native_files(any_wheel_tree)}
    assert {"gslice/lib/libgslice.so", "gslice/simgpu/libcuda.so.1", "gslice/simgpu/libnvidia-ml.so.1"} <= set(found)
    for name, lib in found.items():
        assert version_tuple(highest_glibc(lib)) <= version_tuple(WHEEL_GLIBC_MAX), (name, glibc_versions(lib))
        assert needed(lib) <= GLIBC_LIBRARIES, (name, needed(lib))


def test_auditwheel_names_the_tag_the_wheel_carries(any_wheel):
    pytest.importorskip("auditwheel")
    r = subprocess.run([sys.executable, "-m", "auditwheel", "show", str(any_wheel)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    text = " ".join(r.stdout.split())
    found = re.search(r'consistent with the following platform tag: "(manylinux_\d+_\d+_x86_64)"', text)
    assert found, r.stdout
    claimed = any_wheel.stem.split("-")[-1].split(".")[0]
    assert found.group(1) == claimed, r.stdout


def test_sdist_carries_the_native_sources_and_no_binaries(sdist_path):
    with tarfile.open(sdist_path) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for required in ("pyproject.toml", "setup.py", "tools/build_native.py", "tools/toolchain.py", "hook/build.py",
                     "hook/exports.map", "hook/shim.c", "simgpu/build.py", "include/gslice_cuda_abi.h",
                     "proto/gslice/v1/client.proto", "third_party/nghttp2/lib/nghttp2_session.c",
                     "third_party/nghttp2/COPYING"):
        assert required in names, required
    assert not [n for n in names if n.endswith((".so", ".o")) or ".so." in n]
