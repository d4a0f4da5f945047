"""Replace a file so that readers, and a crash, see the old content or the
new one, never half of it: write a temporary name in the same folder (a dot
name ending in .tmp, which the CDI runtimes, globbing *.json, ignore), fsync,
rename over the target."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomically(path: str | os.PathLike, data: bytes, mode: int = 0o644, sync_dir: bool = False) -> None:
    """`path` gets `data` with permissions `mode`; its folder must exist.
    sync_dir: also fsync the folder, so that the rename itself survives a
    power loss (for state that must not go back in time)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            os.fchmod(out.fileno(), mode)
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if sync_dir:
        dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
