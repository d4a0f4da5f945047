"""Fixtures for the packaging tests (conftest.py imports them; the tests
import helpers from here under this unique name). Once per session:

  dist_dir / wheel_path   the sdist and a wheel built from it (`python -m
                          build`: the sdist's from-source build is tested too)
  tree_wheel_path         a wheel built the way a developer builds one: `python
                          -m build --wheel` in this working tree, after a test
                          run left the system gcc's simulated GPU in it
  installed_venv          the wheel in a fresh venv, newest dependencies
  floor_venv              the wheel in a venv with exactly the declared floors
  image_target            the wheel installed with --no-deps --target into a
                          venv holding what a stock PyTorch image holds
                          (FIELD-NOTES section 8)"""
from __future__ import annotations

import contextlib
import json
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
    # (scripts/bootstrap.sh), so no download; but for grpcio-tools, which
    # tools/build_native.py keeps at the pinned version under build/ (the
    # venv's own serves nanopb), hence --skip-dependency-check.
    result = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--skip-dependency-check", "--outdir", str(path), str(ROOT)],
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


@pytest.fixture(scope="session")
def tree_wheel_path():
    """`python -m build --wheel` in this tree (isolated build env, as a
    developer runs it) right after the simulated GPU was built here with
    the developer toolchain (`tools/build_native.py simgpu`, which a test run
    does): the wheel must still carry only manylinux-toolchain libraries.
    The developer build is restored afterwards."""
    path = Path(tempfile.mkdtemp(prefix="gs-tree-wheel-"))
    dev_build = [sys.executable, str(ROOT / "tools" / "build_native.py"), "simgpu"]
    subprocess.run(dev_build, cwd=ROOT, check=True, capture_output=True, timeout=300)
    result = subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(path), str(ROOT)],
                            capture_output=True, text=True, cwd=ROOT, timeout=900)
    subprocess.run(dev_build, cwd=ROOT, check=True, capture_output=True, timeout=300)
    if result.returncode != 0:
        shutil.rmtree(path, ignore_errors=True)
        pytest.fail(f"python -m build --wheel failed ({result.returncode}):\n{result.stdout[-4000:]}\n"
                    f"{result.stderr[-4000:]}")
    wheels = list(path.glob("gslice-*.whl"))
    assert len(wheels) == 1, wheels
    yield wheels[0]
    shutil.rmtree(path, ignore_errors=True)


def declared_floors() -> dict[str, str]:
    """{distribution: version} for each `name>=version` in pyproject.toml's
    [project] dependencies (each must have exactly one such floor)."""
    import tomllib
    from packaging.requirements import Requirement

    floors = {}
    for text in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]:
        requirement = Requirement(text)
        lows = [spec.version for spec in requirement.specifier if spec.operator == ">="]
        assert len(lows) == 1, f"dependency {text!r}: expected exactly one '>=' floor"
        floors[requirement.name] = lows[0]
    return floors


# What a stock PyTorch 2.11 image on the H100 machine holds (FIELD-NOTES
# section 8; docs/packaging.md): the wheel must import and run there.
# grpcio-health-checking is not in that image; it is carried beside the
# wheel, at the image's grpcio version (its own stubs want grpcio >= its version).
IMAGE_PACKAGES = {"grpcio": "1.84.0", "protobuf": "7.36.2", "grpcio-health-checking": "1.84.0"}

BUILD_TOOLS = ("gcc", "cc", "clang", "ld", "zig", "make")


def make_venv(base: Path, requirements: list[str]) -> tuple[Path, dict]:
    """A fresh venv at base/venv with `requirements` installed by pip as
    binary wheels (from the index, through pip's cache), and an environment
    whose PATH has no build tools on it. Returns (venv, env)."""
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
    if requirements:
        pip(venv, env, "install", "-q", "--only-binary", ":all:", *requirements)
    return venv, env


def pip(venv: Path, env: dict, *args: str) -> str:
    result = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", *args],
                            env=env, cwd=venv.parent, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        pytest.fail(f"pip {' '.join(args)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result.stdout


def installed_versions(venv: Path, env: dict) -> dict[str, str]:
    listing = json.loads(pip(venv, env, "list", "--format", "json"))
    return {item["name"].lower().replace("_", "-"): item["version"] for item in listing}


@pytest.fixture(scope="session")
def installed_venv(wheel_path):
    """The wheel in a fresh venv: pip chooses the newest dependencies.
    Yields (venv, env)."""
    base = Path(tempfile.mkdtemp(prefix="gs-venv-"))
    try:
        yield make_venv(base, [str(wheel_path)])
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def floor_venv(wheel_path):
    """The wheel in a fresh venv with exactly the declared floor of every
    dependency. Yields (venv, env)."""
    base = Path(tempfile.mkdtemp(prefix="gs-floor-"))
    try:
        yield make_venv(base, [f"{name}=={version}" for name, version in declared_floors().items()]
                        + [str(wheel_path)])
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def image_target(wheel_path):
    """A venv holding IMAGE_PACKAGES (plus the other dependencies, newest)
    and no cffi, with the wheel installed the way it is on the GPU machine:
    `pip install --no-deps --target DIR`, DIR first on PYTHONPATH and PATH.
    Yields (venv, env)."""
    base = Path(tempfile.mkdtemp(prefix="gs-image-"))
    try:
        others = [name for name in declared_floors() if name not in IMAGE_PACKAGES]
        venv, env = make_venv(base, [f"{n}=={v}" for n, v in IMAGE_PACKAGES.items()] + others)
        target = base / "target"
        pip(venv, env, "install", "-q", "--no-deps", "--target", str(target), str(wheel_path))
        env = {**env, "PYTHONPATH": str(target), "PATH": f"{target / 'bin'}{os.pathsep}{env['PATH']}"}
        yield venv, env
    finally:
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
