"""Copy libgslice.so to a versioned host folder for the node's containers.

The node image (deploy/node/Containerfile) carries the shim inside the
installed package; the containers that share the GPU need it on the host,
mounted read-only. Each version gets its own folder,
<prefix>/<version>/lib/libgslice.so, so upgrading never changes a library
that running processes have mapped; `<prefix>/current` points at the newest
installed version. Every write goes to a temporary name first and is
renamed into place (a rename is atomic: a reader sees the old file or the
new one, never half of one).
"""
from __future__ import annotations

import filecmp
import os
from pathlib import Path

from . import __version__, paths
from .atomic_file import write_atomically

LIBRARY_NAME = "libgslice.so"
CURRENT_LINK = "current"


def install_shim(prefix: str | os.PathLike, source: str | os.PathLike | None = None,
                 version: str = __version__) -> Path:
    """Installs `source` (default: paths.shim_library(), the packaged shim) as
    <prefix>/<version>/lib/libgslice.so and points <prefix>/current at
    <version>. A file already there with the same bytes is left untouched;
    a different one is replaced by rename. Returns the installed path."""
    source = Path(source) if source else paths.shim_library()
    if not source.is_file():
        raise FileNotFoundError(f"no shim to install at {source} (is gslice built or installed?)")
    if not version or "/" in version or version in (".", "..", CURRENT_LINK):
        raise ValueError(f"version {version!r} cannot name a folder; expected something like 0.1.0")
    prefix = Path(prefix)
    lib_dir = prefix / version / "lib"
    lib_dir.mkdir(parents=True, exist_ok=True)
    target = lib_dir / LIBRARY_NAME
    if not (target.is_file() and filecmp.cmp(source, target, shallow=False)):
        write_atomically(target, source.read_bytes(), mode=0o755)
    _point_current(prefix, version)
    return target


def _point_current(prefix: Path, version: str) -> None:
    link = prefix / CURRENT_LINK
    if link.is_symlink() and os.readlink(link) == version:
        return
    tmp = prefix / f".{CURRENT_LINK}.{os.getpid()}.tmp"
    tmp.unlink(missing_ok=True)
    os.symlink(version, tmp)
    os.replace(tmp, link)
