"""The init step: put libgslice.so into the host's versioned, read-only
folder (/opt/gslice/<version>/lib) that CDI specs mount into containers.

A library that running containers have mapped is never written in place:
identical content is left alone; different content (a rebuilt same version)
goes to a temporary name in the same folder and is renamed over it, so
processes that mapped the old file keep the old inode."""
from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def install_shim(source: Path, lib_dir: Path) -> tuple[Path, bool]:
    """Returns the installed path and whether anything was written."""
    source, lib_dir = Path(source), Path(lib_dir)
    if not source.is_file():
        raise FileNotFoundError(f"shim library {source} does not exist (python tools/build_native.py hook)")
    lib_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
    target = lib_dir / source.name
    if target.is_file() and _digest(target) == _digest(source):
        return target, False
    fd, tmp = tempfile.mkstemp(prefix=f".{source.name}.", dir=lib_dir)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(source.read_bytes())
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o755)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target, True
