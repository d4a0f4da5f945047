"""A context that grows after its allocations stays inside the quota as the
driver sees it. On a real GPU the context grows without any allocation call:
lazily loaded kernels at their first launch, cuBLAS's state at its first
matmul (an H100 under a 4 GiB quota: PyTorch filled memory after a matmul and
NVML's per-process figure ended at 4134 MiB). The simulated GPU reproduces it
with GSLICE_SIM_MODULE_LOAD_MEMORY (each distinct kernel's first launch adds
to the context). The shim reconciles against NVML's per-process used memory
before each allocation's reservation (hook/process_overhead.h) and keeps
GSLICE_CONTEXT_GROWTH_MARGIN_MIB charged above it, so the process's peak
footprint in the driver's accounting never exceeds the quota."""
from __future__ import annotations

import subprocess

from shim_harness import group_env, parse_kv

MiB = 1 << 20
QUOTA = 1024 * MiB
CONTEXT = 48 * MiB       # the simulated context's own memory
MODULE = 16 * MiB        # each distinct kernel's first launch
RESERVE_MIB = 64         # the shim's per-context reserve
MARGIN_MIB = 64          # the shim's growth margin
CHUNK_MIB = 4


def fill(runner, tokend, memory_probe, sim_name, warm, every, after, margin_mib=MARGIN_MIB):
    """Runs lazy_fill in a group with a 1 GiB quota; returns its output, its
    stderr and its peak device memory in the simulator's per-process
    accounting (what NVML reports for it)."""
    import gslice.simgpu as simgpu

    created = tokend.admin().create_group("g", request=0.5, memory=str(QUOTA))
    env = runner.env(**group_env(tokend, "g", created.secret, GSLICE_CONTEXT_RESERVE_MIB=RESERVE_MIB,
                                 GSLICE_CONTEXT_GROWTH_MARGIN_MIB=margin_mib, GSLICE_SIM_CONTEXT_MEMORY=str(CONTEXT),
                                 GSLICE_SIM_MODULE_LOAD_MEMORY=str(MODULE)))
    p = subprocess.Popen([str(memory_probe), "lazy_fill", str(warm), str(CHUNK_MIB), str(every), str(after)],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == 0, (stdout, stderr)
    out = parse_kv(stdout)
    with simgpu.SimGpu(sim_name) as gpu:
        peak = gpu.process(p.pid).memory_peak
    return out, stderr, peak


def context_memory(out) -> int:
    return CONTEXT + int(out["kernels"]) * MODULE


def test_growth_before_the_fill_is_charged_before_the_allocations(runner, tokend, memory_probe, sim_name):
    """16 kernels' first launches (256 MiB) before filling 4 MiB at a time,
    as PyTorch did on the H100 after a matmul: the first allocation charges
    the growth, the fill stops at the quota less the context's memory and
    the margin, and the process never holds more than the quota."""
    out, err, peak = fill(runner, tokend, memory_probe, sim_name, warm=16, every=0, after=0)
    assert out["last_result"] == "2"                            # CUDA_ERROR_OUT_OF_MEMORY, from the shim
    assert "refused: group g memory quota" in err, err
    assert peak <= QUOTA, (peak - QUOTA) / MiB
    # It was not refused early: everything but the context and the margin was allocated.
    hidden = context_memory(out)
    assert int(out["allocated"]) >= QUOTA - hidden - MARGIN_MIB * MiB - CHUNK_MIB * MiB
    assert int(out["held"]) == int(out["allocated"]) + max(RESERVE_MIB * MiB, hidden + MARGIN_MIB * MiB)


def test_growth_during_and_after_the_fill_stays_inside_the_quota(runner, tokend, memory_probe, sim_name):
    """A new kernel (16 MiB) before every 8th allocation of 4 MiB, then two
    more (32 MiB, within the 64 MiB margin) once the quota is full: near the
    quota every allocation reconciles first, so the growth is charged (or
    the allocation refused) before the real call, and what comes after the
    last allocation fits the margin."""
    out, err, peak = fill(runner, tokend, memory_probe, sim_name, warm=0, every=8, after=2)
    assert out["last_result"] == "2"
    assert peak <= QUOTA, (peak - QUOTA) / MiB
    hidden = context_memory(out)
    assert int(out["allocated"]) >= QUOTA - hidden - MARGIN_MIB * MiB - CHUNK_MIB * MiB - MODULE


def test_growth_beyond_the_margin_after_the_last_allocation_is_what_remains(runner, tokend, memory_probe,
                                                                             sim_name):
    """The documented limit, and why the margin: with none, the footprint
    ends above the quota by what grew after the last allocation (two new
    kernels) plus, at most, growth the last allocation found but could not
    charge (one kernel)."""
    out, err, peak = fill(runner, tokend, memory_probe, sim_name, warm=0, every=8, after=2, margin_mib=0)
    assert out["last_result"] == "2"
    assert QUOTA < peak <= QUOTA + 3 * MODULE
