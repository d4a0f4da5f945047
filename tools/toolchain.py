"""Which C compiler builds gslice's native libraries, and for which glibc.

libgslice.so is preloaded into other people's container images, so it must
load on the oldest glibc that CUDA images still use (FIELD-NOTES section 9).
Two toolchains:

  manylinux  zig's clang from the `ziglang` PyPI package, targeting an old
             glibc's symbol versions (`-target x86_64-linux-gnu.2.17`): the
             library loads on that glibc and every newer one. The default
             for the shim whenever ziglang is installed; always used for the
             wheel.
  native     the system gcc against the build machine's glibc (sanitizer
             builds need it; no download). GSLICE_SHIM_TOOLCHAIN=native.

Baselines: the shim and the simulated GPU (which ships in the wheel for
demos and tests) are both built for glibc 2.17 (manylinux2014), so the wheel
is tagged manylinux_2_17. Newer glibc wrappers are reached through syscall()
(the simulated GPU's memfd_create) rather than raising the baseline.
"""
from __future__ import annotations

import importlib.util
import os
import platform
import shutil
from pathlib import Path

ENV = "GSLICE_SHIM_TOOLCHAIN"
CHOICES = ("manylinux", "native")
SHIM_GLIBC = "2.17"
SIMGPU_GLIBC = "2.17"


def have_zig() -> bool:
    return importlib.util.find_spec("ziglang") is not None


def shim_toolchain() -> str:
    """$GSLICE_SHIM_TOOLCHAIN if set; else native for a sanitizer build
    ($GSLICE_SANITIZE: zig ships no ASan runtime); else manylinux when
    ziglang is installed."""
    chosen = os.environ.get(ENV, "").strip()
    if chosen and chosen not in CHOICES:
        raise RuntimeError(f"{ENV}={chosen!r}: expected one of {', '.join(CHOICES)}")
    if chosen:
        return chosen
    if os.environ.get("GSLICE_SANITIZE"):
        return "native"
    return "manylinux" if have_zig() else "native"


def arch() -> str:
    machine = platform.machine()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine.lower(), machine)


def zig_binary() -> Path:
    spec = importlib.util.find_spec("ziglang")
    if spec is None or not spec.origin:
        raise RuntimeError("the manylinux toolchain needs the `ziglang` package: pip install ziglang "
                           f"(or set {ENV}=native to build with the system gcc)")
    return Path(spec.origin).parent / "zig"


def compiler(chain: str, glibc: str) -> list[str]:
    """The compiler command (a list) for a toolchain; `glibc` is the
    manylinux target's glibc version."""
    if chain == "manylinux":
        return [str(zig_binary()), "cc", "-target", f"{arch()}-linux-gnu.{glibc}"]
    if chain != "native":
        raise RuntimeError(f"unknown toolchain {chain!r}: expected one of {', '.join(CHOICES)}")
    cc = os.environ.get("CC", "gcc")
    if not shutil.which(cc):
        raise RuntimeError(f"C compiler {cc!r} not found on PATH; install gcc or set CC")
    return [cc]


def compiler_script(chain: str, glibc: str, directory: Path) -> str:
    """compiler() as one executable path, for builds that take $CC as one word."""
    command = compiler(chain, glibc)
    if len(command) == 1:
        return command[0]
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / f"cc-{chain}-{glibc}"
    text = "#!/bin/sh\nexec " + " ".join(f"'{part}'" for part in command) + ' "$@"\n'
    if not script.exists() or script.read_text() != text:
        tmp = script.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.chmod(0o755)
        os.replace(tmp, script)
    return str(script)


def manylinux_tag(glibc: str) -> str:
    major, minor = glibc.split(".")
    return f"manylinux_{major}_{minor}_{arch()}"
