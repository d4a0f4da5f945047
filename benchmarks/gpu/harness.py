"""What every section of the real-GPU check shares: served workload processes
(gslice.workloads_served.ServedWorker); NVML read in a process of its own;
a section's record, written to disk after every step; and the
scale (full on a GPU, short on the simulated GPU)."""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from gslice.workloads_served import ServedWorker, wait_all_ready


Worker = ServedWorker


def wait_ready(workers: list[ServedWorker], timeout: float) -> list[ServedWorker]:
    """wait_all_ready, and the short form's fault injection: with
    GSLICE_GPU_CHECK_SECTION_DELAY=name:seconds that section hangs here, its
    daemon and workers running, so its hard timeout is what ends it."""
    wait_all_ready(workers, timeout)
    delayed, _, delay = os.environ.get("GSLICE_GPU_CHECK_SECTION_DELAY", "").partition(":")
    if delayed and delayed == os.environ.get("GSLICE_GPU_CHECK_SECTION"):
        print(f"delaying section {delayed} by {delay} s (GSLICE_GPU_CHECK_SECTION_DELAY)", flush=True)
        time.sleep(float(delay))
    return workers


NVML_WATCH = Path(__file__).resolve().parent / "nvml_watch.py"


def nvml_env(exp) -> dict:
    """NVML of the experiment's GPU: the simulated one's library when simulated."""
    return {**os.environ, **exp.sim_env}


def nvml_processes(exp, timeout: float = 20.0) -> dict[int, int | None]:
    """NVML's per-process used memory now (pid -> bytes, None when not given)."""
    out = subprocess.run([sys.executable, str(NVML_WATCH), "processes"], env=nvml_env(exp), capture_output=True,
                         text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"nvml_watch processes failed ({out.returncode}): {out.stderr[-800:]}")
    return {int(k): v for k, v in json.loads(out.stdout.strip().splitlines()[-1])["processes"].items()}


class ClockSampler:
    """SM clock, power and utilization sampled by NVML while it runs."""

    def __init__(self, exp, interval: float = 0.05):
        self.proc = subprocess.Popen([sys.executable, str(NVML_WATCH), "clocks", "--interval", str(interval)],
                                     env=nvml_env(exp), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)

    def stop(self, timeout: float = 10.0) -> dict:
        try:
            out, err = self.proc.communicate(input="", timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
        lines = [l for l in out.splitlines() if l.startswith("{")]
        if not lines:
            return {"error": f"no samples (exit {self.proc.returncode}): {err[-800:]}", "samples": []}
        return json.loads(lines[-1])


def phase_stats(clock_report: dict, t0: float, t1: float) -> dict:
    """Median SM clock, mean power and utilization between monotonic t0 and t1."""
    rows = [r for r in clock_report.get("samples", []) if t0 <= r[0] <= t1]

    def column(i):
        return [r[i] for r in rows if r[i] is not None]

    sm, power, util = column(1), column(2), column(3)
    return {"samples": len(rows), "sm_clock_mhz_median": statistics.median(sm) if sm else None,
            "power_w_mean": statistics.fmean(power) if power else None,
            "util_pct_mean": statistics.fmean(util) if util else None}


def util_over_spans(clock_report: dict, spans) -> float | None:
    """NVML's utilization (%) over the (t0, t1) spans, weighted by each
    span's samples; None without samples."""
    stats = [phase_stats(clock_report, a, b) for a, b in spans]
    weighted = [(s["util_pct_mean"], s["samples"]) for s in stats if s["util_pct_mean"] is not None]
    samples = sum(n for _, n in weighted)
    return sum(u * n for u, n in weighted) / samples if samples else None


def archive_logs(work_dir: Path, tar_path: Path) -> Path:
    """The *.log files under work_dir into tar_path (gzip), then work_dir
    removed: what a run leaves is its result and this archive."""
    with tarfile.open(tar_path, "w:gz") as tar:
        for path in sorted(Path(work_dir).rglob("*.log")):
            tar.add(path, arcname=str(path.relative_to(work_dir)))
    shutil.rmtree(work_dir, ignore_errors=True)
    return tar_path


class Record:
    """A section's results, rewritten to `path` (JSON) after every step, so a
    section killed by its timeout still leaves what it measured."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.data: dict = {}

    def set(self, key: str, value) -> None:
        self.data[key] = value
        self.flush()

    def add(self, key: str, value) -> None:
        self.data.setdefault(key, []).append(value)
        self.flush()

    def flush(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, default=str))
        os.replace(tmp, self.path)


@dataclass
class Context:
    """What a section is given: the backend, the scale, its deadline, its record."""
    backend: str            # "torch" (real GPU) or "driver" (simulated GPU or a real one without torch)
    gpu: str                # "real" or "sim" (SharingExperiment)
    short: bool             # the short form: tiny runs that only prove the plumbing
    deadline: float         # time.monotonic() by which the section must be done
    record: Record
    work_dir: Path
    notes: list = field(default_factory=list)

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def seconds(self, full: float, short: float) -> float:
        return short if self.short else full

    def count(self, full: int, short: int) -> int:
        return short if self.short else full


def ratio_summary(pairs: list[float]) -> dict:
    """Median and spread of a list of ratios."""
    if not pairs:
        return {}
    return {"median": statistics.median(pairs), "min": min(pairs), "max": max(pairs), "n": len(pairs),
            "values": [round(p, 5) for p in pairs]}


def verdict(value, low=None, high=None) -> dict:
    """A figure against its (two-sided where given) target."""
    met = value is not None and (low is None or value >= low) and (high is None or value <= high)
    return {"value": value, "low": low, "high": high, "met": bool(met)}
