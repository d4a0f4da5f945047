"""The wheels the real-GPU check installs, and their installation.

    python bundle.py prepare BUNDLE_DIR      # here, with PyPI: build gslice's wheel, download what the GPU
                                             # machine lacks (cp312, manylinux x86_64), write manifest.json
    python bundle.py install BUNDLE_DIR TARGET   # there, offline: pip install --no-deps --target TARGET,
                                                 # never touching that Python's own packages; then check
                                                 # that gslice imports with that Python's grpcio/protobuf

The GPU machine (FIELD-NOTES section 8) has grpcio, protobuf, nvidia-ml-py
and prometheus-client but no cffi and no network."""
from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
# What the GPU machine lacks (gslice declares cffi; the shim needs none of it at run time).
EXTRA_REQUIREMENTS = ["cffi", "pycparser", "grpcio-health-checking==1.84.0"]
TARGET_PYTHON = "3.12"
TARGET_PLATFORMS = ["manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64"]

IMPORT_CHECK = r"""
import json, sys
out = {}
for name in ("grpc", "google.protobuf"):
    try:
        out[name] = __import__(name, fromlist=["_"]).__version__
    except Exception as exc:
        out[name] = f"missing: {exc}"
try:
    import gslice, gslice.client, gslice.testing, gslice.experiment, gslice.workloads_served
    from gslice.v1 import admin_pb2, client_pb2
    import gslice.tokend.daemon
    from gslice import paths
    if not paths.shim_library().exists():
        raise FileNotFoundError(f"the wheel has no shim at {paths.shim_library()}")
    out.update(ok=True, gslice=gslice.__version__, where=gslice.__file__, shim=str(paths.shim_library()))
except Exception as exc:
    out.update(ok=False, error=f"{type(exc).__name__}: {exc}")
print(json.dumps(out))
"""


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def git(*args: str) -> str:
    out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else f"(git {' '.join(args)} failed)"


def prepare(bundle: Path, download_extras: bool = True) -> int:
    wheels = bundle / "wheels"
    if wheels.exists():
        shutil.rmtree(wheels)
    wheels.mkdir(parents=True)
    print(f"[prepare] building gslice's wheel into {wheels}", flush=True)
    # --skip-dependency-check: the venv's grpcio-tools is any version (nanopb's
    # generator runs on it); the stubs' pinned one is kept under build/.
    build = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--skip-dependency-check",
                            "--outdir", str(wheels),
                            str(ROOT)], capture_output=True, text=True)
    if build.returncode != 0:
        print(f"[prepare] python -m build failed ({build.returncode}):\n{build.stdout[-3000:]}\n{build.stderr[-3000:]}")
        return 1
    platforms = [arg for p in TARGET_PLATFORMS for arg in ("--platform", p)]
    if download_extras:
        print(f"[prepare] downloading {' '.join(EXTRA_REQUIREMENTS)} for CPython {TARGET_PYTHON} manylinux x86_64",
              flush=True)
        download = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                                   "--python-version", TARGET_PYTHON, "--implementation", "cp", *platforms,
                                   "--dest", str(wheels), *EXTRA_REQUIREMENTS], capture_output=True, text=True)
    if download_extras and download.returncode != 0:
        print(f"[prepare] pip download failed ({download.returncode}):\n{download.stdout[-2000:]}\n"
              f"{download.stderr[-2000:]}")
        return 1
    programs = build_programs(bundle / "bin")
    files = sorted(wheels.glob("*.whl"))
    manifest = {"built_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain")),
                "wheels": {f.name: {"sha256": sha256(f), "bytes": f.stat().st_size} for f in files},
                "programs": programs}
    (bundle / "manifest.json").write_text(json.dumps(manifest, indent=1))
    total = sum(f.stat().st_size for f in files)
    print(f"[prepare] {len(files)} wheels, {total / 2**20:.1f} MiB: {', '.join(f.name for f in files)}")
    print(f"[prepare] wheel of commit {manifest['commit']}{' (dirty tree)' if manifest['dirty'] else ''}; "
          f"carry {bundle.relative_to(ROOT) if bundle.is_relative_to(ROOT) else bundle} to the GPU machine")
    return verify(bundle) if download_extras else 0


