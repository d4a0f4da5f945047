"""Build libgslice.so (the LD_PRELOAD shim) and gslice._shim_api (its test handle).

Called by tools/build_native.py (target `hook`) as
build(package_dir, nanopb_dir, work_dir, cc, version).

The compiler comes from the caller (tools/toolchain.py chooses: zig's clang
targeting glibc 2.17 by default, or the system gcc), so the library loads
wherever CUDA runs (FIELD-NOTES section 9).

Either way HTTP/2 (nghttp2, compiled from third_party/nghttp2) and protobuf
(nanopb's runtime, compiled from third_party/nanopb) are linked in and
hidden: NEEDED is glibc's own libraries only (libc, and
libdl/libpthread, where glibc < 2.34 keeps dlopen/pthread_create), and the
exports are only the table's entry points, dlsym and the gslice_* API.
Plain C compiled straight with the compiler (no Python symbols, no run
path; loads under LD_BIND_NOW=1). Objects are cached by content, so a
rebuild after a one-file change recompiles one file.

Sources: every hook/*.c (a new file there is picked up), the nanopb code
generated from proto/, third_party/nanopb/pb_*.c and third_party/nghttp2/lib/*.c.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HOOK_DIR = Path(__file__).resolve().parent
ROOT = HOOK_DIR.parent
INCLUDE_DIR = ROOT / "include"
NGHTTP2_DIR = ROOT / "third_party" / "nghttp2" / "lib"
# nanopb's runtime (pb_*.c, pb*.h), carried at the generator's version (0.4.7).
NANOPB_RUNTIME_DIR = ROOT / "third_party" / "nanopb"

# The RPC client and what it needs (no CUDA): also built alone, into the
# C RPC tests' driver (tests/rpc_client) and the rpc_roundtrip benchmark.
RPC_CLIENT_SOURCES = ["rpc_client.c", "rpc_call.c", "rpc_routes.c", "rpc_session.c", "rpc_io_thread.c",
                      "h2_connection.c", "rpc_codec.c", "calls_socket.c"]

CFLAGS = ["-std=gnu11", "-O2", "-g", "-fvisibility=hidden", "-fPIC", "-pthread", "-Wall", "-Wextra",
          "-ftls-model=initial-exec", "-fno-plt"]
# nghttp2 built as upstream's static library (no visibility("default") on
# its API), with the two headers its configure would have found.
NGHTTP2_CFLAGS = ["-DNGHTTP2_STATICLIB", "-DHAVE_ARPA_INET_H", "-DHAVE_NETINET_IN_H", "-Wno-unused-parameter"]
LDFLAGS = ["-shared", "-pthread", "-Wl,-z,now,-z,relro", "-Wl,--no-undefined", "-Wl,-soname,libgslice.so",
           f"-Wl,--version-script,{HOOK_DIR / 'exports.map'}"]
# dlopen/dlvsym and pthread_* live in libdl/libpthread before glibc 2.34.
LIBRARIES = ["-ldl", "-lpthread"]

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

# GSLICE_TEST_CUT=gate|ledger_refusal|... (TEST_CUTS) with GSLICE_TEST_CUT_OUTPUT=/path/libgslice.so:
# a build with one feature cut out (one #ifdef where the shim decides), for
# the tests that must fail without it (tests/shim/shim_harness.py, fixture
# shim_build). Written only to GSLICE_TEST_CUT_OUTPUT: never into the package.
TEST_CUTS = {
    "gate": "GSLICE_TEST_CUT_GATE",                      # launches never wait for or take tokens
    "ledger_refusal": "GSLICE_TEST_CUT_LEDGER_REFUSAL",  # allocations over the quota go through
    "unmeasured_one_at_a_time": "GSLICE_TEST_CUT_UNMEASURED_ONE_AT_A_TIME",  # first launches queue freely
    "lengths_with_the_ask": "GSLICE_TEST_CUT_LENGTHS_WITH_THE_ASK",  # a token is asked for before drained lengths are in
    "ring_at_lease_resume": "GSLICE_TEST_CUT_RING_AT_LEASE_RESUME",  # a lease resumes past a ring it heard idle
    "copy_work_keys": "GSLICE_TEST_CUT_COPY_WORK_KEYS",  # copies and fills share no length estimate of their own
    "ring_read_at_launch": "GSLICE_TEST_CUT_RING_READ_AT_LAUNCH",  # only the listener thread acts on a ring
    "alone_queue": "GSLICE_TEST_CUT_ALONE_QUEUE",  # a holder alone on the GPU queues no deeper than a shared one
    "wrap_up_at_work_end": "GSLICE_TEST_CUT_WRAP_UP_AT_WORK_END",  # a wrap-up waits for the renewal point
}


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()[:24]


def _headers_digest(include_dirs: list[Path]) -> bytes:
    """One digest over every header a source could include from our folders
    (the target's system headers are fixed by the compiler command in the key)."""
    h = hashlib.sha256()
    for d in include_dirs:
        for header in sorted(d.rglob("*.h")):
            h.update(str(header).encode())
            h.update(header.read_bytes())
    return h.digest()


def _compile_objects(cc: list[str], units: list[tuple[Path, list[str]]], headers: bytes,
                     obj_dir: Path) -> list[Path]:
    """Compiles (source, flags) pairs into obj_dir, reusing an object whose
    source, headers (digest) and command are unchanged."""
    obj_dir.mkdir(parents=True, exist_ok=True)

    def one(unit: tuple[Path, list[str]]) -> Path:
        source, flags = unit
        key = _digest(" ".join(cc + flags).encode(), headers, source.read_bytes())
        obj = obj_dir / f"{source.stem}-{key}.o"
        if not obj.exists():
            tmp = obj.with_suffix(f".{os.getpid()}.tmp")
            cmd = [*cc, *flags, "-c", str(source), "-o", str(tmp)]
            result = subprocess.run(cmd, capture_output=True, text=True)
            if result.returncode != 0:
                raise RuntimeError(f"compiling {source.name} failed:\n{' '.join(cmd)}\n{result.stderr}")
            os.replace(tmp, obj)
        return obj

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return list(pool.map(one, units))


def library_sources(nanopb_dir: Path) -> tuple[list[Path], list[Path]]:
    """(gslice sources incl. generated protobuf code and nanopb's runtime, nghttp2 sources)."""
    ours = (sorted(HOOK_DIR.glob("*.c")) + sorted(Path(nanopb_dir).rglob("*.pb.c"))
            + sorted(NANOPB_RUNTIME_DIR.glob("pb_*.c")))
    nghttp2 = sorted(NGHTTP2_DIR.glob("*.c"))
    if not nghttp2:
        raise RuntimeError(f"no nghttp2 sources in {NGHTTP2_DIR} (python tools/vendor_nghttp2.py restores them)")
    return ours, nghttp2


def build_library(package_dir: Path, nanopb_dir: Path, work_dir: Path, cc: list[str], version: str,
                  cut: str | None = None, cut_output: Path | None = None) -> Path:
    """Builds libgslice.so into package_dir/lib; with `cut` (a TEST_CUTS
    name), the test-only build with that feature cut out, to cut_output."""
    nanopb_dir = Path(nanopb_dir)
    include_dirs = [HOOK_DIR, INCLUDE_DIR, nanopb_dir, NGHTTP2_DIR / "includes", NANOPB_RUNTIME_DIR]
    headers = _headers_digest(include_dirs + [NGHTTP2_DIR])
    includes = [f"-I{d}" for d in include_dirs]
    ours, nghttp2 = library_sources(nanopb_dir)
    # The package's version (python/gslice/__init__.py) is the shim's too.
    cut_flags = [f"-D{TEST_CUTS[cut]}"] if cut else []
    units = [(s, [*CFLAGS, f'-DGSLICE_VERSION="{version}"', *cut_flags, *includes]) for s in ours]
    units += [(s, [*CFLAGS, *NGHTTP2_CFLAGS, f"-I{NGHTTP2_DIR}", f"-I{NGHTTP2_DIR / 'includes'}"]) for s in nghttp2]
    out_dir = Path(work_dir) / _digest(" ".join(cc + cut_flags).encode())[:12]
    objects = _compile_objects(cc, units, headers, out_dir / "obj")

    built = out_dir / "libgslice.so"
    cmd = [*cc, *LDFLAGS, "-o", str(built), *map(str, objects), *LIBRARIES]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"linking libgslice.so failed:\n{' '.join(cmd)}\n{result.stderr}")

    target = Path(cut_output) if cut else Path(package_dir) / "lib" / "libgslice.so"
    lib_dir = target.parent
    lib_dir.mkdir(parents=True, exist_ok=True)
    tmp = lib_dir / f".{target.name}.tmp"
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
    """API-mode cffi module gslice._shim_api, linked against lib/libgslice.so.
    A CPython extension for the tests only: the wheel leaves it out."""
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
    os.chdir(out_dir)   # distutils would read the project's pyproject.toml from the cwd
    try:
        built = Path(ffi.compile(tmpdir=str(out_dir), verbose=False))
    finally:
        os.chdir(cwd)
    target = package_dir / built.name
    shutil.copyfile(built, target)
    return target


def build(package_dir: Path, nanopb_dir: Path, work_dir: Path, cc: list[str], version: str,
          shim_api: bool = True) -> None:
    """cc: the compiler command (tools/toolchain.py); shim_api: also build
    the tests' CPython module (not for the wheel)."""
    package_dir = Path(package_dir)
    cut = os.environ.get("GSLICE_TEST_CUT", "")
    if cut:
        output = os.environ.get("GSLICE_TEST_CUT_OUTPUT", "")
        if cut not in TEST_CUTS or not output or not shim_api:
            raise SystemExit(f"GSLICE_TEST_CUT={cut!r} GSLICE_TEST_CUT_OUTPUT={output!r}: expected a cut in "
                             f"{sorted(TEST_CUTS)} and an output path, in a tests' build (not a wheel's)")
        build_library(package_dir, Path(nanopb_dir), Path(work_dir), cc, version, cut=cut, cut_output=Path(output))
        return
    build_library(package_dir, Path(nanopb_dir), Path(work_dir), cc, version)
    if shim_api:
        build_shim_api(package_dir, Path(work_dir))
