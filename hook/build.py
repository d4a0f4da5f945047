"""Build libgslice.so (the LD_PRELOAD shim) and gslice._shim_api (its test handle).

Called by tools/build_native.py (target `hook`) as
build(package_dir, nanopb_dir, work_dir). Plain C compiled through cffi's
build machinery (FIELD-NOTES section 2): no Python symbols, NEEDED only
libc/libnghttp2, loads under LD_BIND_NOW=1. Only the table's entry points,
dlsym and the gslice_* API are exported (-fvisibility=hidden; the static
nanopb runtime is hidden with --exclude-libs,ALL).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

HOOK_DIR = Path(__file__).resolve().parent
ROOT = HOOK_DIR.parent
INCLUDE_DIR = ROOT / "include"

CFLAGS = ["-std=gnu11", "-O2", "-g", "-fvisibility=hidden", "-fPIC", "-pthread", "-Wall", "-Wextra",
          "-ftls-model=initial-exec", "-fno-plt"]
LDFLAGS = ["-pthread", "-Wl,-z,now,-z,relro,--exclude-libs,ALL", "-Wl,--no-undefined"]

# GSLICE_SANITIZE=address,undefined (or thread): a sanitizer build for the
# tests (scripts/test-sanitized); never for shipping. The runtime must then be
# preloaded before the shim (scripts/test-sanitized does it).
SANITIZERS = {"address", "undefined", "thread"}
_sanitize = os.environ.get("GSLICE_SANITIZE", "")
if _sanitize:
    if not set(_sanitize.split(",")) <= SANITIZERS:
        raise SystemExit(f"GSLICE_SANITIZE={_sanitize!r}: expected a comma list of {sorted(SANITIZERS)}")
    CFLAGS += [f"-fsanitize={_sanitize}", "-fno-omit-frame-pointer", "-fno-sanitize-recover=undefined"]
    LDFLAGS += [f"-fsanitize={_sanitize}"]


def find_nanopb_runtime() -> Path:
    """The position-independent static nanopb runtime from libnanopb-dev."""
    candidates: list[Path] = []
    try:
        out = subprocess.run(["pkg-config", "--variable=libdir", "nanopb"], capture_output=True, text=True)
        if out.returncode == 0 and out.stdout.strip():
            candidates.append(Path(out.stdout.strip()) / "libprotobuf-nanopb.a")
    except FileNotFoundError:
        pass
    try:
        arch = subprocess.run(["gcc", "-print-multiarch"], capture_output=True, text=True).stdout.strip()
        if arch:
            candidates.append(Path("/usr/lib") / arch / "libprotobuf-nanopb.a")
    except FileNotFoundError:
        pass
    candidates += [Path("/usr/lib/libprotobuf-nanopb.a"), Path("/usr/local/lib/libprotobuf-nanopb.a")]
    for path in candidates:
        if path.exists():
            return path
    raise RuntimeError("libprotobuf-nanopb.a not found (looked in: "
                       + ", ".join(map(str, candidates)) + "); install libnanopb-dev")


def _compile_shared(name: str, sources: list[Path], include_dirs: list[Path], extra_objects: list[str],
                    libraries: list[str], work_dir: Path, extra_link: list[str] = ()) -> Path:
    from cffi import ffiplatform

    work_dir.mkdir(parents=True, exist_ok=True)

    ext = ffiplatform.get_extension(
        str(work_dir / f"{name}.c"), name,
        sources=[str(s) for s in sources],
        include_dirs=[str(d) for d in include_dirs],
        extra_compile_args=CFLAGS,
        extra_link_args=LDFLAGS + list(extra_link),
        extra_objects=extra_objects,
        libraries=libraries,
    )
    # The main source must be one of ours, not a cffi-generated file.
    ext.sources = [str(s) for s in sources]
    saved = {k: os.environ.get(k) for k in ("LDSHARED", "CC")}
    # Without it the pyenv Python adds a RUNPATH to its own lib folder.
    os.environ["LDSHARED"] = "gcc -shared"
    os.environ["CC"] = "gcc"
    cwd = os.getcwd()
    os.chdir(work_dir)   # distutils would read the project's pyproject.toml from the cwd
    try:
        built = ffiplatform.compile(str(work_dir), ext)
    finally:
        os.chdir(cwd)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return Path(built)


def build_library(package_dir: Path, nanopb_dir: Path, work_dir: Path) -> Path:
    work_dir.mkdir(parents=True, exist_ok=True)
    sources = sorted(HOOK_DIR.glob("*.c")) + sorted(nanopb_dir.rglob("*.pb.c"))
    built = _compile_shared("libgslice", sources, [HOOK_DIR, INCLUDE_DIR, nanopb_dir, Path("/usr/include")],
                            [str(find_nanopb_runtime())], ["nghttp2", "dl"], work_dir / "lib")
    lib_dir = package_dir / "lib"
    lib_dir.mkdir(parents=True, exist_ok=True)
    target = lib_dir / "libgslice.so"
    tmp = lib_dir / ".libgslice.so.tmp"
    shutil.copyfile(built, tmp)
    os.replace(tmp, target)   # atomic: running processes keep the old inode
    return target


def shim_api_cdef() -> str:
    """shim_api.h as cffi's cdef wants it: the declarations without the
    preprocessor lines and comments (the header stays the one source)."""
    text = (HOOK_DIR / "shim_api.h").read_text()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


def build_shim_api(package_dir: Path, work_dir: Path) -> Path:
    """API-mode cffi module gslice._shim_api, linked against lib/libgslice.so."""
    import cffi

    ffi = cffi.FFI()
    ffi.cdef(shim_api_cdef())
    ffi.set_source(
        "gslice._shim_api",
        '#include "shim_api.h"',
        include_dirs=[str(HOOK_DIR)],
        library_dirs=[str(package_dir / "lib")],
        libraries=[":libgslice.so"],
        extra_link_args=["-Wl,-rpath,$ORIGIN/lib"],
    )
    out_dir = work_dir / "shim_api"
    out_dir.mkdir(parents=True, exist_ok=True)
    cwd = os.getcwd()
    os.chdir(out_dir)
    try:
        built = Path(ffi.compile(tmpdir=str(out_dir), verbose=False))
    finally:
        os.chdir(cwd)
    target = package_dir / built.name
    shutil.copyfile(built, target)
    return target


def build(package_dir: Path, nanopb_dir: Path, work_dir: Path) -> None:
    package_dir = Path(package_dir)
    build_library(package_dir, Path(nanopb_dir), Path(work_dir))
    build_shim_api(package_dir, Path(work_dir))
