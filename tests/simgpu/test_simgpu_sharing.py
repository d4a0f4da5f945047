"""One simulated GPU shared by several processes: kernels serialise on the
engine, engine time is recorded per process, memory is one pool, a killed
process neither wedges the engine nor keeps its memory, and NVML (through
pynvml) sees it all. A gone process's memory stays used, and NVML lists it,
while its context is torn down (GSLICE_SIM_TEARDOWN_MS)."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time

from gslice import simgpu

MiB = 1 << 20


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def test_two_processes_serialise_and_busy_time_is_recorded_per_label(programs, processes, sim_name):
    kernel_ns, count = 10_000_000, 40  # 400 ms of GPU time each
    a, b = processes.spin_side_by_side(programs["driver_check"], sim_name, ("team-a", "team-b"), kernel_ns, count)

    with simgpu.SimGpu(sim_name) as gpu:
        by_label = gpu.busy_ns_by_label()
        assert set(by_label) == {"team-a", "team-b"}
        for label, busy in by_label.items():
            # at least what was asked; sleep overshoot adds a little
            assert kernel_ns * count <= busy < kernel_ns * count * 1.5, (label, busy)
        assert gpu.total_busy_ns() == sum(by_label.values())
        assert gpu.kernels_completed() == 2 * count
        procs = {p.label: p for p in gpu.processes()}
        assert procs["team-a"].pid == a.pid and procs["team-b"].pid == b.pid
        for p in procs.values():
            assert p.kernels_launched == count and p.kernels_completed == count
            assert not p.alive and p.exited_ns > 0
        # Engine time never overlaps: the span of activity holds both sums.
        first = min(p.first_activity_ns for p in procs.values())
        last = max(p.last_activity_ns for p in procs.values())
        assert last - first >= sum(by_label.values())
        # Both ran at the same time (interleaved on the engine), not one after the other.
        assert procs["team-a"].first_activity_ns < procs["team-b"].last_activity_ns
        assert procs["team-b"].first_activity_ns < procs["team-a"].last_activity_ns


def test_killed_engine_holder_does_not_wedge_the_gpu_and_its_memory_returns(programs, processes, sim_name, parse):
    # No teardown delay: the memory is back as soon as the death is noticed
    # (the delay has its own test below).
    environ = simgpu.env(sim_name, memory="2GiB", teardown_ms=0)
    holder = processes.start([programs["driver_check"], "hold", 256 * MiB, 60_000_000_000], environ)
    assert holder.stdout.readline().startswith("holding")
    with simgpu.SimGpu(sim_name) as gpu:
        wait_for(lambda: gpu.engine_holder_pid() == holder.pid, 10, "the holder to run its 60 s kernel")
        assert gpu.memory_used() == 256 * MiB
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=10)

        # The next process gets the engine (robust mutex) and a clean pool.
        started = time.monotonic()
        values = parse(processes.run([programs["driver_check"], "events", 1_000_000, 3], environ, timeout=30).stdout)
        assert time.monotonic() - started < 20
        assert 2.9 <= float(values["elapsed_ms"]) < 1000
        assert gpu.memory_used() == 0
        dead = gpu.process(holder.pid)
        assert not dead.alive and dead.memory_used == 0 and dead.memory_peak == 256 * MiB
        assert gpu.engine_holder_pid() == 0


def test_memory_is_one_pool_across_processes_and_nvml_reports_it(programs, processes, sim_name, parse):
    environ = simgpu.env(sim_name, memory="1GiB", teardown_ms=0)
    keeper = processes.start([programs["driver_check"], "keep", 768 * MiB], environ, stdin=subprocess.PIPE)
    assert keeper.stdout.readline().startswith("kept")

    refused = parse(processes.run([programs["driver_check"], "oom", 512 * MiB], environ).stdout)
    assert refused["result"] == "2" and refused["free"] == str(256 * MiB)

    script = textwrap.dedent("""
        import json, pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        mem = pynvml.nvmlDeviceGetMemoryInfo(h)
        mem2 = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
        procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
        print(json.dumps({"name": pynvml.nvmlDeviceGetName(h), "uuid": pynvml.nvmlDeviceGetUUID(h),
                          "count": pynvml.nvmlDeviceGetCount(), "total": mem.total, "used": mem.used,
                          "free": mem.free, "free_v2": mem2.free,
                          "by_uuid": pynvml.nvmlDeviceGetIndex(pynvml.nvmlDeviceGetHandleByUUID(pynvml.nvmlDeviceGetUUID(h))),
                          "procs": [[p.pid, p.usedGpuMemory] for p in procs]}))
        pynvml.nvmlShutdown()
    """)
    report = json.loads(processes.run([sys.executable, "-c", script], environ).stdout)
    with simgpu.SimGpu(sim_name) as gpu:
        assert report["name"] == "gslice simulated GPU" == gpu.device_name
        assert report["uuid"] == gpu.uuid and report["uuid"].startswith("GPU-")
        assert report["count"] == 1 and report["by_uuid"] == 0
        assert report["total"] == 1 << 30
        assert report["used"] == 768 * MiB
        assert report["free"] == report["free_v2"] == 256 * MiB
        assert [keeper.pid, 768 * MiB] in report["procs"]

        keeper.stdin.close()  # it exits; exit gives its memory back
        assert keeper.wait(timeout=10) == 0
        assert gpu.memory_used() == 0


def test_nvml_utilisation_follows_the_engine(programs, processes, sim_name):
    environ = simgpu.env(sim_name)
    spinner = processes.start([programs["driver_check"], "spin", 20_000_000, 150], environ)  # ~3 s busy
    script = textwrap.dedent("""
        import time, pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        best, deadline = 0, time.monotonic() + 2.5
        while time.monotonic() < deadline and best < 90:
            best = max(best, pynvml.nvmlDeviceGetUtilizationRates(h).gpu)
            time.sleep(0.05)
        print(best)
    """)
    busy = int(processes.run([sys.executable, "-c", script], environ).stdout)
    spinner.communicate(timeout=60)
    assert busy >= 90, busy   # back-to-back 20 ms kernels: the engine is busy all but the syncs (reads 99)
    idle_script = "import pynvml; pynvml.nvmlInit(); print(pynvml.nvmlDeviceGetUtilizationRates(pynvml.nvmlDeviceGetHandleByIndex(0)).gpu)"
    time.sleep(1.2)  # past the ~1 s window
    assert int(processes.run([sys.executable, "-c", idle_script], environ).stdout) == 0


def test_busy_time_counts_the_kernel_running_now(programs, processes, sim_name):
    # One 2 s kernel: while it runs, the process's own counter has not moved
    # yet, but its label's busy time grows with it (samples of long kernels
    # would otherwise jump by whole kernels).
    spinner = processes.start([programs["driver_check"], "spin", 2_000_000_000, 1], simgpu.env(sim_name, label="long"))
    def opened():
        try:
            return simgpu.SimGpu(sim_name)
        except (FileNotFoundError, RuntimeError):  # not created, or not initialised yet
            return None
    with wait_for(opened, 30, "the simulated GPU to be created") as gpu:
        wait_for(lambda: gpu.engine_holder_pid() == spinner.pid, 30, "the kernel to start")
        time.sleep(0.05)
        first = gpu.busy_ns_by_label().get("long", 0)
        time.sleep(0.3)
        second = gpu.busy_ns_by_label()["long"]
        assert [p.busy_ns for p in gpu.processes() if p.label == "long"] == [0]
        assert 0 < first < second and second - first >= 250_000_000
    spinner.communicate(timeout=60)
    with simgpu.SimGpu(sim_name) as gpu:
        assert 2_000_000_000 <= gpu.busy_ns_by_label()["long"] < 3_000_000_000


NVML_WATCH = textwrap.dedent("""
    import json, sys, time, pynvml
    pid = int(sys.argv[1])
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    def listed():
        return {p.pid: p.usedGpuMemory for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)}.get(pid)
    first = listed()                       # this query notices the death: the teardown starts
    noticed = time.monotonic()
    print(json.dumps({"listed": first, "used": pynvml.nvmlDeviceGetMemoryInfo(h).used}), flush=True)
    sys.stdin.readline()                   # the test tries its allocation meanwhile
    while listed() is not None and time.monotonic() - noticed < 30:
        time.sleep(0.002)
    gone = time.monotonic()
    print(json.dumps({"unlisted_after_ms": (gone - noticed) * 1e3, "used": pynvml.nvmlDeviceGetMemoryInfo(h).used}),
          flush=True)
