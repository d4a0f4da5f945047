"""Issue 23 on the calibrated simulated GPU: once the shim lets a
high-priority burst through, it waits for the GPU at most about one
neighbour kernel plus the context switch, whatever the neighbours queued.

Beside two saturating low-priority groups with 0.25 ms kernels that never
synchronise (a PyTorch-like neighbour whose queue only the gate bounds), the
H100 burst shape (8 x 215 us kernels, 10 +- 3 ms think: a fixed think locks
the bursts onto one phase of the neighbours' slices, good or bad by luck)
under the shim at high priority. The wait is measured by the simulated GPU:
from the burst's first kernel's launch (the moment the shim let it through)
to that kernel's start on the engine (kernel trace). Under the simulator's
default model (2.09 ms time slices, compute preemption, 450 us per switch,
as on an H100), work a neighbour's context still holds takes turns with the
burst, so a burst that lands in a neighbour's slice waits for the rest of it
(about 1 ms on average), not for one 0.25 ms kernel. How fast the token
changes hands before that (the rest of the handover) is a speed target: see
benchmarks/exp_latency.py."""
from __future__ import annotations

import json
import subprocess

from gslice import simgpu
from gslice.experiment import SharingExperiment
from gslice.simgpu import kernel_trace

NEIGHBOUR_KERNEL_MS = 0.25
# A loaded 2-core test machine wakes processes late: the bound applies to
# the median burst, with this much room.
SLACK_MS = 0.2
# The neighbours run under the shim (the feature: the gate bounds what they
# leave queued). False runs them bare, with queues the GPU time-slices with
# the burst: the check must then fail (its cut).
NEIGHBOURS_UNDER_SHIM = True
# The neighbours loop this long (s): past the 6 s of bursts, then they exit
# and write their kernel traces.
NEIGHBOUR_SECONDS = "9"


def first_kernel_waits(burst_latency, tmp_path,
                       neighbours: list[list[str]]) -> tuple[list[float], float, list[float]]:
    """The burst's first kernel's wait for the GPU (ms, from its launch to
    its start on the engine) in each burst beside `neighbours` (burst_latency
    arguments, one low-priority group each), the simulator's context switch
    (ms), and the neighbours' GPU work queued at each burst's start (ms,
    requested time), each list sorted."""
    running = []
    with SharingExperiment(gpu="sim") as exp:
        exp.sim_env[kernel_trace.ENV_KERNEL_TRACE] = str(tmp_path)
        exp.add_group("inference", request=0.3, limit=1.0, memory="1GiB", priority="high")
        for i, argv in enumerate(neighbours):
            group = f"batch-{i}"
            exp.add_group(group, request=0.7 / len(neighbours), limit=1.0, memory="1GiB", priority="low")
            neighbour = exp.spawn(group, [str(burst_latency), *argv], shim=NEIGHBOURS_UNDER_SHIM,
                                  stdout=subprocess.PIPE, text=True)
            assert neighbour.stdout.readline().strip() == "ready=1"
            running.append(neighbour)
        bursts = exp.spawn("inference", [str(burst_latency), "bursts", "6", "215000", "8", "10", "3"],
                           stdout=subprocess.PIPE, text=True)
        out, _ = bursts.communicate(timeout=120)
        assert bursts.returncode == 0, out
        for neighbour in running:   # its trace is written as it exits (NEIGHBOUR_SECONDS outlast the bursts)
            neighbour.communicate(timeout=60)
            assert neighbour.returncode == 0
        with simgpu.SimGpu(exp.sim_name) as gpu:
            switch_ms = gpu.engine_model().switch_ns / 1e6
    report = json.loads(out.strip().splitlines()[-1])
    runs = sorted(kernel_trace.read(tmp_path, report["pid"]), key=lambda r: r.enqueued_ns)
    theirs = [run for neighbour in running for run in kernel_trace.read(tmp_path, neighbour.pid)]
    ahead = sorted(kernel_trace.queued_at_ns(theirs, int(start * 1e9)) / 1e6 for start in report["burst_starts"][1:])
    waits = []
    for start, latency_ms in zip(report["burst_starts"][1:], report["latencies_ms"][1:]):  # the first pays start-up
        start_ns = int(start * 1e9)
        burst = [r for r in runs if start_ns <= r.enqueued_ns <= start_ns + latency_ms * 1e6]
        assert len(burst) == 8, f"burst at {start} has {len(burst)} kernels in the trace, expected 8"
        first = burst[0]  # launched once the shim let it through: what follows is the GPU's doing
        waits.append((first.start_ns - first.enqueued_ns) / 1e6)
    assert len(waits) >= 200, f"only {len(waits)} bursts in 6 s"
    return sorted(waits), switch_ms, ahead, theirs


