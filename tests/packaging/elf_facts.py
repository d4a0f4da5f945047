"""What an ELF shared library needs and offers, read with binutils
(objdump, readelf, nm): the glibc symbol versions it requires, its NEEDED
entries and run paths, the names it exports."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path


def _run(*cmd: str) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def glibc_versions(path: Path) -> set[str]:
    """The GLIBC_x.y[.z] versions of the symbols `path` imports."""
    return set(re.findall(r"\(GLIBC_([0-9.]+)\)", _run("objdump", "-T", str(path))))


def highest_glibc(path: Path) -> str:
    return max(glibc_versions(path), key=version_tuple)


def dynamic_section(path: Path) -> str:
    return _run("readelf", "-d", str(path))


def needed(path: Path) -> set[str]:
    return set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic_section(path)))


def exported(path: Path) -> set[str]:
    out = _run("nm", "-D", "--defined-only", str(path))
    return {line.split()[-1] for line in out.splitlines() if line.strip()}
