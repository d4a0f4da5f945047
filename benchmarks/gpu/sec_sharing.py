"""Sections c and d: shares between two groups, and a cap alone.

c. Two groups, request 30% and 70% (limit 100%), each with one process
   running 4096 fp16 matmuls from the same instant: the 30% side's part of
   the iterations both did (work done per process, not tokend's charge).
d. A group with limit 30% alone, with 0.22 ms and ~12.5 ms kernels: its
   iterations per second against bare runs before and after it (their
   ratio is the noise). To tell where points over 30% come from, also: the
   group's charged share as tokend reports it, each kernel's GPU time (CUDA
   events) bare and capped, and the SM clock and power (NVML) in each run."""
from __future__ import annotations

import threading
import time

from gslice.experiment import SharingExperiment

from harness import ClockSampler, Context, Worker, phase_stats, verdict, wait_ready


def shares(ctx: Context) -> None:
    rec = ctx.record
    with SharingExperiment(ctx.work_dir / "exp", gpu=ctx.gpu) as exp:
        exp.add_group("s30", request="30%", limit="100%", memory="4GiB")
        exp.add_group("s70", request="70%", limit="100%", memory="4GiB")
        workers = {"bare": Worker(exp, "s30", ctx.backend, "bare", ctx.work_dir, shim=False),
                   "s30": Worker(exp, "s30", ctx.backend, "s30", ctx.work_dir),
                   "s70": Worker(exp, "s70", ctx.backend, "s70", ctx.work_dir)}
        try:
            wait_ready(list(workers.values()), min(120.0, ctx.left()))
            # The workload bare first: its rate alone is what "together" is measured against.
            alone = workers["bare"].call("throughput", 120, unit="mm4096h", seconds=ctx.seconds(2.0, 0.3),
                                         sync_every=4)
            alone_rate = alone["iterations"] / alone["seconds"]
            rec.set("bare_alone", {"iterations_per_s": alone_rate})
            seconds = ctx.seconds(10.0, 2.0)
            start_at = time.time() + 1.0
            for name in ("s30", "s70"):
                workers[name].send("throughput", unit="mm4096h", seconds=seconds, sync_every=4, start_at=start_at)
            reports = {name: workers[name].receive("throughput", seconds + 120) for name in ("s30", "s70")}
            status = exp.admin.status()
            done = {n: r["iterations"] for n, r in reports.items()}
            total = sum(done.values())
            fraction = done["s30"] / total if total else None
            per_second = [a / (a + b) if a + b else None
                          for a, b in zip(reports["s30"]["per_second"], reports["s70"]["per_second"])]
            together = sum(r["iterations"] / r["seconds"] for r in reports.values()) / alone_rate
            rec.set("shares_30_70", {
                "what": f"two groups request 30%/70% (limit 100%), 4096 fp16 matmuls 4 per sync, {seconds} s "
                        "from one instant; the 30% side's part of the iterations both processes did",
                "iterations": done, "per_second": {n: r["per_second"] for n, r in reports.items()},
                "s30_fraction_per_second": per_second,
                "together_over_bare_alone": together,
                "tokend_window_share": {g.group.name: g.share for g in status.groups},
                "target": verdict(fraction, low=0.27, high=0.33)})
        finally:
            for w in workers.values():
                w.close()


