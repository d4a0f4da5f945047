"""cuGetProcAddress edge cases the CUDA runtime can hit: a request below
every table row's version passes through untouched (it may name an older
variant with another signature), and a second, different driver pointer
for the same row (e.g. answered for other flags) is still metered."""
from __future__ import annotations

import subprocess

from shim_harness import PROGRAMS, ROOT, group_env, parse_kv


def test_routes_below_rows_and_second_pointers(runner, tokend, sim_lib_dir, build_dir):
    exe = build_dir / "routes_probe"
    subprocess.run(["gcc", "-O2", "-Wall", f"-I{ROOT / 'include'}", str(PROGRAMS / "routes_probe.c"), "-ldl",
                    "-o", str(exe)], check=True)
    created = tokend.admin().create_group("g", request=0.5, memory="1GiB")
    env = runner.env(**group_env(tokend, "g", created.secret), GSLICE_SIM_PROC_ADDRESS_VARIANTS="1")
    r = subprocess.run([str(exe)], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, (r.stdout, r.stderr)
    out = parse_kv(r.stdout)
    assert out["below_rows_object"] == "libcuda.so.1"
    assert out["pointers_differ"] == "1"
    assert out["default_object"] == "libgslice.so" and out["legacy_flag_object"] == "libgslice.so"
    assert int(out["second_pointer_tokens"]) >= 1
    assert int(out["second_pointer_slow_entries"]) >= 1
    assert "not metered" not in r.stderr
