"""Build the simulated GPU's stand-in driver libraries with gcc.

    libcuda.so.1       (+ libcuda.so link, for -lcuda)
    libnvidia-ml.so.1  (+ libnvidia-ml.so link)

Called by tools/build_native.py (target ``simgpu``). Plain C, glibc only.
A build whose sources, headers and flags are unchanged is skipped.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

SIMGPU_DIR = Path(__file__).resolve().parent
ROOT = SIMGPU_DIR.parent
INCLUDE_DIR = ROOT / "include"

CFLAGS = ["-std=gnu11", "-O2", "-g", "-fPIC", "-Wall", "-Wextra", "-Werror", "-pthread",
          "-fvisibility=hidden", f"-I{INCLUDE_DIR}", f"-I{SIMGPU_DIR}"]
LDFLAGS = ["-shared", "-pthread", "-Wl,-z,now", "-Wl,-z,relro", "-Wl,--no-undefined"]

LIBRARIES = {
    "libcuda.so.1": {
        "sources": ["sim_device.c", "cuda_context.c", "cuda_streams.c", "cuda_launch.c", "cuda_memory.c",
                    "cuda_proc_address.c", "kernel_trace.c"],
        "link": "libcuda.so",
        "libs": [],
    },
    "libnvidia-ml.so.1": {
        "sources": ["sim_device.c", "nvml.c"],
        "link": "libnvidia-ml.so",
        "libs": [],
    },
}


def _fingerprint(name: str, spec: dict) -> str:
    digest = hashlib.sha256()
    digest.update(" ".join(CFLAGS + LDFLAGS + spec["libs"] + [name]).encode())
    headers = sorted(SIMGPU_DIR.glob("*.h")) + sorted(INCLUDE_DIR.glob("*.h"))
    for path in [SIMGPU_DIR / s for s in spec["sources"]] + headers:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _compiler() -> str:
    compiler = os.environ.get("CC", "gcc")
    if not shutil.which(compiler):
        raise RuntimeError(f"C compiler {compiler!r} not found on PATH; install gcc or set CC")
    return compiler


def build(out_dir: Path, work_dir: Path) -> None:
    out_dir = Path(out_dir)
    work_dir = Path(work_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    work_dir.mkdir(parents=True, exist_ok=True)
    for name, spec in LIBRARIES.items():
        target = out_dir / name
        stamp = work_dir / f"{name}.fingerprint"
        fingerprint = _fingerprint(name, spec)
        if not (target.exists() and stamp.exists() and stamp.read_text() == fingerprint):
            # Link to a temporary name, then rename: processes that already
            # mapped the old library keep a consistent file.
            temporary = work_dir / f"{name}.tmp"
            cmd = [_compiler(), *CFLAGS, *LDFLAGS, f"-Wl,-soname,{name}", "-o", str(temporary),
                   *[str(SIMGPU_DIR / s) for s in spec["sources"]], *spec["libs"]]
            result = subprocess.run(cmd, capture_output=True, text=True)
            if result.returncode != 0:
                raise RuntimeError(f"building {name} failed:\n{' '.join(cmd)}\n{result.stderr}")
            os.replace(temporary, target)
            stamp.write_text(fingerprint)
        link = out_dir / spec["link"]
        if link.is_symlink() or link.exists():
            if link.is_symlink() and os.readlink(link) == name:
                continue
            link.unlink()
        link.symlink_to(name)


if __name__ == "__main__":
    build(ROOT / "python" / "gslice" / "simgpu", ROOT / "build" / "native" / "simgpu")
