"""Memory routes real frameworks use, under the shim on the strict
simulated GPU with the real tokend: virtual memory (PyTorch expandable
segments, NCCL), stream-ordered pools (cudaMallocAsync, RMM), context
teardown, and the memory every context costs (two groups whose quotas add
up to the GPU's memory, four processes each, never see a real
out-of-memory error)."""
from __future__ import annotations

import subprocess

import pytest

from shim_harness import group_env, parse_kv, wait_for_line

MiB = 1 << 20


def run_probe(runner, tokend, memory_probe, mode, **extra):
    created = tokend.admin().create_group("g", request=0.5, memory="2GiB")
    env = runner.env(**group_env(tokend, "g", created.secret), **extra)
    r = subprocess.run([str(memory_probe), mode], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, (r.stdout, r.stderr)
    return parse_kv(r.stdout)


def test_vmm_charge_stays_until_unmap_and_retains_give_nothing_back_early(runner, tokend, memory_probe):
    out = run_probe(runner, tokend, memory_probe, "vmm")
    assert out["after_create"] == str(64 * MiB)
    assert out["same_handle"] == "1"
    assert out["after_retain_release"] == str(64 * MiB)        # a retain/release pair gives nothing back
    assert out["after_release_while_mapped"] == str(64 * MiB)  # released while mapped: still held
    assert out["after_unmap"] == "0"
    assert out["after_host_numa_create"] == "0"                # host NUMA memory is not device memory


def test_pool_primed_then_freed_keeps_its_charge_until_trimmed(runner, tokend, memory_probe):
    out = run_probe(runner, tokend, memory_probe, "pool")
    assert out["after_prime"] == str(128 * MiB)
    assert out["after_free"] == str(128 * MiB)    # the pool keeps what it reserved (threshold: everything)
    assert out["after_reuse"] == str(128 * MiB)   # reuse takes no new memory
    assert out["after_trim"] == "0"


def test_context_teardown_gives_its_allocations_and_reserve_back(runner, tokend, memory_probe):
    out = run_probe(runner, tokend, memory_probe, "teardown", GSLICE_CONTEXT_RESERVE_MIB=100)
    start = int(out["start"])
    assert start == 100 * MiB                                   # the primary context's reserve
    assert int(out["created_with_alloc"]) == start + 100 * MiB + 64 * MiB
    assert int(out["after_destroy"]) == start
    assert int(out["primary_with_alloc"]) == start + 64 * MiB
    assert int(out["after_reset"]) == start                     # reset freed the primary's allocations


@pytest.mark.parametrize("reserve_mib", [300, 0])
def test_quotas_summing_to_gpu_memory_never_cause_a_real_oom(runner, tokend, reserve_mib):
    """8 GiB GPU, groups of 4 GiB each, 4 processes per group, each context
    costing 256 MiB that no allocation call shows. Without any charge for
    it (the shim before this change) the contexts' memory pushed the GPU
    over and some process got the driver's own out-of-memory error. With a
    per-context reserve at least that large (300 MiB), or with none (0) and
    only the reconciliation against NVML's per-process used memory, every
    refusal is the shim's (the group's quota). With none, every context
    exists before the first allocation: a context made after its group
    filled its quota is on the GPU uncharged and pushes it over, which is
    what the reserve is for (with 300 MiB such a context is refused). Once
    allocations went faster (client.calls), the last processes to start
    often came after their group was full: real OOMs in 3 runs of 6."""
    admin = tokend.admin()
    envs = []
    for name in "ab":
        created = admin.create_group(name, request=0.5, memory=str(4 << 30))
        envs.append(group_env(tokend, name, created.secret, GSLICE_CONTEXT_RESERVE_MIB=reserve_mib,
                              GSLICE_SIM_CONTEXT_MEMORY=str(256 * MiB), GSLICE_SIM_MEMORY="8GiB"))
    gated = ["gated"] if reserve_mib == 0 else []
    procs = [runner.start("alloc", "driver", 128 * MiB, 100, "wait", *gated, stdin=True, **env) for env in envs
             for _ in range(4)]
    if gated:
        for p in procs:
            wait_for_line(p, "context-ready=1", timeout=120)
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
    results = []
    for p in procs:
        first = wait_for_line(p, "", timeout=120)
        # A process that starts when its group is already at quota is
        # refused its context (its reserve): CUDA_ERROR_OUT_OF_MEMORY there.
        if first.startswith("error=cuDevicePrimaryCtxRetain:2"):
            results.append({"last_result": "2", "bytes": "0"})
        else:
            results.append(parse_kv(first + wait_for_line(p, "total=", timeout=120, collect=True)))
    errors = []
    for p in procs:
        _, err = p.communicate(timeout=30)   # closes stdin: the process frees and exits
        errors.append(err)
    for kv in results:
        assert int(kv["last_result"]) == 2                      # every process ended at an out-of-memory
    refused_by_shim = ["refused: group" in err or "memory quota" in err for err in errors]
    assert all(refused_by_shim), errors
    if reserve_mib:
        # each group got (close to) its quota minus its processes' context reserves
        for group in range(2):
            got = sum(int(kv["bytes"]) for kv in results[group * 4:(group + 1) * 4])
            assert got >= (4 << 30) - 4 * reserve_mib * MiB - 4 * 128 * MiB


def test_device_copies_and_fills_are_gated_and_charged_host_copies_are_not(runner, tokend, memory_probe):
    """50 x 4 MiB device copies + 50 x 4 MiB fills at 1 GB/s of simulated
    device bandwidth = ~420 ms of engine time, beside a group that keeps
    the GPU busy: they wait for tokens and the slices charge that time.
    Host-to-device copies (copy engines) do not take tokens."""
    admin = tokend.admin()
    b = admin.create_group("b", request=0.5, limit=1.0, memory="1GiB")
    busy = runner.start("loop", "driver", 30, 200_000, 0, **group_env(tokend, "b", b.secret))
    wait_for_line(busy, "ready=", timeout=30)
    out = run_probe(runner, tokend, memory_probe, "copies", GSLICE_SIM_DEVICE_GBPS="1", GSLICE_SIM_COPY_GBPS="100")
    busy.kill()
    assert int(out["device_copy_slow_entries"]) >= 1
    assert int(out["device_copy_used_us"]) >= 0.9 * 100 * 4 * MiB / 1e3   # bytes / (1 GB/s) in us
    assert out["host_copy_slow_entries"] == "0"


def test_context_memory_beyond_the_reserve_is_charged_from_nvml(runner, tokend, memory_probe):
    """The simulated context costs 512 MiB, the shim's reserve is 100 MiB:
    the charge follows NVML's per-process used memory (context +
    allocation) plus the growth margin, not the reserve."""
    out = run_probe(runner, tokend, memory_probe, "overhead", GSLICE_CONTEXT_RESERVE_MIB=100,
                    GSLICE_CONTEXT_GROWTH_MARGIN_MIB=32, GSLICE_SIM_CONTEXT_MEMORY=str(512 * MiB))
    assert int(out["after_query"]) == 512 * MiB + 64 * MiB + 32 * MiB
