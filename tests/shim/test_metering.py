"""Both routes to the driver are metered: tokens for launches, the group
quota for allocations, the group's view in memory queries."""
from __future__ import annotations

import subprocess

import pytest

from shim_harness import GATE_CUT, LEDGER_REFUSAL_CUT, assert_charged_for, group_env, parse_kv, wait_for_line

MiB = 1 << 20


@pytest.mark.parametrize("route,stream,shim_build", [
    ("driver", "legacy", "normal"), ("driver", "ptsz", "normal"), ("runtime", "legacy", "normal"),
    ("runtime", "ptsz", "normal"), ("driver", "legacy", GATE_CUT)], indirect=["shim_build"])
def test_launches_take_tokens(runner, tokend, route, stream, shim_build):
    admin = tokend.admin()
    created = admin.create_group("g", request=0.5, limit=1.0, memory="1GiB")
    launches, kernel_ns = 500, 20000
    rc, out, err = runner.run("launch", route, launches, kernel_ns, stream, **group_env(tokend, "g", created.secret))
    assert rc == 0, err
    assert out["launched"] == str(launches)
    with shim_build.expect_feature():
        assert_charged_for(admin, "g", launches * kernel_ns / 1e9)


def test_runtime_route_hands_out_our_wrappers_and_keeps_ptsz(runner, tokend):
    created = tokend.admin().create_group("g", request=0.5, memory="1GiB")
    rc, out, err = runner.run("routes", **group_env(tokend, "g", created.secret))
    assert rc == 0, err
    assert out["dlsym_proc_is_export"] == "1"   # dlsym on libcuda's handle -> our cuGetProcAddress_v2
    assert out["legacy_is_export"] == "1"
    assert out["ptsz_is_export"] == "1"         # (cuLaunchKernel, 7000, PTDS) -> our _ptsz wrapper
    assert out["ptsz_differs"] == "1"           # never folded into the legacy-stream variant
    assert out["proc_v2_is_export"] == "1"
    assert out["ptsz_object"].endswith("libgslice.so")
    assert out["handle_alloc_object"].endswith("libgslice.so")


def test_without_a_group_everything_passes_through(runner, tokend):
    rc, out, err = runner.run("launch", "runtime", 200, 10000, GSLICE_SOCKET=tokend.client_socket,
                              GSLICE_LOG_LEVEL="info")
    assert rc == 0, err
    assert "GSLICE_GROUP is not set" in err
    assert tokend.admin().status().clients == []


@pytest.mark.parametrize("route,shim_build", [("driver", "normal"), ("runtime", "normal"),
                                               ("driver", LEDGER_REFUSAL_CUT)], indirect=["shim_build"])
def test_allocations_stop_at_the_quota_and_meminfo_agrees(runner, tokend, route, shim_build):
    created = tokend.admin().create_group("g", request=0.5, memory="1GiB")
    rc, out, err = runner.run("alloc", route, 100 * MiB, 100, **group_env(tokend, "g", created.secret))
    assert rc == 0, err
    with shim_build.expect_feature():
        assert int(out["allocated"]) == 10        # 10 x 100 MiB fit in 1 GiB, the 11th does not
        assert int(out["last_result"]) == 2       # CUDA_ERROR_OUT_OF_MEMORY
        assert "refused: group g memory quota 1073741824 bytes" in err
    assert int(out["total"]) == 1 << 30           # the group's view: min(quota, physical)
    assert int(out["free"]) == (1 << 30) - 1000 * MiB


def test_disabled_shim_does_not_meter(runner, tokend):
    created = tokend.admin().create_group("g", request=0.5, memory="100MiB")
    rc, out, err = runner.run("alloc", "driver", 100 * MiB, 3, GSLICE_DISABLE=1,
                              **group_env(tokend, "g", created.secret))
    assert rc == 0, err
    assert out["allocated"] == "3"


@pytest.mark.parametrize("shim_build", ["normal", LEDGER_REFUSAL_CUT], indirect=True)
def test_concurrent_allocators_never_exceed_the_quota(runner, tokend, shim_build):
    quota = 1 << 30
    created = tokend.admin().create_group("g", request=0.5, memory=str(quota))
    env = group_env(tokend, "g", created.secret)
    chunk = 64 * MiB
    procs = [runner.start("alloc", "driver", chunk, 100, "wait", **env, stdin=True) for _ in range(4)]
    results = [parse_kv(wait_for_line(p, "total=", timeout=120, collect=True)) for p in procs]
    # All four hold their memory now (none has exited and given any back).
    totals = [int(kv["bytes"]) for kv in results]
    for kv in results:
        assert int(kv["total"]) == quota
    with shim_build.expect_feature():
        for kv in results:
            assert int(kv["last_result"]) == 2
            # cuMemGetInfo inside never reports more free than the quota leaves.
            assert int(kv["free"]) <= quota - int(kv["bytes"])
        assert sum(totals) <= quota
    assert sum(totals) >= quota // chunk * chunk   # the quota was used up, not under-granted
    with shim_build.expect_feature():
        assert tokend.admin().status().group("g").memory_used == sum(totals)
    for p in procs:
        p.stdin.close()
        p.wait(timeout=30)


NVML_PROBE = """
import json, pynvml
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
v1 = pynvml.nvmlDeviceGetMemoryInfo(h)
v2 = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
print(json.dumps({"v1": [v1.total, v1.free, v1.used], "v2": [v2.total, v2.free, v2.used, v2.reserved]}))
"""


def test_nvml_reports_the_groups_memory_view(tmp_path):
    """What nvidia-smi shows inside a container: total = quota, free = quota - used."""
    import json
    import sys

    from gslice.experiment import SharingExperiment

    with SharingExperiment(tmp_path, gpu="sim", sim_memory="16GiB") as exp:
        exp.add_group("g", request=0.5, memory="3GiB")
        holder = exp.spawn_workload("g", ["alloc", "--chunk-mib", "512", "--count", "2", "--hold-seconds", "60"])
        holder.stdout.readline()  # it holds 1 GiB now
        probe = exp.spawn("g", [sys.executable, "-c", NVML_PROBE], stdout=subprocess.PIPE, text=True)
        out, _ = probe.communicate(timeout=60)
        view = json.loads(out)
    gib = 1 << 30
    # "used" includes the holder's context reserve (GSLICE_CONTEXT_RESERVE_MIB, default 512 MiB).
    used = gib + (512 << 20)
    assert view["v1"] == [3 * gib, 3 * gib - used, used]
    assert view["v2"] == [3 * gib, 3 * gib - used, used, 0]
