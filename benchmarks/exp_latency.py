"""Latency of a high-priority tenant beside neighbours (issue 23), on the
calibrated simulated GPU (simgpu/README.md, "Contexts on the engine": one
context at a time, 2.09 ms time slices between contexts with queued work,
compute preemption, 450 us per switch, as measured between PyTorch contexts
on an H100).

The tenant: bursts of 8 x 215 us kernels with 10 ms think (the H100 rows of
FIELD-NOTES section 10: 8 fp16 4096 matmuls, 1.72 ms alone), from a C
program so that a burst's launches reach the driver microseconds apart, as
PyTorch's do. Series, interleaved in rounds so that the machine's drifting
background load falls on all alike:
- bare: no shim, no neighbour; alone: under the shim (high priority), no
  neighbour;
- beside: under the shim, beside low-priority neighbours with 0.25 ms or
  2 ms kernels, synchronising every 4 kernels or never, one group or two.

Targets (issue 23), against alone in the same run:
- neighbour kernels <= 0.5 ms: p99 <= 1.25 x alone's p99, p50 <= alone's + 0.3 ms;
- neighbour kernels ~2 ms: p99 <= alone's p99 + one neighbour kernel + 0.3 ms;
- the neighbours keep >= 80% of the GPU time the bursts leave idle, and the
  GPU is >= 95% busy.
Targets are written as plain "<= x" / ">= x" bounds computed from the run's
own alone series (easy to port to a two-sided target type).

Each case's p99 also comes as the spread between its even and odd rounds
(`p99_spread_between_halves`): on a 2-core VM a p99 beside neighbours
moves by a millisecond or more between runs of the same code, through the
machine's thread wake-ups, not the shim.

Where a slow burst's time went comes from the simulated GPU's kernel trace of
the tenant: `first_us` (burst start to its first kernel on the engine) and
`away_us` (its kernels stopped at slice ends while a neighbour's context ran).
"""
from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from gslice.experiment import SharingExperiment, busy_fraction_between
from gslice.simgpu import kernel_trace

from handoff_gaps import percentile
from results_io import Result, at_least, at_most

ROOT = Path(__file__).resolve().parent.parent
PROGRAM_SOURCE = ROOT / "tests" / "simgpu" / "programs" / "burst_latency.c"

BURST_KERNEL_US = 215
BURST_KERNELS = 8
THINK_MS = 10.0
# One handoff in the bound: the token handoff target of issue 8.
HANDOFF_MS = 0.3
# The burst median beyond alone and the model's context switch (simulated GPU).
BEYOND_SWITCH_MS = 0.1


@dataclass(frozen=True)
class Case:
    kernel_us: int
    sync_every: int   # 0: never
    groups: int

    @property
    def name(self) -> str:
        sync = f"sync{self.sync_every}" if self.sync_every else "never"
        return f"beside_{self.kernel_us / 1000:g}ms_{sync}_{self.groups}g"


CASES = [Case(k, s, g) for g in (1, 2) for k in (250, 2000) for s in (4, 0)]


def build_program() -> Path:
    """tests/simgpu/programs/burst_latency.c against the simulated libcuda."""
    from gslice import simgpu
    out = ROOT / "build" / "bench" / "burst_latency"
    out.parent.mkdir(parents=True, exist_ok=True)
    if not out.exists() or out.stat().st_mtime < PROGRAM_SOURCE.stat().st_mtime:
        subprocess.run(["gcc", "-O2", "-std=gnu11", f"-I{ROOT / 'include'}", f"-I{PROGRAM_SOURCE.parent}",
                        str(PROGRAM_SOURCE), "-o", str(out), f"-L{simgpu.lib_dir()}", "-lcuda"], check=True)
    return out


