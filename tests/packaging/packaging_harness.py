"""Fixtures for the packaging tests (conftest.py imports them; the tests
import helpers from here under this unique name). Builds gslice's sdist and
wheel once per session (`python -m build`: the wheel is built from the
sdist, so the sdist's from-source build is tested too) and installs the
wheel into a fresh virtual environment."""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def project_version() -> str:
    """The source tree's version (the test venv has gslice installed editable)."""
    import gslice
    return gslice.__version__


@pytest.fixture(scope="session")
def dist_dir():
    path = Path(tempfile.mkdtemp(prefix="gs-dist-"))
    # --no-isolation: the build requirements are already in the test venv
    # (scripts/bootstrap.sh), so no download.
    result = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(path), str(ROOT)],
                            capture_output=True, text=True, cwd=ROOT, timeout=600)
    if result.returncode != 0:
        shutil.rmtree(path, ignore_errors=True)
        pytest.fail(f"python -m build failed ({result.returncode}):\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def wheel_path(dist_dir) -> Path:
    wheels = list(dist_dir.glob("gslice-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="session")
def sdist_path(dist_dir) -> Path:
    sdists = list(dist_dir.glob("gslice-*.tar.gz"))
    assert len(sdists) == 1, sdists
    return sdists[0]


@pytest.fixture(scope="session")
def wheel_tree(wheel_path):
    """The wheel unpacked (as pip would lay out its platlib)."""
    path = Path(tempfile.mkdtemp(prefix="gs-wheel-"))
    with zipfile.ZipFile(wheel_path) as whl:
        whl.extractall(path)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def wheel_shim(wheel_tree) -> Path:
    return wheel_tree / "gslice" / "lib" / "libgslice.so"


BUILD_TOOLS = ("gcc", "cc", "clang", "ld", "zig", "make")


@pytest.fixture(scope="session")
def installed_venv(wheel_path):
    """A fresh venv with the wheel installed by pip (dependencies as binary
    wheels from the index, through pip's cache), and a PATH with no build
    tools on it. Yields (venv, env)."""
    base = Path(tempfile.mkdtemp(prefix="gs-venv-"))
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    empty_bin = base / "bin"
    empty_bin.mkdir()
    env = {"PATH": f"{venv / 'bin'}{os.pathsep}{empty_bin}", "HOME": os.environ.get("HOME", str(base)),
           "LANG": "C.UTF-8", "TMPDIR": tempfile.gettempdir()}
    for name in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_CONFIG_FILE", "PIP_CACHE_DIR", "XDG_CACHE_HOME"):
        if name in os.environ:
            env[name] = os.environ[name]
    present = [tool for tool in BUILD_TOOLS if shutil.which(tool, path=env["PATH"])]
    assert not present, f"build tools on the test PATH: {present}"
    # --only-binary: nothing may be compiled on the way in.
    result = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                             "--only-binary", ":all:", str(wheel_path)],
                            env=env, cwd=base, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        shutil.rmtree(base, ignore_errors=True)
        pytest.fail(f"pip install of {wheel_path.name} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    yield venv, env
    shutil.rmtree(base, ignore_errors=True)


@contextlib.contextmanager
def running_tokend(argv: list[str], env: dict, log_path: Path):
    """Starts a tokend command line (`argv` + --socket-dir, --parent-pid),
    waits for its admin socket, yields the socket folder; stops the daemon
    and removes its sockets after."""
    # Short: unix socket paths are limited to 108 bytes.
    sockets = Path(tempfile.gettempdir()) / f"gsp-{uuid.uuid4().hex[:8]}"
    log = open(log_path, "wb")
    daemon = subprocess.Popen([*argv, "--socket-dir", str(sockets), "--parent-pid", str(os.getpid())],
                              env=env, cwd=log_path.parent, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not (sockets / "admin.sock").exists():
            assert daemon.poll() is None, f"tokend exited {daemon.returncode}: {log_path.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"no admin socket in 60 s: {log_path.read_text()[-3000:]}"
            time.sleep(0.1)
        yield sockets
    finally:
        daemon.terminate()
        try:
            daemon.wait(timeout=20)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
        log.close()
        shutil.rmtree(sockets, ignore_errors=True)
