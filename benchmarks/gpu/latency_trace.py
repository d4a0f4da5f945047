"""Where a high-priority burst's time goes beside a neighbour, on a real GPU
(issue 23): the latency section's shapes, each as five interleaved series
in one run, so that gslice is read against the GPU's own behaviour:

  alone_bare      the burst alone, no gslice;
  bare_beside     burst and neighbour both without gslice (the GPU's own
                  time-slicing between contexts: what gslice starts from);
  gslice          both under gslice (the latency section's series);
  gslice_jitter   the same with the think time 10 +- 3 ms (a fixed think can
                  lock the bursts onto a phase of the neighbour's work);
  gslice_traced   both under gslice with the shims logging at debug level
                  (lines stamped with CLOCK_MONOTONIC, the bursts' starts
                  too): the ring, the neighbour's pause and what it had
                  queued, anticipation's windows, the grant; and each
                  burst kernel's end on the GPU (events), so a wait before
                  the burst reads apart from a neighbour run inside it;
                  and each neighbour unit's launch call and end on the GPU,
                  on the same clock: what the neighbour really had queued
                  at each burst's start (its gate's estimate is in the
                  ring's debug line) and what it launched during the burst.

Every gslice series also records both shims' counters over it (checkpoint
interval, GPU time per launch and the longest kernel as each gate measured
them, pauses, paces, renewals).

    python benchmarks/gpu/latency_trace.py [--gpu real|sim] [--backends torch driver]
        [--shapes i ii iii] [--bursts 300] [--out DIR]

Writes DIR/latency_trace_<backend>.json (every latency and start) and
DIR/latency_trace_<backend>_logs.tar.gz (the workers' and tokend's logs).
Runs from the gpu-check bundle on the GPU machine
(PYTHONPATH=build/gpu-check/site); about 70 s per backend on an H100."""
from __future__ import annotations

import argparse
import bisect
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gslice.experiment import SharingExperiment  # noqa: E402
from gslice.workloads_served import percentiles  # noqa: E402

from harness import Worker, archive_logs, wait_ready  # noqa: E402
from sec_latency import SHAPES  # noqa: E402

SERIES = ("alone_bare", "bare_beside", "gslice", "gslice_jitter", "gslice_traced")
# Counters read as they stand at the series' end; the rest as its change.
LEVELS = ("metered", "slots", "gate_state", "checkpoint_interval", "quantum_us", "launch_gpu_us", "longest_work_us",
          "submit_lag_margin_us",
          "memory_held", "memory_pending_release", "tracked_allocations")


def stats_over(before: dict, after: dict) -> dict:
    """A shim's counters over one series (gslice_shim_stats: see hook/shim_api.h)."""
    if not after.get("available"):
        return after
    counted = lambda k, v: isinstance(v, int) and not isinstance(v, bool) and k not in LEVELS  # noqa: E731
    return {k: v - before.get(k, 0) if counted(k, v) else v for k, v in after.items()}


def neighbour_around_bursts(starts: list[float], latencies_ms: list[float], units: list[list[float]]) -> dict:
    """Per burst, from the neighbour's units ([launch call, end on the
    GPU], time.monotonic()): how many were queued when the burst started
    (launched before, ended after), when the last of them ended (ms after
    the start: what the burst waited behind, or shared the GPU with), and
    how many the neighbour launched while the burst ran; their percentiles,
    and the bursts' latency by units queued at the start."""
    ahead, drain, fed = [], [], []
    by_ahead: dict[int, list[float]] = {}
    for start, latency in zip(starts, latencies_ms):
        end = start + latency / 1e3
        queued = [u for u in units if u[0] < start < u[1]]
        ahead.append(len(queued))
        drain.append(round(max((u[1] - start for u in queued), default=0.0) * 1e3, 3))
        fed.append(sum(1 for u in units if start <= u[0] < end))
        by_ahead.setdefault(len(queued), []).append(latency)
    return {"queued_at_start": ahead, "queued_ends_after_ms": drain, "launched_during": fed,
            "summary": {"queued_at_start": percentiles(ahead), "queued_ends_after_ms": percentiles(drain),
                        "launched_during": percentiles(fed),
                        "latency_ms_by_queued_at_start": {str(k): percentiles(v) for k, v in sorted(by_ahead.items())}}}


_HEAD_START = re.compile(r"gslice\[\d+\]: debug (\d+\.\d+): head start: launching at the ring, ([\d.]+) us after "
                         r"the launch reached the shim \(([\d.]+) us in the gate\)")


