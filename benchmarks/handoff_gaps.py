"""GPU idle between two processes' work (issue 8's token handoff gap) over a
measured interval, from the simulated GPU's handoff records: each time its
engine went from one process's work to another's, and the idle time
between the two (see simgpu/README.md, "Handoffs").

    watch = HandoffWatch(exp.sim_name)   # at the start of the interval
    ...
    figures = watch.stop()               # at its end
    add_metrics(result, "two_groups_of_four", figures)
"""
from __future__ import annotations

import time

from gslice import simgpu

from results_io import Result, at_most

# What gslice adds to a handoff (the release, the grant, the next holder's
# first submission), in us: the simulated GPU's own context switch
# (simgpu/README.md, GSLICE_SIM_CTX_SWITCH_US: 450 us, as measured between
# PyTorch contexts on an H100) comes on top, and no scheduler removes it.
GAP_ADDED_P50_US = 300.0


def percentile(ordered: list[float], q: float) -> float:
    """Nearest rank of sorted values (as gslice.workloads reports latencies)."""
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class HandoffWatch:
    """Counts handoffs from its creation to stop() on simulated GPU `sim_name`."""

    def __init__(self, sim_name: str):
        self._gpu = simgpu.SimGpu(sim_name)
        self._switch_us = self._gpu.engine_model().switch_ns / 1e3
        self._start_count = self._gpu.handoff_count()
        self._started = time.monotonic()

    def stop(self) -> dict:
        """Handoffs in the interval, their rate, and gap percentiles (us) over
        the records the device still holds: all of them unless more than its
        ring (HANDOFF_RING) happened, then the newest, as `note` says."""
        end_count = self._gpu.handoff_count()
        seconds = time.monotonic() - self._started
        records = [r for r in self._gpu.handoffs(since_count=self._start_count) if r.number < end_count]
        self._gpu.close()
        count = end_count - self._start_count
        figures = {"handoffs": count, "seconds": seconds, "handoffs_per_s": count / seconds if seconds > 0 else 0.0,
                   "records_used": len(records), "context_switch_us": self._switch_us}
        if len(records) < count:
            span_ms = (records[-1].at_ns - records[0].at_ns) / 1e6 if records else 0.0
            figures["note"] = (f"{count} handoffs, more than the device keeps: gaps from the newest "
                               f"{len(records)}, over the last {span_ms:.0f} ms of the interval")
        if records:
            gaps_us = sorted(r.gap_ns / 1e3 for r in records)
            figures.update({"gap_us_p50": percentile(gaps_us, 0.50), "gap_us_p99": percentile(gaps_us, 0.99),
                            "gap_us_max": gaps_us[-1]})
        return figures


def add_metrics(result: Result, scenario: str, figures: dict) -> None:
    """`<scenario>/handoff_gap/p50` (target: the simulated GPU's context
    switch + GAP_ADDED_P50_US), `/p99` and `<scenario>/handoffs_per_s`; no
    gap figures when nothing was handed over."""
    if "gap_us_p50" in figures:
        target = at_most(figures.get("context_switch_us", 0.0) + GAP_ADDED_P50_US)
        result.add(f"{scenario}/handoff_gap/p50", figures["gap_us_p50"], "us", target)
        result.add(f"{scenario}/handoff_gap/p99", figures["gap_us_p99"], "us")
    result.add(f"{scenario}/handoffs_per_s", figures["handoffs_per_s"], "1/s")
