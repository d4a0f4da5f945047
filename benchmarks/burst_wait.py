"""Where a high-priority burst's wait goes beside one low-priority neighbour,
on the calibrated simulated GPU (issue 23): a diagnostic beside
exp_latency.py, same burst program and shapes, one case at a time.

    python benchmarks/burst_wait.py [--handover at-once|at-release] [--seconds 3] 250:0 2000:4 ...

Each case K:S is a neighbour with K us kernels synchronising every S (0:
never). Per burst, from the simulated GPU's kernel traces of both:
- `queued`: the neighbour's GPU work queued and not yet run at the burst's
  start (its first launch call), in requested time (what the gate's queue
  bound limits: hook/queue_bound.c);
- `token`: burst start to its first kernel queued (the token's round trip);
- `gpu`: its first kernel queued to its first kernel on the engine (the
  neighbour's tail and a context switch);
- `fed`: neighbour kernels queued while the burst asked (the doorbell should
  have stopped it);
and the GPU's idle time over the bursts' span by what came before and after
it (B: the burst client, N: the neighbour), with the neighbour's share of
the time the bursts left idle. Short runs on a shared machine are noisy:
compare runs made back to back."""
from __future__ import annotations

import argparse
import bisect
import subprocess
import tempfile
import time

from gslice.experiment import SharingExperiment
from gslice.simgpu import kernel_trace

import exp_latency
from handoff_gaps import percentile


def _idle_by_neighbours(burst: list[kernel_trace.KernelRun], neighbour: list[kernel_trace.KernelRun]) -> dict:
    """Engine idle time over the burst client's span, as a fraction of it,
    keyed by who ran before and after the gap ("B>N": the neighbour resumed
    late after a burst; "N>B": the burst came late after the neighbour)."""
    events = sorted([(r.start_ns, r.end_ns, "B") for r in burst] + [(r.start_ns, r.end_ns, "N") for r in neighbour])
    lo, hi = burst[0].start_ns, max(r.end_ns for r in burst)
    gaps = {"B>N": 0, "N>B": 0, "N>N": 0, "B>B": 0}
    last_end, last_who = None, None
    for start, end, who in events:
        if end < lo or start > hi:
            continue
        if last_end is not None and start > last_end:
            gaps[f"{last_who}>{who}"] += start - last_end
        if last_end is None or end > last_end:
            last_end, last_who = end, who
    return {k: v / max(1, hi - lo) for k, v in gaps.items()}


def measure(exp: SharingExperiment, runner: exp_latency.LatencyRunner, program, kernel_us: int, sync_every: int,
            seconds: float) -> dict:
    trace_dir = tempfile.mkdtemp(prefix="gslice-burst-wait-")
    exp.sim_env[kernel_trace.ENV_KERNEL_TRACE] = trace_dir
    try:
        # The neighbour exits by itself (a killed process writes no trace).
        neighbour = exp.spawn("batch", [str(program), "loop", str(seconds + 1.0), str(kernel_us * 1000),
                                        str(sync_every)], stdout=subprocess.PIPE, text=True)
    finally:
        exp.sim_env.pop(kernel_trace.ENV_KERNEL_TRACE, None)
    if "ready=1" not in neighbour.stdout.readline():
        raise RuntimeError("the neighbour did not start")
    time.sleep(0.3)
    start = exp.sample()
    report = runner.bursts(seconds, shim=True, trace_dir=trace_dir)
    end = exp.sample()
    neighbour.communicate(timeout=60)
    mine = sorted(kernel_trace.read(trace_dir, report["pid"]), key=lambda r: r.enqueued_ns)
    theirs = kernel_trace.read(trace_dir, neighbour.pid)
    enqueued = [r.enqueued_ns for r in mine]
    parts: dict[str, list[float]] = {"latency_ms": [], "queued_us": [], "token_us": [], "gpu_us": [], "fed": []}
    for burst_start, latency_ms in list(zip(report["burst_starts"], report["latencies_ms"]))[1:]:
        t0 = int(burst_start * 1e9)
        i = bisect.bisect_left(enqueued, t0)
        if i >= len(mine):
            continue
        burst = mine[i:i + exp_latency.BURST_KERNELS]
        parts["latency_ms"].append(latency_ms)
        parts["queued_us"].append(kernel_trace.queued_at_ns(theirs, t0) / 1e3)
        parts["token_us"].append((burst[0].enqueued_ns - t0) / 1e3)
        parts["gpu_us"].append((min(r.start_ns for r in burst) - burst[0].enqueued_ns) / 1e3)
        parts["fed"].append(kernel_trace.submitted_between(theirs, t0, burst[0].enqueued_ns))
    wall_ns = (end.at - start.at) * 1e9
    bursts_ns = end.busy_ns["inference"] - start.busy_ns["inference"]
    neighbour_ns = end.busy_ns["batch"] - start.busy_ns["batch"]
    summary = {k: {q: percentile(sorted(v), p) for q, p in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))}
               for k, v in parts.items()}
    summary["bursts"] = len(parts["latency_ms"])
    summary["neighbour_of_idle"] = neighbour_ns / max(1.0, wall_ns - bursts_ns)
    summary["gpu_busy"] = (neighbour_ns + bursts_ns) / wall_ns
    summary["idle"] = _idle_by_neighbours(mine, theirs)
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cases", nargs="+", help="K:S (neighbour kernel us : sync every, 0 never)")
    parser.add_argument("--handover", choices=["at-once", "at-release"], default="at-once")
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    program = exp_latency.build_program()
    with SharingExperiment(gpu="sim", tokend_args=["--preempt-handover", args.handover]) as exp:
        exp.add_group("inference", request=0.3, limit=1.0, memory="1GiB", priority="high")
        exp.add_group("batch", request=0.7, limit=1.0, memory="1GiB", priority="low")
        runner = exp_latency.LatencyRunner(exp, program)
        for case in args.cases:
            kernel_us, sync_every = (int(x) for x in case.split(":"))
            s = measure(exp, runner, program, kernel_us, sync_every, args.seconds)
            line = " | ".join(f"{k} {s[k]['p50']:.0f}/{s[k]['p90']:.0f}/{s[k]['p99']:.0f}"
                              for k in ("queued_us", "token_us", "gpu_us", "fed"))
            print(f"{kernel_us} us, sync {sync_every}, {args.handover}: {s['bursts']} bursts, latency p50/p99 "
                  f"{s['latency_ms']['p50']:.2f}/{s['latency_ms']['p99']:.2f} ms | p50/p90/p99: {line} | "
                  f"neighbour {s['neighbour_of_idle'] * 100:.0f}% of idle, GPU busy {s['gpu_busy'] * 100:.0f}%, "
                  f"idle " + ", ".join(f"{k} {v * 100:.1f}%" for k, v in s["idle"].items()), flush=True)


if __name__ == "__main__":
    main()
