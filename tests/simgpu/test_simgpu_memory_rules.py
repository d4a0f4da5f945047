"""Memory rules of the simulated driver that real frameworks rely on and a
simple simulator would hide: virtual-memory references and mappings,
host-NUMA cuMemCreate, the stream-ordered pool's reserve (threshold,
trim), the device memory every context costs (seen by NVML's per-process
used memory), context teardown, device-side copy/fill time."""
from __future__ import annotations

from gslice import simgpu

MiB = 1 << 20


def test_memory_rules(programs, processes, sim_name, parse):
    environ = simgpu.env(sim_name, memory="4GiB", context_memory=256 * MiB)
    environ["GSLICE_SIM_DEVICE_GBPS"] = "1"     # 128 MiB of copy + fill = ~134 ms of engine time
    v = parse(processes.run([programs["memory_rules_check"]], environ).stdout)
    # Each context costs device memory no allocation call shows; NVML sees it.
    assert v["nvml_before_context"] == "0"
    assert v["context_overhead"] == str(256 * MiB)
    assert v["nvml_with_context"] == str(256 * MiB)
    # VMM: retain gives the same handle; released twice while mapped, the
    # memory stays until the unmap; the handle is gone after its last release.
    assert v["retain_same_handle"] == "1"
    assert v["vmm_held_after_releases"] == str(8 * MiB)
    assert v["vmm_release_again"] == "1"      # CUDA_ERROR_INVALID_VALUE
    assert v["vmm_held_after_unmap"] == "0"
    assert v["host_numa_counted"] == "0"      # host NUMA memory is not device memory
    # Pool: freed blocks stay reserved up to the threshold, are reused, and trim gives them back.
    assert v["pool_reserved_after_free"] == str(32 * MiB) and v["pool_held_after_free"] == str(32 * MiB)
    assert v["pool_reuse_held"] == str(32 * MiB)
    assert v["pool_reserved_after_trim"] == "0" and v["pool_held_after_trim"] == "0"
    # Teardown frees a context's allocations and overhead without any free call.
    assert v["created_context_cost"] == str(256 * MiB + 16 * MiB)
    assert v["after_destroy_delta"] == "0"
    assert v["after_reset_held"] == "0"
    assert v["free_after_reset"] == "1"       # the reset freed it already
    assert v["nvml_after_last_release"] == "0"
    with simgpu.SimGpu(sim_name) as gpu:
        [process] = gpu.processes()
        assert process.kernels_completed == 0
        assert process.busy_ns >= 130_000_000  # device copies and fills held the engine


def test_default_context_memory_is_a_few_hundred_mib(programs, processes, sim_name, parse):
    environ = simgpu.env(sim_name, memory="4GiB", context_memory=None)
    environ.pop("GSLICE_SIM_CONTEXT_MEMORY", None)
    v = parse(processes.run([programs["memory_rules_check"]], environ).stdout)
    assert v["context_overhead"] == str(256 * MiB)
