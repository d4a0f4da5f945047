"""Inference latency (issue 14): the same inference-like program (bursts of
8 x 500 us kernels, synchronise, think 20 ms) bare, alone under the shim
(request 30%, high priority), and under the shim beside two saturating
normal groups with 2 ms kernels, all in one run. Burst latency = first
launch to the end of the synchronise, as the program measures it; the
token wait p99 comes from tokend's histogram for the inference group.
"""
from __future__ import annotations

import json
import time

from gslice.experiment import SharingExperiment

from exp_priority import _wait_p99_ms, fifo_throughput_bound
from results_io import Result

BURSTS = ["bursts", "--kernel-us", "500", "--burst", "8", "--think-ms", "20"]
NEIGHBOUR_KERNEL_US = 2000


def _bursts(exp: SharingExperiment, seconds: float, shim: bool) -> dict:
    proc = exp.spawn_workload("inference", [*BURSTS, "--seconds", str(seconds)], shim=shim)
    out, _ = proc.communicate(timeout=seconds + 60)
    if proc.returncode != 0:
        raise RuntimeError(f"bursts workload (shim={shim}) failed with {proc.returncode}")
    return json.loads(out.strip().splitlines()[-1])


def latency(seconds: float = 10.0) -> Result:
    result = Result("latency", device="simulated GPU")
    with SharingExperiment(gpu="sim") as exp:
        exp.add_group("inference", request=0.3, limit=1.0, memory="1GiB", priority="high")
        exp.add_group("batch-a", request=0.35, limit=1.0, memory="1GiB")
        exp.add_group("batch-b", request=0.35, limit=1.0, memory="1GiB")
        bare = _bursts(exp, seconds, shim=False)
        alone = _bursts(exp, seconds, shim=True)
        wait_alone = _wait_p99_ms(exp.tokend.metrics_text(), "inference")
        for group in ("batch-a", "batch-b"):
            exp.spawn_workload(group, ["spin", "--kernel-us", str(NEIGHBOUR_KERNEL_US),
                                       "--seconds", str(seconds + 30)])
        time.sleep(1.0)
        before = exp.tokend.metrics_text()
        beside = _bursts(exp, seconds, shim=True)
        wait_beside = _wait_p99_ms(exp.tokend.metrics_text(), "inference", since=before)
    result.add("bare/p50", bare["latency_ms_p50"], "ms")
    result.add("bare/p99", bare["latency_ms_p99"], "ms")
    result.add("alone/p50_vs_bare", alone["latency_ms_p50"] / bare["latency_ms_p50"] * 100, "%", "<= 105")
    result.add("alone/p99_vs_bare", alone["latency_ms_p99"] / bare["latency_ms_p99"] * 100, "%", "<= 105")
    result.add("beside/p99_minus_bare_p99", beside["latency_ms_p99"] - bare["latency_ms_p99"], "ms", "<= 2.5")
    result.add("beside/throughput_vs_alone", beside["bursts_per_s"] / alone["bursts_per_s"] * 100, "%", ">= 97")
    result.add("beside/throughput_bound_fifo", fifo_throughput_bound(alone, NEIGHBOUR_KERNEL_US), "%")
    if wait_beside is not None:
        result.add("beside/token_wait_p99", wait_beside, "ms", "<= 2")
    result.details = {"bare": bare, "alone": alone, "beside": beside, "token_wait_p99_ms_alone": wait_alone,
                      "workload": BURSTS, "neighbour_kernel_us": NEIGHBOUR_KERNEL_US}
    return result