def build_programs(bin_dir: Path) -> dict:
    """The C programs of section i (the shim's RPC round trips, sec_rpc.py),
    built here: the GPU machine has no libnghttp2 and no nanopb, so nghttp2
    is linked in. Best effort: without them section i says so and the rest
    of the check runs."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import native_build

    if bin_dir.exists():
        shutil.rmtree(bin_dir)
    built = {}
    for name, build in (("rpc_roundtrip", lambda out: native_build.rpc_roundtrip(out, static=True)),
                        ("socket_echo", native_build.socket_echo)):
        try:
            built[name] = sha256(build(bin_dir / name))
        except (OSError, subprocess.CalledProcessError) as exc:
            print(f"[prepare] {name} not built ({exc}): section i will say so", flush=True)
    return built


# What the GPU machine's Python has (FIELD-NOTES section 8): the bundle must import with exactly these.
DEVICE_PINS = ["grpcio==1.84.0", "protobuf==7.36.2", "nvidia-ml-py", "prometheus-client"]


def verify(bundle: Path) -> int:
    """Install the bundle as the GPU machine will, into a venv with the GPU
    machine's grpcio and protobuf (this Python's version, not 3.12: the
    version checks in generated code are what fails there), and import it."""
    venv = bundle.parent / f"{bundle.name}-verify"
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pins = subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *DEVICE_PINS],
                          capture_output=True, text=True)
    if pins.returncode != 0:
        print(f"[prepare] could not make the verification venv ({' '.join(DEVICE_PINS)}): {pins.stderr[-1500:]}")
        return 1
    check = subprocess.run([str(python), str(Path(__file__).resolve()), "install", str(bundle),
                            str(venv / "gslice-site")], capture_output=True, text=True)
    print("\n".join("[prepare] verify: " + line for line in (check.stdout + check.stderr).strip().splitlines()))
    if check.returncode != 0:
        print(f"[prepare] FAILED: the bundle does not import with {' '.join(DEVICE_PINS)} (as on the GPU machine); "
              "do not carry it yet")
    return check.returncode


def unpack(wheel: Path, target: Path) -> None:
    """What pip --target does for a wheel, for a Python without pip: files into
    target, a .data folder's purelib/platlib contents into target too."""
    with zipfile.ZipFile(wheel) as whl:
        for member in whl.namelist():
            parts = Path(member).parts
            if len(parts) > 2 and parts[0].endswith(".data") and parts[1] in ("purelib", "platlib"):
                dest = target.joinpath(*parts[2:])
            elif parts and parts[0].endswith(".data"):
                continue  # scripts, headers: not needed to import
            else:
                dest = target / member
            if member.endswith("/"):
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(whl.read(member))
            if dest.suffix == ".so" or ".so." in dest.name:
                dest.chmod(0o755)


def install(bundle: Path, target: Path) -> int:
    wheels = sorted((bundle / "wheels").glob("*.whl"))
    if not any(w.name.startswith("gslice-") for w in wheels):
        print(f"[install] no gslice wheel in {bundle / 'wheels'}: run `scripts/gpu-check --prepare` on a machine "
              "with PyPI and carry that folder", file=sys.stderr)
        return 2
    # A wheel for another CPython (the bundle is made for the GPU machine's) is left out here.
    this_python = f"cp{sys.version_info.major}{sys.version_info.minor}"
    skipped = [w for w in wheels if w.name.split("-")[-3].startswith("cp") and w.name.split("-")[-3] != this_python]
    if skipped:
        print(f"[install] left out (not for {this_python}): {', '.join(w.name for w in skipped)}")
    wheels = [w for w in wheels if w not in skipped]
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--no-compile", "--no-cache-dir",
                          "--disable-pip-version-check", "--target", str(target), *map(str, wheels)],
                         capture_output=True, text=True, timeout=300)
    if pip.returncode != 0:
        print(f"[install] pip install --target failed ({pip.returncode}): {pip.stderr.strip()[-1500:]}\n"
              f"[install] unpacking the wheels by hand instead", flush=True)
        shutil.rmtree(target)
        target.mkdir(parents=True)
        for wheel in wheels:
            unpack(wheel, target)
    print(f"[install] {len(wheels)} wheels into {target} (--no-deps; {sys.executable}'s own packages untouched)")
    return check_import(target)


def check_import(target: Path) -> int:
    import os
    env = {**os.environ, "PYTHONPATH": f"{target}{os.pathsep}{os.environ.get('PYTHONPATH', '')}".rstrip(os.pathsep)}
    probe = subprocess.run([sys.executable, "-c", IMPORT_CHECK], env=env, capture_output=True, text=True, timeout=120)
    try:
        report = json.loads(probe.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        report = {"ok": False, "error": f"the import check printed nothing (exit {probe.returncode}): "
                                        f"{probe.stderr.strip()[-1500:]}"}
    if not report.get("ok"):
        print(f"[install] ERROR: the installed gslice does not import with {sys.executable} "
              f"(grpcio {report.get('grpc')}, protobuf {report.get('google.protobuf')}): {report.get('error')}\n"
              "[install] the wheel's generated gRPC/protobuf code must accept this machine's grpcio and protobuf "
              "(FIELD-NOTES section 10); rebuild the wheel with code generated for them.", file=sys.stderr, flush=True)
        return 3
    print(f"[install] gslice {report['gslice']} imports from {report['where']} with grpcio {report['grpc']}, "
          f"protobuf {report['google.protobuf']}", flush=True)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p_prep = sub.add_parser("prepare")
    p_prep.add_argument("bundle", type=Path)
    p_prep.add_argument("--no-download", action="store_true", help="only gslice's wheel (the short form)")
    p_inst = sub.add_parser("install")
    p_inst.add_argument("bundle", type=Path)
    p_inst.add_argument("target", type=Path)
    args = parser.parse_args(argv)
    if args.command == "prepare":
        return prepare(args.bundle.resolve(), download_extras=not args.no_download)
    return install(args.bundle.resolve(), args.target.resolve())


if __name__ == "__main__":
    sys.exit(main())