def most_long_kernels_waiting(runs, kernel_ms: float) -> dict:
    """How many of a process's long kernels were queued and not yet started
    at once, over its whole run: a histogram {count: times reached}."""
    long_runs = [r for r in runs if r.requested_ns >= kernel_ms * 0.9e6]
    events = sorted([(r.enqueued_ns, 1) for r in long_runs] + [(r.start_ns, -1) for r in long_runs])
    waiting, reached = 0, {}
    for _, step in events:
        waiting += step
        if step > 0:
            reached[waiting] = reached.get(waiting, 0) + 1
    return reached


def test_a_launched_burst_waits_at_most_one_neighbour_kernel_plus_the_switch(burst_latency, tmp_path):
    loop = ["loop", NEIGHBOUR_SECONDS, str(int(NEIGHBOUR_KERNEL_MS * 1e6)), "0"]
    waits, switch_ms, _, _ = first_kernel_waits(burst_latency, tmp_path, [loop, loop])
    median = waits[len(waits) // 2]
    bound = NEIGHBOUR_KERNEL_MS + switch_ms + SLACK_MS
    assert median <= bound, (f"the median burst's first kernel waited {median:.2f} ms for the GPU after its launch "
                             f"(p90 {waits[int(0.9 * len(waits))]:.2f}); bound: one {NEIGHBOUR_KERNEL_MS} ms "
                             f"neighbour kernel + {switch_ms} ms context switch + {SLACK_MS} ms slack = {bound:.2f} ms")


# The H100's 8192 fp16 matmul, as PyTorch submits it there: a short fill,
# then the 1.8 ms GEMM (two launches of very different lengths per unit),
# synchronised every 4 units.
MATMUL_KERNEL_MS = 1.8
MATMUL_FILL_BYTES = 4096
# hook/token_gate.h: how far ahead a process preempted lately feeds.
PREEMPTED_FEED_AHEAD_MS = 0.15


def test_one_neighbour_kernel_also_when_each_kernel_follows_a_short_fill(burst_latency, tmp_path):
    """The queue is bounded in GPU time, not in launches: a neighbour whose
    units are a fill and a long kernel has about one kernel queued when a
    burst starts, and the burst waits about that. Read from the trace, in
    requested time: the simulator's 2.09 ms time slices would cap the wait
    alone even for a neighbour with four kernels queued (the cut: neighbours
    bare). On an H200 the gate, reading its GPU time per launch from its last
    interval (a fill's 7 us every other time), let 2-4 GEMMs queue; on this
    simulator the fills' intervals carry its host's 50-100 us wake-ups and
    the fault did not show: test_queue_bound.py checks that arithmetic."""
    loop = ["loop", NEIGHBOUR_SECONDS, str(int(MATMUL_KERNEL_MS * 1e6)), "4", str(MATMUL_FILL_BYTES)]
    waits, switch_ms, ahead, theirs = first_kernel_waits(burst_latency, tmp_path, [loop])
    queued_p90 = ahead[int(0.9 * len(ahead))]
    queued_bound = MATMUL_KERNEL_MS + PREEMPTED_FEED_AHEAD_MS + 0.05
    assert queued_p90 <= queued_bound, (
        f"p90 {queued_p90:.2f} ms of the neighbour's GPU work queued at a burst's start "
        f"(bound: one {MATMUL_KERNEL_MS} ms kernel + the {PREEMPTED_FEED_AHEAD_MS} ms feed-ahead)")
    median, p90 = waits[len(waits) // 2], waits[int(0.9 * len(waits))]
    bound = MATMUL_KERNEL_MS + switch_ms + SLACK_MS
    assert median <= bound and p90 <= bound + MATMUL_KERNEL_MS / 2, (
        f"the burst's first kernel waited p50 {median:.2f} / p90 {p90:.2f} ms for the GPU after its launch; bound: "
        f"one {MATMUL_KERNEL_MS} ms neighbour kernel + {switch_ms} ms context switch + {SLACK_MS} ms slack = "
        f"{bound:.2f} ms (p90: + half a kernel)")
    # Between bursts too, while the next is expected: after each
    # synchronisation the neighbour's next units pass its gate one kernel
    # at a time (checked, paced), not in a checkpoint interval sized by the
    # mean of a fill and a GEMM. Unbounded, three or four of its 1.8 ms
    # kernels waited at once at 2% of its launches here (66-77 of ~3800 in
    # four runs), and on an H200 such stacks ran into the slowest bursts
    # beside 8192 matmuls (3.9-4.5 ms against 1.9 at the median).
    waiting = most_long_kernels_waiting(theirs, MATMUL_KERNEL_MS)
    stacked = sum(times for count, times in waiting.items() if count >= 3)
    assert stacked <= 0.005 * sum(waiting.values()), (
        f"three or more of the neighbour's {MATMUL_KERNEL_MS} ms kernels waited at once {stacked} times "
        f"(times each count was reached: {waiting})")
