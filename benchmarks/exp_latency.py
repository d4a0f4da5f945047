"""Inference latency (issue 14): the same inference-like program (bursts of
8 x 500 us kernels, synchronise, think 20 ms) bare, alone under the shim
(request 30%, high priority), and under the shim beside two saturating
normal groups with 2 ms kernels, all in one run. Burst latency = first
launch to the end of the synchronise, as the program measures it; the
token wait p99 comes from tokend's histogram for the inference group; the
first kernel's start (beside) from the simulated GPU's handoff records:
how long a burst waited for the GPU (token, the preempted neighbour's
kernel, the handoff), against one neighbour kernel plus one handoff.
"""
from __future__ import annotations

import bisect
import json
import time

import gslice.simgpu as simgpu
from gslice.experiment import SharingExperiment

from exp_priority import _wait_p99_ms, burst_summary, fifo_throughput_bound
from handoff_gaps import percentile
from results_io import Result

BURSTS = ["bursts", "--kernel-us", "500", "--burst", "8", "--think-ms", "20"]
NEIGHBOUR_KERNEL_US = 2000


# "One handoff" in issue 14's bound: the token handoff gap target of issue 8.
HANDOFF_MS = 0.3


def _time_to_gpu_ms(report: dict, handoffs: list) -> list[float]:
    """For each burst, from its first launch call to the moment its first
    kernel took the simulated GPU from another process (the GPU's own
    handoff records); bursts that found the GPU already theirs are left out."""
    pid = report["pid"]
    arrivals = sorted(h.at_ns / 1e9 for h in handoffs if h.to_pid == pid)
    result = []
    for start, latency_ms in zip(report["burst_starts"], report["latencies_ms"]):
        i = bisect.bisect_left(arrivals, start)
        if i < len(arrivals) and arrivals[i] <= start + latency_ms / 1e3:
            result.append((arrivals[i] - start) * 1e3)
    return result


def _bursts(exp: SharingExperiment, seconds: float, shim: bool) -> dict:
    proc = exp.spawn_workload("inference", [*BURSTS, "--seconds", str(seconds)], shim=shim)
    out, _ = proc.communicate(timeout=seconds + 60)
    if proc.returncode != 0:
        raise RuntimeError(f"bursts workload (shim={shim}) failed with {proc.returncode}")
    return json.loads(out.strip().splitlines()[-1])


def _pooled(reports: list[dict]) -> dict:
    """Several runs of the bursts workload as one report (latencies pooled)."""
    ordered = sorted(latency for r in reports for latency in r["latencies_ms"])
    seconds = sum(r["seconds"] for r in reports)
    return {"bursts": len(ordered), "seconds": seconds, "bursts_per_s": len(ordered) / seconds,
            "latency_ms_p50": percentile(ordered, 0.50), "latency_ms_p99": percentile(ordered, 0.99),
            "latency_ms_max": ordered[-1], "runs": len(reports)}


def _bare_and_alone(exp: SharingExperiment, seconds: float, rounds: int) -> tuple[dict, dict]:
    """Bare and alone in alternating rounds (seconds / rounds each), so that
    the machine's background noise, which drifts over tens of seconds, falls
    on both alike: measured in one 20 s block each, alone's p99 came out at
    94% to 115% of bare's in five runs on the 2-core VM (2026-11-24)."""
    bare, alone = [], []
    for _ in range(rounds):
        bare.append(_bursts(exp, seconds / rounds, shim=False))
        alone.append(_bursts(exp, seconds / rounds, shim=True))
    return _pooled(bare), _pooled(alone)


def latency(seconds: float = 20.0, rounds: int = 8, alone_seconds: float | None = None) -> Result:
    """`seconds` beside the neighbours; bare and alone `alone_seconds` each
    (default twice `seconds`: their p99 is the 1% tail of one ~4.3 ms burst
    shape, and ~1600 bursts hold it steadier than ~800)."""
    result = Result("latency", device="simulated GPU")
    with SharingExperiment(gpu="sim") as exp:
        exp.add_group("inference", request=0.3, limit=1.0, memory="1GiB", priority="high")
        exp.add_group("batch-a", request=0.35, limit=1.0, memory="1GiB")
        exp.add_group("batch-b", request=0.35, limit=1.0, memory="1GiB")
        bare, alone = _bare_and_alone(exp, alone_seconds or 2 * seconds, rounds)
        wait_alone = _wait_p99_ms(exp.tokend.metrics_text(), "inference")
        for group in ("batch-a", "batch-b"):
            exp.spawn_workload(group, ["spin", "--kernel-us", str(NEIGHBOUR_KERNEL_US),
                                       "--seconds", str(seconds + 30)])
        time.sleep(1.0)
        before = exp.tokend.metrics_text()
        gpu_view = simgpu.SimGpu(exp.sim_name)
        count_before = gpu_view.handoff_count()
        beside = _bursts(exp, seconds, shim=True)
        wait_beside = _wait_p99_ms(exp.tokend.metrics_text(), "inference", since=before)
        to_gpu = _time_to_gpu_ms(beside, gpu_view.handoffs(count_before))
        gpu_view.close()
    result.add("bare/p50", bare["latency_ms_p50"], "ms")
    result.add("bare/p99", bare["latency_ms_p99"], "ms")
    result.add("alone/p50_vs_bare", alone["latency_ms_p50"] / bare["latency_ms_p50"] * 100, "%", "<= 105")
    result.add("alone/p99_vs_bare", alone["latency_ms_p99"] / bare["latency_ms_p99"] * 100, "%", "<= 105")
    result.add("beside/p99_minus_bare_p99", beside["latency_ms_p99"] - bare["latency_ms_p99"], "ms", "<= 2.5")
    result.add("beside/throughput_vs_alone", beside["bursts_per_s"] / alone["bursts_per_s"] * 100, "%", ">= 97")
    result.add("beside/throughput_bound_fifo", fifo_throughput_bound(alone, NEIGHBOUR_KERNEL_US), "%")
    if wait_beside is not None:
        result.add("beside/token_wait_p99", wait_beside, "ms", "<= 2")
    if to_gpu:
        # Issue 14: the GPU within one low-priority kernel plus one handoff.
        bound = NEIGHBOUR_KERNEL_US / 1e3 + HANDOFF_MS
        to_gpu.sort()
        result.add("beside/first_kernel_start_p50", percentile(to_gpu, 0.5), "ms")
        result.add("beside/first_kernel_start_p99", percentile(to_gpu, 0.99), "ms", f"<= {bound:g}")
    result.details = {"bare": bare, "alone": alone, "beside": burst_summary(beside),
                      "token_wait_p99_ms_alone": wait_alone, "workload": BURSTS,
                      "neighbour_kernel_us": NEIGHBOUR_KERNEL_US}
    return result