class LatencyRunner:
    """Burst series and neighbours in one SharingExperiment on the simulated GPU."""

    def __init__(self, exp: SharingExperiment, program: Path, burst_kernel_us: float = BURST_KERNEL_US,
                 burst_kernels: int = BURST_KERNELS, think_ms: float = THINK_MS, jitter_ms: float = 0.0):
        self.exp = exp
        self.program = str(program)
        self.burst = [str(int(burst_kernel_us * 1000)), str(burst_kernels), str(think_ms), str(jitter_ms)]

    def bursts(self, seconds: float, shim: bool, trace_dir: str | None = None) -> dict:
        if trace_dir:
            self.exp.sim_env[kernel_trace.ENV_KERNEL_TRACE] = trace_dir
        try:
            proc = self.exp.spawn("inference", [self.program, "bursts", str(seconds), *self.burst], shim=shim,
                                  stdout=subprocess.PIPE, text=True)
        finally:
            self.exp.sim_env.pop(kernel_trace.ENV_KERNEL_TRACE, None)
        out, _ = proc.communicate(timeout=seconds + 60)
        if proc.returncode != 0:
            raise RuntimeError(f"burst client (shim={shim}) exited {proc.returncode}: {out[-500:]}")
        report = json.loads(out.strip().splitlines()[-1])
        if trace_dir:
            report["parts"] = burst_parts(report, kernel_trace.read(trace_dir, report["pid"]))
        return report

    def start_neighbours(self, kernel_us: float, sync_every: int, groups: int, seconds: float,
                         shim: bool = True) -> list[subprocess.Popen]:
        procs = []
        for group in ("batch-a", "batch-b")[:groups]:
            procs.append(self.exp.spawn(group, [self.program, "loop", str(seconds), str(int(kernel_us * 1000)),
                                                str(sync_every)], shim=shim, stdout=subprocess.PIPE, text=True))
        for proc in procs:
            line = proc.stdout.readline()
            if "ready=1" not in line:
                raise RuntimeError(f"neighbour {proc.args} did not start: {line!r}")
        time.sleep(0.3)  # its queue fills, its shim holds the token
        return procs

    @staticmethod
    def stop(procs: list[subprocess.Popen]) -> None:
        for proc in procs:
            proc.kill()
            proc.wait()

    def beside(self, kernel_us: float, sync_every: int, groups: int, seconds: float, trace_dir: str | None,
               shim: bool = True) -> dict:
        """One burst series beside neighbours, with the GPU's busy fraction
        and the neighbours' part of the time the bursts left idle."""
        neighbours = self.start_neighbours(kernel_us, sync_every, groups, seconds + 30, shim=shim)
        try:
            start = self.exp.sample()
            report = self.bursts(seconds, shim=shim, trace_dir=trace_dir)
            end = self.exp.sample()
        finally:
            self.stop(neighbours)
        wall_ns = (end.at - start.at) * 1e9
        bursts_ns = end.busy_ns["inference"] - start.busy_ns["inference"]
        neighbours_ns = sum(end.busy_ns[g] - start.busy_ns[g] for g in ("batch-a", "batch-b")[:groups])
        report["gpu_busy"] = busy_fraction_between(start, end)
        report["neighbours_of_idle"] = neighbours_ns / max(1.0, wall_ns - bursts_ns)
        return report


def burst_parts(report: dict, runs: list[kernel_trace.KernelRun]) -> list[dict]:
    """Per burst (us): `first`: its start to its first kernel on the engine,
    of which `launched` is its start to that kernel's launch reaching the
    GPU (the host's part: the token's wait, the shim) and the rest the GPU's
    (the neighbour's queue, the switch); `away`: its kernels stopped at slice
    ends while another context ran."""
    runs = sorted(runs, key=lambda r: r.enqueued_ns)
    enqueued = [r.enqueued_ns for r in runs]
    import bisect
    parts = []
    for start, latency_ms in zip(report["burst_starts"], report["latencies_ms"]):
        start_ns = int(start * 1e9)
        i = bisect.bisect_left(enqueued, start_ns)
        burst = [r for r in runs[i:i + BURST_KERNELS] if r.enqueued_ns <= start_ns + latency_ms * 1e6]
        if burst:
            parts.append({"latency_ms": latency_ms, "first_us": (min(r.start_ns for r in burst) - start_ns) / 1e3,
                          "launched_us": (min(r.enqueued_ns for r in burst) - start_ns) / 1e3,
                          "away_us": sum(r.away_ns for r in burst) / 1e3})
    return parts


