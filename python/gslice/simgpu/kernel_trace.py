"""The simulated GPU's per-process kernel timeline (simgpu/kernel_trace.c).

With ``GSLICE_SIM_KERNEL_TRACE=<directory>`` in its environment, a process on
the simulated GPU writes ``<directory>/kernels-<pid>.tsv`` when it exits:
one line per kernel, in the order its stream workers ran them. It tells
where a slow request's time went: a late submission (``enqueued_ns``), a
wait for the engine (``start_ns - ready_ns``), or the simulator's own timer
waking late (``overrun_ns``), which is the machine's noise, not the shim's.

    exp.sim_env[ENV_KERNEL_TRACE] = str(directory)
    ... run a workload ...
    runs = read(directory, pid)
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["ENV_KERNEL_TRACE", "KernelRun", "queued_at_ns", "read", "submitted_between", "trace_path"]

ENV_KERNEL_TRACE = "GSLICE_SIM_KERNEL_TRACE"


@dataclass(frozen=True)
class KernelRun:
    """One kernel, CLOCK_MONOTONIC nanoseconds (time.monotonic_ns())."""
    enqueued_ns: int    # queued on its stream (the launch call reached the driver)
    ready_ns: int       # its stream's worker took it (the work before it on the stream was done)
    # it got the engine, in stream time (back to back with its context's
    # previous work: where that ended, which may precede ready_ns)
    start_ns: int
    end_ns: int         # it left the engine
    requested_ns: int   # how long it was asked to run
    away_ns: int = 0    # stopped at its context's slice ends while other contexts had the engine

    @property
    def overrun_ns(self) -> int:
        """Time on the engine beyond what was asked and the time it was
        away: the simulator's sleep ending late (a busy or noisy machine)."""
        return self.end_ns - self.start_ns - self.requested_ns - self.away_ns


def trace_path(directory: str | Path, pid: int) -> Path:
    return Path(directory) / f"kernels-{pid}.tsv"


def read(directory: str | Path, pid: int) -> list[KernelRun]:
    """The kernels process `pid` ran, as it wrote them at exit (a process
    killed by a signal writes none: FileNotFoundError)."""
    runs = []
    with open(trace_path(directory, pid)) as lines:
        for number, line in enumerate(lines, 1):
            if line.startswith("#") or not line.strip():
                continue
            fields = line.split("\t")
            if len(fields) not in (5, 6):
                raise ValueError(f"{trace_path(directory, pid)} line {number} has {len(fields)} fields; "
                                 "expected 6 (enqueued, ready, start, end, requested, away ns) or 5 (no away)")
            runs.append(KernelRun(*(int(field) for field in fields)))
    return runs


def queued_at_ns(runs: list[KernelRun], at_ns: int) -> int:
    """GPU work a process had queued and not yet run at `at_ns`, in requested
    time (the rest of the kernel on the engine, all of those waiting): what
    another context's work arriving then waits for or takes turns with. The
    simulator's late timers do not count; a kernel on the engine is taken to
    have run since its start (time away before `at_ns` is not known apart
    from time away after it)."""
    left = 0
    for run in runs:
        if run.enqueued_ns < at_ns < run.end_ns:
            done = at_ns - run.start_ns if run.start_ns < at_ns else 0
            left += max(0, run.requested_ns - done)
    return left


def submitted_between(runs: list[KernelRun], start_ns: int, end_ns: int) -> int:
    """Kernels a process queued strictly between two instants."""
    return sum(1 for run in runs if start_ns < run.enqueued_ns < end_ns)
