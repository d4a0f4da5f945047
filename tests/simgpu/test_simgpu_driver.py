"""The simulated libcuda.so.1 in one process: memory, kernels, streams,
events, graphs, cuGetProcAddress. Each test runs a compiled check program
(tests/simgpu/programs) on its own simulator instance."""
from __future__ import annotations

import pytest

from gslice import simgpu

GiB = 1 << 30
MiB = 1 << 20


def test_memory_round_trip_accounting_and_errors(programs, processes, sim_name, parse):
    result = processes.run([programs["driver_check"], "memory"], simgpu.env(sim_name, memory="4GiB"))
    values = parse(result.stdout)
    assert values["alloc_delta"] == str(128 * MiB)
    assert values["roundtrip_ok"] == "1"
    assert values["memset32_ok"] == "1" and values["memset8_ok"] == "1"
    assert values["all_freed"] == "1"
    assert values["pitch"] == "1024"                      # 1000 bytes rounded to 512
    assert values["async_free_deferred"] == "1"           # counted until the stream reaches the free
    assert values["vmm_ok"] == "1"
    assert values["vmm_counted"] == str(4 * MiB)          # cuMemCreate counts physical memory
    assert values["granularity"] == str(2 * MiB)
    assert values["array_counted"] == str(1024 * 256 * 4 * 4)
    assert values["end_free_equal"] == "1"


def test_allocation_beyond_physical_memory_is_out_of_memory(programs, processes, sim_name, parse):
    environ = simgpu.env(sim_name, memory="1GiB")
    over = parse(processes.run([programs["driver_check"], "oom", str(GiB + 1)], environ).stdout)
    assert over["result"] == "2"  # CUDA_ERROR_OUT_OF_MEMORY
    assert over["total"] == str(GiB) and over["free"] == str(GiB)
    exact = parse(processes.run([programs["driver_check"], "oom", str(GiB)], environ).stdout)
    assert exact["result"] == "0"


def test_calls_before_init_and_without_context_fail_like_the_driver(programs, processes, sim_name, parse):
    values = parse(processes.run([programs["driver_check"], "uninit"], simgpu.env(sim_name)).stdout)
    assert values["uninit_ok"] == "1"


def test_events_measure_kernel_time(programs, processes, sim_name, parse):
    # 4 kernels x 25 ms: the events must see ~100 ms (sleep overshoot and a
    # busy machine only make it longer).
    values = parse(processes.run([programs["driver_check"], "events", str(25_000_000), "4"],
                                 simgpu.env(sim_name)).stdout)
    assert values["early_query"] == "600"     # CUDA_ERROR_NOT_READY while kernels are queued
    assert values["early_elapsed"] == "600"
    assert 99.0 <= float(values["elapsed_ms"]) < 400.0


def test_streams_run_in_order_and_wait_for_events(programs, processes, sim_name, parse):
    values = parse(processes.run([programs["driver_check"], "order"], simgpu.env(sim_name)).stdout)
    assert float(values["launch_ms"]) < 30.0   # launches return before the 40 ms kernels run
    assert values["busy_query"] == "600"
    assert values["notes"] == "3"
    assert float(values["first_ms"]) >= 39.0   # host function after the first kernel
    assert float(values["second_ms"]) >= 79.0  # ... and the second
    assert float(values["waited_ms"]) >= float(values["second_ms"])  # other stream waited on the event


def test_context_synchronize_waits_for_every_stream(programs, processes, sim_name, parse):
    values = parse(processes.run([programs["driver_check"], "ctxsync"], simgpu.env(sim_name)).stdout)
    # four 30 ms kernels on four streams share one engine: >= 120 ms
    assert float(values["ctxsync_ms"]) >= 119.0
    assert values["all_idle"] == "1"


def test_graphs_and_captured_graphs_run_their_kernels(programs, processes, sim_name, parse):
    environ = simgpu.env(sim_name)
    values = parse(processes.run([programs["driver_check"], "graph", "5", str(10_000_000)], environ).stdout)
    assert float(values["graph_ms"]) >= 49.0
    assert float(values["capture_ms"]) < 30.0   # capturing does not run the kernels
    assert float(values["captured_ms"]) >= 49.0
    with simgpu.SimGpu(sim_name) as gpu:
        [process] = gpu.processes()
        assert process.kernels_launched == 10 and process.kernels_completed == 10
        assert process.busy_ns >= 100_000_000


