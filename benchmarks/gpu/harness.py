"""What every section of the real-GPU check shares: a served workload process
(gslice.workloads_served) run bare or under the shim in a group, read with
timeouts; a section's record, written to disk after every step; and the
scale (full on a GPU, short on the simulated GPU)."""
from __future__ import annotations

import json
import os
import select
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path


class WorkerError(RuntimeError):
    """A served workload process failed, answered with an error, or went quiet."""


class Worker:
    """One `python -m gslice.workloads_served` process in `group` of a
    SharingExperiment (bare: no shim, same GPU)."""

    def __init__(self, exp, group: str, backend: str, label: str, log_dir: Path, shim: bool = True,
                 env: dict | None = None):
        self.label = label
        self.log_path = Path(log_dir) / f"worker-{label}.log"
        # --tag: names the process after its log, so a leftover one can be found by its section's folder.
        argv = [sys.executable, "-m", "gslice.workloads_served", "--backend", backend, "--tag", str(self.log_path)]
        self._log = open(self.log_path, "w")
        if env:
            # SharingExperiment.spawn builds the environment; extra variables ride on os.environ for it.
            saved = {k: os.environ.get(k) for k in env}
            os.environ.update(env)
        try:
            self.proc = exp.spawn(group, argv, shim=shim, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=self._log, text=True, bufsize=1)
        finally:
            if env:
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
        self.pid = self.proc.pid
        self.ready: dict | None = None

    def stderr_tail(self, chars: int = 1500) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def _read_line(self, timeout: float, what: str) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WorkerError(f"{self.label}: no answer to {what} within {timeout:.0f} s; stderr: {self.stderr_tail()}")
            ready, _, _ = select.select([self.proc.stdout], [], [], min(left, 0.5))
            if not ready:
                if self.proc.poll() is not None:
                    raise WorkerError(f"{self.label}: exited with {self.proc.returncode} during {what}; "
                                      f"stderr: {self.stderr_tail()}")
                continue
            line = self.proc.stdout.readline()
            if not line:
                raise WorkerError(f"{self.label}: closed its output (exit {self.proc.wait()}) during {what}; "
                                  f"stderr: {self.stderr_tail()}")
            if line.startswith("{"):
                return json.loads(line)

    def wait_ready(self, timeout: float) -> dict:
        self.ready = self._read_line(timeout, "start-up")
        if not self.ready.get("ready"):
            raise WorkerError(f"{self.label}: could not set up: {self.ready.get('error')}; "
                              f"{self.ready.get('trace', '')[-800:]}")
        return self.ready

    def send(self, op: str, **args) -> None:
        try:
            self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise WorkerError(f"{self.label}: cannot send {op} ({exc}); stderr: {self.stderr_tail()}") from exc

    def receive(self, op: str, timeout: float) -> dict:
        reply = self._read_line(timeout, op)
        if not reply.get("ok"):
            raise WorkerError(f"{self.label}: {op} failed: {reply.get('error')}")
        return reply

    def call(self, op: str, timeout: float, **args) -> dict:
        self.send(op, **args)
        return self.receive(op, timeout)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.send("exit")
                self.proc.wait(5)
            except (WorkerError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def wait_ready(workers: list[Worker], timeout: float) -> list[Worker]:
    """Wait until every worker (started together, so their imports overlap) is set up."""
    deadline = time.monotonic() + timeout
    for w in workers:
        w.wait_ready(max(1.0, deadline - time.monotonic()))
    # Fault injection for the short form's test: GSLICE_GPU_CHECK_SECTION_DELAY=name:seconds makes
    # that section hang here, its daemon and workers running, so its hard timeout is what ends it.
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