class ShareSampler:
    """tokend's charged share of `group` (status, over its window) every `interval` s."""

    def __init__(self, admin, group: str, interval: float = 0.25):
        self.admin, self.group, self.interval = admin, group, interval
        self.samples: list[tuple[float, float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            try:
                status = self.admin.status()
                self.samples.append((time.monotonic(), status.group(self.group).share, status.busy_fraction))
            except Exception:  # a status call that fails is a missing sample, not a failed section
                pass
            self._stop.wait(self.interval)

    def stop(self) -> list:
        self._stop.set()
        self._thread.join(10)
        return self.samples


CAP_CASES = [
    # unit, sync_every, probe_every, what
    ("mm4096h", 4, 10, "4096 fp16 matmuls (~0.22 ms kernels), 4 per sync"),
    ("mm16384bf", 1, 2, "16384 bf16 matmuls (~12.5 ms kernels), each synced"),
]


def caps(ctx: Context) -> None:
    rec = ctx.record
    with SharingExperiment(ctx.work_dir / "exp", gpu=ctx.gpu) as exp:
        exp.add_group("cap30", request="30%", limit="30%", memory="8GiB")
        bare = Worker(exp, "cap30", ctx.backend, "bare", ctx.work_dir, shim=False)
        capped = Worker(exp, "cap30", ctx.backend, "capped", ctx.work_dir)
        clocks = ClockSampler(exp)
        phases = []
        try:
            wait_ready([bare, capped], min(120.0, ctx.left()))
            for unit, sync_every, probe_every, what in CAP_CASES:
                bare_s, capped_s = ctx.seconds(3.0, 0.4), ctx.seconds(10.0, 2.0)
                runs = {}
                for label, worker, seconds in (("bare_before", bare, bare_s), ("capped", capped, capped_s),
                                               ("bare_after", bare, bare_s)):
                    sampler = ShareSampler(exp.admin, "cap30") if label == "capped" else None
                    stats_before = worker.call("shim_stats", 30) if label == "capped" else None
                    t0 = time.monotonic()
                    runs[label] = worker.call("throughput", seconds + 120, unit=unit, seconds=seconds,
                                              sync_every=sync_every, probe_every=probe_every)
                    t1 = time.monotonic()
                    runs[label]["rate"] = runs[label]["iterations"] / runs[label]["seconds"]
                    phases.append((unit, label, t0, t1))
                    if stats_before and stats_before.get("available"):
                        # The shim's own account of the run: GPU time it reported used, tokens, overruns.
                        after = worker.call("shim_stats", 30)
                        runs[label]["shim_stats_delta"] = {k: after[k] - stats_before[k] for k in (
                            "used_us", "overrun_us", "tokens_acquired", "lease_resumes", "revokes", "checkpoints",
                            "checkpoint_waits", "slow_entries") if k in after}
                        runs[label]["shim_used_fraction_of_wall"] = (
                            runs[label]["shim_stats_delta"].get("used_us", 0) / 1e6 / (t1 - t0))
                    if sampler:
                        samples = sampler.stop()
                        runs[label]["tokend_share_samples"] = [[round(t - t0, 3), round(s, 4), round(b, 4)]
                                                               for t, s, b in samples]
                    rec.set(f"cap30_{unit}_runs", runs)
                bare_rate = (runs["bare_before"]["rate"] + runs["bare_after"]["rate"]) / 2
                fraction = runs["capped"]["rate"] / bare_rate
                shares_seen = runs["capped"].get("tokend_share_samples") or []
                rec.set(f"cap30_{unit}", {
                    "what": f"limit 30% alone, {what}; capped {capped_s} s between bare runs of {bare_s} s",
                    "fraction_of_bare": fraction,
                    "fraction_per_second": [n / bare_rate for n in runs["capped"]["per_second"]],
                    "bare_after_over_bare_before": runs["bare_after"]["rate"] / runs["bare_before"]["rate"],
                    "kernel_ms": {k: runs[k]["kernel_ms"] for k in runs},
                    "tokend_share_last": shares_seen[-1][1] if shares_seen else None,
                    "shim_used_fraction_of_wall": runs["capped"].get("shim_used_fraction_of_wall"),
                    "target": verdict(fraction, low=0.27, high=0.33)})
        finally:
            report = clocks.stop()
            rec.set("nvml_by_run", [{"unit": u, "run": label, **phase_stats(report, t0, t1)}
                                    for u, label, t0, t1 in phases])
            rec.set("nvml_errors", report.get("errors") or report.get("error"))
            bare.close()
            capped.close()