LOOKUPS = [
    # (base name, version, flags) -> exported name it must resolve to
    (("cuMemAlloc", 3020, 0), "cuMemAlloc_v2"),
    (("cuMemAlloc", 2000, 0), "cuMemAlloc"),
    (("cuMemFree", 3020, 0), "cuMemFree_v2"),
    (("cuMemGetInfo", 3020, 0), "cuMemGetInfo_v2"),
    (("cuLaunchKernel", 4000, 0), "cuLaunchKernel"),
    (("cuLaunchKernel", 7000, 2), "cuLaunchKernel_ptsz"),
    (("cuLaunchKernel", 12000, 1), "cuLaunchKernel"),
    (("cuLaunchKernelEx", 12000, 2), "cuLaunchKernelEx_ptsz"),
    (("cuMemAllocAsync", 11020, 2), "cuMemAllocAsync_ptsz"),
    (("cuStreamSynchronize", 12000, 2), "cuStreamSynchronize_ptsz"),
    (("cuStreamSynchronize", 12000, 0), "cuStreamSynchronize"),
    (("cuGraphLaunch", 12000, 2), "cuGraphLaunch_ptsz"),
    (("cuCtxCreate", 3020, 0), "cuCtxCreate_v2"),
    (("cuCtxCreate", 11040, 0), "cuCtxCreate_v3"),
    (("cuCtxCreate", 13000, 0), "cuCtxCreate_v4"),
    (("cuDeviceTotalMem", 3020, 0), "cuDeviceTotalMem_v2"),
    (("cuEventElapsedTime", 12000, 0), "cuEventElapsedTime"),
    (("cuEventElapsedTime", 12080, 0), "cuEventElapsedTime_v2"),
    (("cuMemcpyHtoD", 12000, 0), "cuMemcpyHtoD_v2"),
    (("cuMemcpyHtoD", 12000, 2), "cuMemcpyHtoD_v2_ptds"),
    (("cuGetProcAddress", 12000, 0), "cuGetProcAddress_v2"),
    (("cuGraphInstantiate", 11000, 0), "cuGraphInstantiate_v2"),
    (("cuDeviceGetUuid", 11040, 0), "cuDeviceGetUuid_v2"),
]


def test_get_proc_address_resolves_base_names_like_the_driver(programs, processes, sim_name, parse):
    args = [programs["proc_address_check"]]
    for (name, version, flags), _ in LOOKUPS:
        args += [name, str(version), str(flags)]
    args += ["cuNoSuchCall", "12000", "0", "cuMemAllocAsync", "11000", "0", "cuMemAlloc_v2", "12000", "0"]
    result = processes.run(args, simgpu.env(sim_name))
    lines = {tuple(line.split()[1:4]): line.split()[5:] for line in result.stdout.splitlines()
             if line.startswith("lookup ")}
    for (name, version, flags), export in LOOKUPS:
        assert lines[(name, str(version), str(flags))] == ["0", "0", export], (name, version, flags)
    # CUDA_ERROR_NOT_FOUND with SYMBOL_NOT_FOUND / VERSION_NOT_SUFFICIENT, pfn NULL
    assert lines[("cuNoSuchCall", "12000", "0")] == ["500", "1", "NULL"]
    assert lines[("cuMemAllocAsync", "11000", "0")] == ["500", "2", "NULL"]
    assert lines[("cuMemAlloc_v2", "12000", "0")] == ["500", "1", "NULL"]  # base names only
    values = parse(result.stdout)
    assert values["driver_version"] == "13000"
    assert values["session_ok"] == "1"
    assert values["pending_before_sync"] == "600"


def test_get_proc_address_returns_the_drivers_own_functions_under_a_preload(programs, processes, sim_name, parse):
    environ = simgpu.env(sim_name)
    environ["LD_PRELOAD"] = str(programs["interposer"])
    values = parse(processes.run([programs["proc_address_check"]], environ).stdout)
    assert values["own_is_export"] == "1"
    assert values["own_differs_from_global"] == "1"