""")


def test_killed_process_memory_stays_used_and_listed_while_its_context_is_torn_down(programs, processes, sim_name,
                                                                                     parse):
    teardown_ms = 1500  # long beside process start-up on a busy machine, so the "during" checks run inside it
    environ = simgpu.env(sim_name, memory="1GiB", teardown_ms=teardown_ms)
    holder = processes.start([programs["driver_check"], "hold", 768 * MiB, 60_000_000_000], environ)
    assert holder.stdout.readline().startswith("holding")
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=10)

    watch = processes.start([sys.executable, "-c", NVML_WATCH, str(holder.pid)], environ, stdin=subprocess.PIPE)
    during = json.loads(watch.stdout.readline())
    noticed = time.monotonic()
    # Still listed with all its memory, and the device counts it as used.
    assert during == {"listed": 768 * MiB, "used": 768 * MiB}
    # An allocation that needs that memory fails as on a real GPU: CUDA_ERROR_OUT_OF_MEMORY (2).
    refused = parse(processes.run([programs["driver_check"], "oom", 512 * MiB], environ).stdout)
    within_teardown = time.monotonic() - noticed < teardown_ms / 1e3
    assert within_teardown, "the allocation came after the teardown ended; the check proves nothing"
    assert refused["result"] == "2" and refused["free"] == str(256 * MiB)
    with simgpu.SimGpu(sim_name) as gpu:
        assert gpu.teardown_ns == teardown_ms * 1_000_000
        dead = gpu.process(holder.pid)
        assert dead.tearing_down and not dead.alive and dead.memory_used == 768 * MiB
        assert [p.out_of_memory for p in gpu.processes() if p.pid not in (holder.pid,)] == [1]

    watch.stdin.write("go\n")
    watch.stdin.flush()
    after = json.loads(watch.stdout.readline())
    watch.wait(timeout=10)
    # Unlisted when the teardown time is up, and not before; the memory is free then.
    assert teardown_ms - 5 <= after["unlisted_after_ms"] <= teardown_ms + 200, after
    assert after["used"] == 0
    granted = parse(processes.run([programs["driver_check"], "oom", 512 * MiB], environ).stdout)
    assert granted["result"] == "0", granted
    with simgpu.SimGpu(sim_name) as gpu:
        dead = gpu.process(holder.pid)
        assert not dead.tearing_down and dead.memory_used == 0
