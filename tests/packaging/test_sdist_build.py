"""The sdist builds a wheel with only a C compiler (zig, from the build
requirements) and Python packages: nanopb's runtime comes from
third_party/nanopb, not from the system's libnanopb-dev."""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import zipfile

import pytest

pytestmark = pytest.mark.packaging

NANOPB_RUNTIME = ("pb.h", "pb_common.h", "pb_encode.h", "pb_decode.h", "pb_common.c", "pb_encode.c", "pb_decode.c")


def system_nanopb_files() -> list[str]:
    """libnanopb-dev's headers and libraries (dpkg's list), where installed."""
    if not shutil.which("dpkg"):
        return []
    r = subprocess.run(["dpkg", "-L", "libnanopb-dev"], capture_output=True, text=True)
    return [f for f in r.stdout.split() if f.startswith(("/usr/include", "/usr/lib")) and os.path.isfile(f)]


def test_sdist_carries_nanopbs_runtime_and_licence(sdist_path, wheel_path):
    with tarfile.open(sdist_path) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for name in (*NANOPB_RUNTIME, "LICENSE.txt", "VERSION"):
        assert f"third_party/nanopb/{name}" in names, name
    with zipfile.ZipFile(wheel_path) as whl:
        licences = [n for n in whl.namelist() if ".dist-info/licenses/" in n]
    assert any(n.endswith("third_party/nanopb/LICENSE.txt") for n in licences), licences


def test_sdist_builds_with_libnanopb_dev_hidden(sdist_path, tmp_path):
    """Builds the sdist's wheel in a private mount namespace where every file
    of libnanopb-dev reads as empty (root and unshare needed; else skipped)."""
    hidden = system_nanopb_files()
    if not hidden:
        pytest.skip("libnanopb-dev is not installed: nothing to hide (the plain sdist build covers this)")
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("hiding libnanopb-dev needs root and unshare(1)")
    with tarfile.open(sdist_path) as tar:
        tar.extractall(tmp_path, filter="data")
    (source,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    build = [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--skip-dependency-check",
             "--outdir", str(tmp_path / "dist"), str(source)]
    script = " && ".join([*(f"mount --bind /dev/null {shlex.quote(f)}" for f in hidden),
                          f"test ! -s {shlex.quote(hidden[0])}", shlex.join(build)])
    r = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                       capture_output=True, text=True, cwd=tmp_path, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert len(list((tmp_path / "dist").glob("gslice-*.whl"))) == 1