def test_bad_configuration_is_reported(programs, processes, sim_name, parse):
    environ = simgpu.env(sim_name)
    environ["GSLICE_SIM_MEMORY"] = "lots"
    result = processes.run([programs["driver_check"], "init"], environ)
    assert parse(result.stdout)["init"] == "100"  # CUDA_ERROR_NO_DEVICE
    assert "GSLICE_SIM_MEMORY 'lots' is not a size" in result.stderr
    environ = simgpu.env(sim_name)
    environ["GSLICE_SIM_NAME"] = "a/b"
    result = processes.run([programs["driver_check"], "init"], environ)
    assert parse(result.stdout)["init"] == "100"
    assert "GSLICE_SIM_NAME 'a/b' is not usable" in result.stderr


@pytest.mark.parametrize("text,expected", [("16GiB", 16 * GiB), ("512MiB", 512 * MiB), ("1.5GB", 1_500_000_000),
                                           ("123456789", 123456789)])
def test_memory_size_from_environment(programs, processes, sim_name, parse, text, expected):
    values = parse(processes.run([programs["driver_check"], "oom", "1"], simgpu.env(sim_name, memory=text)).stdout)
    assert values["total"] == str(expected)


def test_many_threads_allocate_and_launch_at_once(programs, processes, sim_name, parse):
    values = parse(processes.run([programs["driver_check"], "threads", "8"], simgpu.env(sim_name)).stdout)
    assert values["threads_done"] == "8" and values["memory_back"] == "1"
    with simgpu.SimGpu(sim_name) as gpu:
        [process] = gpu.processes()
        assert process.kernels_launched == process.kernels_completed == 8 * 100
        assert process.memory_peak >= 1 << 20 and process.memory_used == 0


def test_2d_3d_peer_and_batch_copies_follow_their_descriptors(programs, processes, sim_name, parse):
    """Pitches, offsets, slices and array rows put the bytes where cuda.h
    says; bad descriptors are refused; a device-side 2D copy holds the
    engine for its bytes (32 MiB at 1 GB/s: at least ~33 ms), and so does
    its async form by the stream's synchronisation."""
    environ = simgpu.env(sim_name, memory="4GiB")
    environ["GSLICE_SIM_DEVICE_GBPS"] = "1"
    values = parse(processes.run([programs["driver_check"], "shaped"], environ).stdout)
    assert values["shaped_roundtrip_ok"] == "1"
    assert values["array_roundtrip_ok"] == "1"
    assert float(values["copy2d_32mib_ms"]) >= 0.95 * 32 * MiB / 1e6
    assert float(values["copy2d_async_total_ms"]) >= 0.95 * 32 * MiB / 1e6


def test_graph_memory_pool_follows_launches_and_trims(programs, processes, sim_name, parse):
    """cuMemAllocAsync / cuMemFreeAsync in a capture become mem alloc / free
    nodes; the graph memory pool grows at the launch, keeps the memory
    after the graph frees it (reused by the relaunch) and gives it back to
    the device at cuDeviceGraphMemTrim; an allocation the graph does not
    free stays used (trim keeps it; relaunching first is refused); graph
    memory beyond the device is out of memory at launch and upload."""
    values = parse(processes.run([programs["driver_check"], "graphmem"], simgpu.env(sim_name, memory="4GiB")).stdout)
    assert values["captured_nodes"] == "3"
    assert values["captured_types"] == "10,0,11"          # mem alloc, kernel, mem free
    assert values["reserved_before_launch"] == "0"
    assert values["reserved_after_launch"] == str(64 * MiB)
    assert values["used_after_launch"] == "0"
    assert values["used_high"] == str(64 * MiB)
    assert values["free_drop"] == str(64 * MiB)           # device memory, seen by cuMemGetInfo
    assert values["reserved_after_relaunch"] == str(64 * MiB)
    assert values["reserved_after_trim"] == "0" and values["free_restored"] == "1"
    assert values["alloc_node_dptr_set"] == "1"
    assert values["used_unfreed"] == str(32 * MiB)
    assert values["reserved_trim_while_used"] == str(32 * MiB)
    assert values["reserved_after_exec_destroy_trim"] == "0"
    assert values["reserved_after_oom"] == "0"