def pooled(reports: list[dict]) -> dict:
    """Burst series (several runs) as one: latency percentiles (ms), the
    GPU's figures averaged, where the slowest 1% lost their time."""
    ordered = sorted(lat for r in reports for lat in r["latencies_ms"][1:])  # the first pays process start-up
    summary = {"bursts": len(ordered), "p50_ms": percentile(ordered, 0.50), "p99_ms": percentile(ordered, 0.99),
               "max_ms": ordered[-1]}
    for key in ("gpu_busy", "neighbours_of_idle"):
        values = [r[key] for r in reports if key in r]
        if values:
            summary[key] = sum(values) / len(values)
    parts = sorted((p for r in reports for p in r.get("parts", [])), key=lambda p: p["latency_ms"])
    if parts:
        slowest = parts[-max(1, len(parts) // 100):]
        for label, group in (("all", parts), ("slowest_1pct", slowest)):
            summary[f"where_{label}_us"] = {k: round(sum(p[k] for p in group) / len(group), 1)
                                            for k in ("first_us", "launched_us", "away_us")}
    return summary


def load_note() -> dict:
    return {"loadavg_1m": os.getloadavg()[0], "cores": os.cpu_count()}


def latency(seconds: float = 16.0, rounds: int = 4, cases: list[Case] | None = None) -> Result:
    """`seconds` of bursts per series (~65-80 bursts a second on a loaded 2-core VM: 16 s is >= 1000),
    split over `rounds` interleaved rounds."""
    cases = CASES if cases is None else cases
    result = Result("latency", device="simulated GPU (calibrated context model)")
    program = build_program()
    names = ["bare", "alone", "bare_again"] + [c.name for c in cases]
    series: dict[str, list[dict]] = {n: [] for n in names}
    loads = [load_note()]
    with SharingExperiment(gpu="sim") as exp, tempfile.TemporaryDirectory(prefix="gslice-latency-") as trace_dir:
        exp.add_group("inference", request=0.3, limit=1.0, memory="1GiB", priority="high")
        exp.add_group("batch-a", request=0.35, limit=1.0, memory="1GiB", priority="low")
        exp.add_group("batch-b", request=0.35, limit=1.0, memory="1GiB", priority="low")
        runner = LatencyRunner(exp, program)
        for _ in range(rounds):
            part = seconds / rounds
            series["bare"].append(runner.bursts(part, shim=False, trace_dir=trace_dir))
            series["alone"].append(runner.bursts(part, shim=True, trace_dir=trace_dir))
            # The noise floor of the alone-against-bare comparison: bare again, interleaved.
            series["bare_again"].append(runner.bursts(part, shim=False, trace_dir=trace_dir))
            for case in cases:
                series[case.name].append(runner.beside(case.kernel_us, case.sync_every, case.groups, part,
                                                       trace_dir))
            loads.append(load_note())
        model = _engine_model(exp.sim_name)
    summaries = {n: pooled(r) for n, r in series.items()}
    bare, alone, bare_again = summaries["bare"], summaries["alone"], summaries["bare_again"]
    result.add("bare/p50", bare["p50_ms"], "ms")
    result.add("bare/p99", bare["p99_ms"], "ms")
    # Each burst beside a busy neighbour pays one context switch at its
    # start on this GPU model (as on the H100 it is calibrated against): the
    # floor under any p50_minus_alone, however fast the handover.
    result.add("engine/context_switch", model["switch_us"] / 1e3, "ms")
    result.add("alone/p50", alone["p50_ms"], "ms")
    result.add("alone/p99", alone["p99_ms"], "ms")
    # A tenant alone: within the bare-against-bare noise of the same run (+ 5% of it as a floor).
    for q in ("p50", "p99"):
        noise = abs(bare_again[f"{q}_ms"] / bare[f"{q}_ms"] - 1) * 100
        result.add(f"bare_again/{q}_vs_bare", bare_again[f"{q}_ms"] / bare[f"{q}_ms"] * 100, "%")
        result.add(f"alone/{q}_vs_bare", alone[f"{q}_ms"] / bare[f"{q}_ms"] * 100, "%", at_most(100 + max(5.0, noise)),
                   noise=f"bare_again/{q}_vs_bare")
    for case in cases:
        s = summaries[case.name]
        tag = case.name
        result.add(f"{tag}/p50_minus_alone", s["p50_ms"] - alone["p50_ms"], "ms",
                   at_most(HANDOFF_MS) if case.kernel_us <= 500 else None)
        # gslice's own part of the median on this GPU model: what is left
        # beyond the model's switch (the 0.3 ms target above includes the
        # switch, 0.45 ms as calibrated against the H100, so on the
        # simulated GPU it is missed by construction). 0.004-0.045 ms in
        # good runs; a keeper that delayed the head start's ask made it
        # 0.23-0.36 ms beside 2 ms kernels, which nothing else flagged.
        result.add(f"{tag}/p50_minus_alone_beyond_switch", s["p50_ms"] - alone["p50_ms"] - model["switch_us"] / 1e3,
                   "ms", at_most(BEYOND_SWITCH_MS))
        result.add(f"{tag}/p99_minus_alone", s["p99_ms"] - alone["p99_ms"], "ms")
        if len(series[case.name]) >= 2:
            # How far this run's own p99 moves between its even and odd
            # rounds: the noise to read the p99 figures against.
            halves = [pooled(series[case.name][first::2])["p99_ms"] for first in (0, 1)]
            result.add(f"{tag}/p99_spread_between_halves", abs(halves[0] - halves[1]), "ms")
        if case.kernel_us <= 500:
            result.add(f"{tag}/p99_over_alone", s["p99_ms"] / alone["p99_ms"] * 100, "%", at_most(125))
        else:
            bound = alone["p99_ms"] + case.kernel_us / 1e3 + HANDOFF_MS
            result.add(f"{tag}/p99", s["p99_ms"], "ms", at_most(round(bound, 3)))
        result.add(f"{tag}/neighbours_of_idle", s["neighbours_of_idle"] * 100, "%", at_least(80))
        result.add(f"{tag}/gpu_busy", s["gpu_busy"] * 100, "%", at_least(95))
    result.details = {"series": summaries, "engine_model": model, "load": loads, "rounds": rounds,
                      "burst": {"kernel_us": BURST_KERNEL_US, "kernels": BURST_KERNELS, "think_ms": THINK_MS}}
    return result


def _engine_model(sim_name: str) -> dict:
    from gslice import simgpu
    with simgpu.SimGpu(sim_name) as gpu:
        m = gpu.engine_model()
        return {"timeslice_us": m.timeslice_ns / 1e3, "switch_us": m.switch_ns / 1e3, "preempt": m.preempt,
                "context_switches": gpu.context_switches(), "preemptions": gpu.preemptions()}
