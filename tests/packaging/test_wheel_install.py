"""The wheel installed into a fresh venv, with no compiler or build tool on
the PATH: the CLI works, the shim is the wheel's, and the sharing demo's
short form runs on the simulated GPU that ships in the wheel. (tokend, group
create, run and status against it: test_dependency_floors.py.)"""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from packaging_harness import project_version

pytestmark = pytest.mark.packaging


def run(venv: Path, env: dict, *argv: str, timeout: float = 120, **extra_env) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), env={**env, **extra_env}, cwd=venv.parent, capture_output=True, text=True,
                          timeout=timeout)


def test_gslice_version_and_lib_path(installed_venv):
    venv, env = installed_venv
    r = run(venv, env, "gslice", "--version")
    assert r.returncode == 0 and r.stdout.strip() == f"gslice {project_version()}", r.stdout + r.stderr
    r = run(venv, env, "gslice", "lib-path")
    assert r.returncode == 0, r.stderr
    lib = Path(r.stdout.strip())
    assert lib.is_file() and venv in lib.parents, lib
    r = run(venv, env, "python", "-c", "import gslice, gslice.v1.client_pb2_grpc; print(gslice.__file__)")
    assert r.returncode == 0 and venv in Path(r.stdout.strip()).parents, r.stdout + r.stderr
    # The shim reports the package's version too.
    assert f"gslice-shim {project_version()}".encode() in lib.read_bytes()


def test_demo_short_form_on_the_simulated_gpu(installed_venv):
    venv, env = installed_venv
    r = run(venv, env, "python", "-m", "gslice.demo", "--seconds", "2", "--gpu", "sim", timeout=240)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "gslice demo on the simulated GPU" in r.stdout
    assert "over the whole run:" in r.stdout
    for group in ("training", "inference"):
        assert f"  {group:<10} asked" in r.stdout
    # The shim (from the wheel) enforced the 1 GiB quota, and the demo says
    # where the rest of it went: the context reserve (the shim's default here).
    assert "allocated 2 chunks (512 MiB), then CUDA_ERROR_OUT_OF_MEMORY" in r.stdout, r.stdout
    assert "1024 MiB of its 1024 MiB quota = 512 MiB of chunks + 512 MiB context reserve" in r.stdout, r.stdout
    assert "GSLICE_CONTEXT_RESERVE_MIB, not set here" in r.stdout, r.stdout
