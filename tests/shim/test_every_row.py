"""Every row of the intercept table is called at least once under the shim
(tests/shim/programs/rows_check.c: each row by its exported name, the
wrapper the preloaded shim exports, with arguments the simulated driver
accepts), with a group and the real tokend; and every driver row's base
name, asked of cuGetProcAddress_v2, answers a shim wrapper. A new row that the program
does not know fails the test until it is added there."""
from __future__ import annotations

import subprocess

from shim_harness import PROGRAMS, ROOT, group_env, parse_kv


def test_every_intercept_row_is_called_under_the_shim(runner, tokend, sim_lib_dir, build_dir):
    exe = build_dir / "rows_check"
    subprocess.run(["gcc", "-O2", "-Wall", f"-I{ROOT / 'include'}", str(PROGRAMS / "rows_check.c"),
                    f"-L{sim_lib_dir}", "-l:libcuda.so.1", "-l:libnvidia-ml.so.1", "-ldl", "-o", str(exe)], check=True)
    created = tokend.admin().create_group("g", request=0.5, memory="2GiB")
    r = subprocess.run([str(exe)], env=runner.env(**group_env(tokend, "g", created.secret)), capture_output=True,
                       text=True, timeout=120)
    rows = [line for line in r.stdout.splitlines() if line.startswith("row=")]
    assert r.returncode == 0, (r.stdout, r.stderr[-3000:])
    assert "unhandled=" not in r.stdout
    assert "proc_unrouted=" not in r.stdout   # every driver row's base name, by cuGetProcAddress_v2
    assert int(parse_kv(r.stdout)["proc_routed"]) >= 70
    names = {parse_kv(line.replace(" ", "\n"))["row"] for line in rows}
    from gslice import _shim_api  # the table, as the built library has it
    table = {_shim_api.ffi.string(_shim_api.lib.gslice_intercept_name(i)).decode()
             for i in range(_shim_api.lib.gslice_intercept_count())}
    assert names == table
    assert len(table) >= 80
