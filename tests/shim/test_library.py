"""libgslice.so as a file: what it needs, what it exports, where it loads."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from shim_harness import ROOT

HOOK = ROOT / "hook"


def table_names() -> set[str]:
    text = (HOOK / "intercept_table.h").read_text()
    return set(re.findall(r"^\s*X\((\w+),", text, flags=re.M))


def test_needed_libraries_are_only_glibcs(shim_path):
    # nghttp2 and nanopb are linked in: a NEEDED library missing from a
    # container's image would make every program there exit 127.
    out = subprocess.run(["readelf", "-d", str(shim_path)], capture_output=True, text=True, check=True).stdout
    needed = set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out))
    assert needed <= {"libc.so.6", "libdl.so.2", "libpthread.so.0"}, needed
    assert "libc.so.6" in needed
    assert "RUNPATH" not in out and "RPATH" not in out


def test_no_python_symbols(shim_path):
    out = subprocess.run(["nm", "-D", "--undefined-only", str(shim_path)], capture_output=True, text=True,
                         check=True).stdout
    assert not [line for line in out.splitlines() if " Py" in line or "_Py" in line]
    ldd = subprocess.run(["ldd", str(shim_path)], capture_output=True, text=True).stdout
    assert "python" not in ldd


def test_exports_exactly_the_table_dlsym_and_the_c_api(shim_path):
    out = subprocess.run(["nm", "-D", "--defined-only", str(shim_path)], capture_output=True, text=True,
                         check=True).stdout
    exported = {line.split()[-1] for line in out.splitlines() if line.strip()}
    api = {name for name in exported if name.startswith("gslice_")}
    assert exported - api == table_names() | {"dlsym"}
    assert api, "the gslice_* C API is missing"
    # The launch and allocation routes named in the design are all there.
    for name in ("cuLaunchKernel_ptsz", "cuLaunchKernelEx_ptsz", "cuGraphLaunch_ptsz", "cuMemAllocAsync_ptsz",
                 "cuMemCreate", "cuMemGetInfo_v2", "nvmlDeviceGetMemoryInfo_v2", "cuGetProcAddress_v2"):
        assert name in exported


def test_loads_with_bind_now_into_true(shim_path):
    r = subprocess.run(["/bin/true"], env={"LD_PRELOAD": str(shim_path), "LD_BIND_NOW": "1"},
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""


def test_loads_into_python_and_sh_without_connecting_or_threads(shim_path, tmp_path):
    # A process that never calls CUDA must not connect or start threads,
    # even with a group configured and a socket path that does not exist.
    code = "import os; print(len(os.listdir('/proc/self/task')))"
    env = {"LD_PRELOAD": str(shim_path), "LD_BIND_NOW": "1", "GSLICE_GROUP": "g",
           "GSLICE_SOCKET": str(tmp_path / "missing.sock"), "GSLICE_LOG_LEVEL": "debug"}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "1"
    assert "gslice" not in r.stderr
    r = subprocess.run(["/bin/sh", "-c", "echo hi"], env=env, capture_output=True, text=True)
    assert r.stdout == "hi\n" and "gslice" not in r.stderr


def test_dlsym_rtld_next_still_means_after_the_caller(shim_path, tmp_path):
    # A preloaded malloc wrapper that finds the next malloc with RTLD_NEXT:
    # with our dlsym in between, it must still get libc's, not itself.
    src = tmp_path / "wrap.c"
    src.write_text(r'''
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>
static void *(*next_malloc)(size_t);
static int calls;
void *malloc(size_t n) {
    if (!next_malloc) next_malloc = (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc");
    if (calls++ > 100000) { write(2, "recursion\n", 10); _exit(9); }
    calls--;
    return next_malloc(n);
}
''')
    lib = tmp_path / "libwrap.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", str(src), "-o", str(lib), "-ldl"], check=True)
    r = subprocess.run(["/bin/sh", "-c", "echo ok"], env={"LD_PRELOAD": f"{shim_path}:{lib}"},
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and r.stdout == "ok\n", r.stderr


def test_shim_api_module():
    api = pytest.importorskip("gslice._shim_api")
    assert api.ffi.string(api.lib.gslice_version()).startswith(b"gslice-shim")
    names = {api.ffi.string(api.lib.gslice_intercept_name(i)).decode()
             for i in range(api.lib.gslice_intercept_count())}
    assert names == table_names()
    stats = api.ffi.new("gslice_shim_stats *")
    # This test process has no slot (it never used CUDA through the shim).
    assert api.lib.gslice_shim_stats_get(stats) == -1
    assert api.lib.gslice_ledger_lookup_ptr(0x1234) == 0