def rings_after_starts(starts: list[float], log_text: str) -> dict:
    """Per burst, from the traced burst's shim log: when its head start rang
    (the line's CLOCK_MONOTONIC stamp) after the burst began (the
    application's time.monotonic()), and how much of that its launch spent
    in the shim (the gate's part of it apart); the rest is the
    application's own time to its first launch (a neighbour keeps feeding
    the GPU until the ring). Bursts with no head start within 5 ms (a
    lease, a handback start) are left out."""
    rings = [(float(m.group(1)), float(m.group(2)), float(m.group(3))) for m in _HEAD_START.finditer(log_text)]
    stamps = [ring[0] for ring in rings]
    to_ring, in_shim, in_gate = [], [], []
    for start in starts:
        i = bisect.bisect_left(stamps, start)
        if i < len(rings) and rings[i][0] - start < 0.005:
            to_ring.append(round((rings[i][0] - start) * 1e6, 1))
            in_shim.append(rings[i][1])
            in_gate.append(rings[i][2])
    return {"start_to_ring_us": percentiles(to_ring), "in_shim_us": percentiles(in_shim),
            "in_gate_us": percentiles(in_gate), "bursts": len(to_ring)}


def trace(gpu: str, backend: str, shape_names: list[str], bursts: int, out: Path) -> None:
    """The five series of each shape with one backend's workloads; writes
    out/latency_trace_<backend>.json and out/latency_trace_<backend>_logs.tar.gz."""
    work = Path(tempfile.mkdtemp(prefix=f"latency-trace-{backend}-"))
    shapes = [s for s in SHAPES if s[0].split("_")[0] in shape_names]
    report: dict = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "gpu": gpu,
                    "backend": backend, "shapes": {}}
    result = out / f"latency_trace_{backend}.json"
    debug = {"GSLICE_LOG_LEVEL": "debug"}
    os.environ.setdefault("GSLICE_EXPERIMENT_TOKEND_LOG", "debug")
    with SharingExperiment(work / "exp", gpu=gpu) as exp:
        exp.add_group("hi", request="50%", limit="100%", memory="4GiB", priority="high")
        exp.add_group("lo", request="50%", limit="100%", memory="4GiB", priority="low")
        workers = {
            "burst_bare": Worker(exp, "hi", backend, "burst-bare", work, shim=False),
            "burst_shim": Worker(exp, "hi", backend, "burst-shim", work),
            "burst_traced": Worker(exp, "hi", backend, "burst-traced", work, env=debug),
            "nb_bare": Worker(exp, "lo", backend, "neighbour-bare", work, shim=False),
            "nb_shim": Worker(exp, "lo", backend, "neighbour-shim", work),
            "nb_traced": Worker(exp, "lo", backend, "neighbour-traced", work, env=debug),
        }
        try:
            wait_ready(list(workers.values()), 180.0)
            plan = {"alone_bare": ("burst_bare", None, 0.0), "bare_beside": ("burst_bare", "nb_bare", 0.0),
                    "gslice": ("burst_shim", "nb_shim", 0.0), "gslice_jitter": ("burst_shim", "nb_shim", 3.0),
                    "gslice_traced": ("burst_traced", "nb_traced", 0.0)}
            for name, unit, sync_every, kernel_ms in shapes:
                shape: dict = {"neighbour": {"unit": unit, "sync_every": sync_every, "kernel_ms": kernel_ms},
                               "series": {}}
                for series in SERIES:
                    burster, neighbour, jitter = plan[series]
                    count = max(50, bursts // 3) if neighbour is None else bursts
                    traced = series == "gslice_traced"
                    if neighbour:
                        workers[neighbour].call("neighbour_start", 60, unit=unit, sync_every=sync_every,
                                                gpu_marks=traced)
                        time.sleep(0.3)
                    shimmed = [w for w in (burster, neighbour) if w and not w.endswith("bare")]
                    before = {w: workers[w].call("shim_stats", 30) for w in shimmed}
                    reply = workers[burster].call("bursts", 600, count=count, burst=8, think_ms=10.0,
                                                  unit="mm4096h", think_jitter_ms=jitter, seed=len(series),
                                                  gpu_marks=traced)
                    stopped = workers[neighbour].call("neighbour_stop", 120) if neighbour else None
                    units = stopped.pop("units", None) if stopped else None
                    after = {w: workers[w].call("shim_stats", 30) for w in shimmed}
                    lat = reply["latencies_ms"]
                    shape["series"][series] = {"latency_ms": percentiles(lat, (0.1, 0.25, 0.5, 0.75, 0.9, 0.99)),
                                               "latencies_ms": lat, "starts_monotonic": reply["starts_monotonic"],
                                               "gpu_marks_ms": reply.get("gpu_marks_ms"),
                                               "gpu_starts_monotonic": reply.get("gpu_starts_monotonic"),
                                               "neighbour_units": units,
                                               "seconds": reply["seconds"], "neighbour": stopped,
                                               "shim_stats": {w: stats_over(before[w], after[w]) for w in shimmed}}
                    p = shape["series"][series]["latency_ms"]
                    print(f"[{backend} {name}] {series:14s} n={p['n']:4d} p10 {p['p10']:.2f} p50 {p['p50']:.2f} "
                          f"p90 {p['p90']:.2f} p99 {p['p99']:.2f} max {p['max']:.2f} ms"
                          + (f"; neighbour {stopped['iterations'] / stopped['seconds']:.0f} it/s" if stopped else ""),
                          flush=True)
                    if traced:
                        rang = rings_after_starts(reply["starts_monotonic"], workers[burster].log_path.read_text())
                        shape["series"][series]["rings"] = rang
                        print(f"    head start rang {_p(rang['start_to_ring_us'], '.0f')} us (p50/p90/p99) after the "
                              f"burst began, {_p(rang['in_shim_us'], '.1f')} us of it in the shim "
                              f"({_p(rang['in_gate_us'], '.1f')} in the gate; {rang['bursts']} bursts)", flush=True)
                    if units is not None:
                        around = neighbour_around_bursts(reply["starts_monotonic"], lat, units)
                        shape["series"][series]["neighbour_around_bursts"] = around
                        summary = around["summary"]
                        print(f"    neighbour units queued at a burst's start p50/p90/p99 "
                              f"{_p(summary['queued_at_start'])}, the last ending "
                              f"{_p(summary['queued_ends_after_ms'], '.2f')} ms after it; launched during a "
                              f"burst {_p(summary['launched_during'])}", flush=True)
                        for k, v in summary["latency_ms_by_queued_at_start"].items():
                            print(f"      {k} queued: {v['n']} bursts, p50 {v['p50']:.2f} p90 {v['p90']:.2f} "
                                  f"max {v['max']:.2f} ms", flush=True)
                    for w, st in shape["series"][series]["shim_stats"].items():
                        if st.get("available"):
                            print(f"    {w}: interval {st['checkpoint_interval']}, {st['launch_gpu_us']} us per launch, "
                                  f"longest {st['longest_work_us']} us; checkpoints {st['checkpoints']}, slow "
                                  f"{st['slow_entries']}, paced {st['paced_launches']}, doorbell pauses "
                                  f"{st['doorbell_pauses']}, anticipation {st['anticipation_pauses']}, "
                                  f"lease resumes {st['lease_resumes']}, idle releases {st['idle_releases']}, "
                                  f"submit lag margin {st.get('submit_lag_margin_us', '?')} us",
                                  flush=True)
                report["shapes"][name] = shape
                result.write_text(json.dumps(report))
        finally:
            for w in workers.values():
                w.close()
    logs = archive_logs(work, out / f"latency_trace_{backend}_logs.tar.gz")
    print(f"[latency-trace] {result}, logs in {logs}", flush=True)


def _p(summary: dict, fmt: str = "g") -> str:
    return "/".join(format(summary.get(k, 0), fmt) for k in ("p50", "p90", "p99"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", default="real", choices=("real", "sim"))
    parser.add_argument("--backends", nargs="+", choices=("torch", "driver", "driver_fills"),
                        help="default on a GPU: torch then driver (PyTorch matmuls, then the same lengths as "
                             "driver-API spin kernels, one launch per unit: where the two differ, the launch "
                             "pattern is the difference); on the simulated GPU: driver")
    parser.add_argument("--shapes", nargs="+", default=["i", "ii", "iii"], help="prefixes of sec_latency.SHAPES")
    parser.add_argument("--bursts", type=int, default=300, help="bursts per series beside the neighbour")
    parser.add_argument("--out", default=os.environ.get("OUT") or "latency-trace")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for backend in args.backends or (["torch", "driver"] if args.gpu == "real" else ["driver"]):
        trace(args.gpu, backend, args.shapes, args.bursts, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
