"""Reading what a workload process reports: its exit status and its JSON lines."""
from __future__ import annotations

import json
import select
import subprocess
import time

import pytest

PROCESS_TIMEOUT = 180.0  # seconds; CuPy import and PTX JIT on a cold machine included


def finish_json(proc: subprocess.Popen, what: str, timeout: float = PROCESS_TIMEOUT) -> dict:
    """Wait for `proc` (stdout and stderr piped, text), require exit status 0,
    and return the last JSON line it printed."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"{what} did not finish within {timeout} s; stderr tail:\n{err[-3000:]}")
    assert proc.returncode == 0, f"{what} exited with {proc.returncode}; stderr tail:\n{err[-3000:]}"
    lines = [line for line in out.splitlines() if line.startswith("{")]
    assert lines, f"{what} printed no JSON line; stdout:\n{out[-2000:]}\nstderr tail:\n{err[-3000:]}"
    return json.loads(lines[-1])


def read_json_line(proc: subprocess.Popen, what: str, timeout: float = PROCESS_TIMEOUT) -> dict:
    """The first JSON line `proc` prints while it keeps running (stdout piped, text)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.5)
        if ready:
            line = proc.stdout.readline()
            if not line:
                err = proc.stderr.read() if proc.stderr else ""
                pytest.fail(f"{what} closed its output (exit status {proc.wait()}) before printing; "
                            f"stderr tail:\n{err[-3000:]}")
            if line.startswith("{"):
                return json.loads(line)
    pytest.fail(f"{what} printed no JSON line within {timeout} s")


# -- served workload processes (gslice.workloads_served): bare first, then under the shim

def served(exp, group: str, backend: str, label: str, log_dir, shim: bool = True, env: dict | None = None):
    """A ServedWorker in `group` (closed with the experiment: SharingExperiment
    kills every process it spawned)."""
    from gslice.workloads_served import ServedWorker
    return ServedWorker(exp, group, backend, label, log_dir, shim=shim, env=env)


def bare_or_skip(worker, what: str, op: str, timeout: float = PROCESS_TIMEOUT, **args) -> dict:
    """Run `op` on a bare worker (no shim); when the workload itself fails
    without gslice, skip the test with that failure: it is not gslice's."""
    from gslice.workloads_served import WorkerError
    try:
        if worker.ready is None:
            worker.wait_ready(timeout)
        return worker.call(op, timeout, **args)
    except WorkerError as exc:
        pytest.skip(f"{what} fails without gslice too, so this test cannot blame gslice: {exc}")


def interleaved_ratios(bare_a, shim, bare_b, op: str, key, rounds: int, timeout: float = PROCESS_TIMEOUT,
                       **args) -> tuple[list[float], list[float]]:
    """`rounds` rounds of bare A / shim / bare B (order rotated); per round,
    shim/bare A and bare B/bare A of key(reply)."""
    shim_ratios, noise = [], []
    for r in range(rounds):
        order = [(bare_a, shim, bare_b), (shim, bare_b, bare_a), (bare_b, bare_a, shim)][r % 3]
        got = {w.label: key(w.call(op, timeout, **args)) for w in order}
        shim_ratios.append(got[shim.label] / got[bare_a.label])
        noise.append(got[bare_b.label] / got[bare_a.label])
    return shim_ratios, noise


def nvml_used_by(pid: int) -> int | None:
    """NVML's used memory for `pid`, read from this process (no shim here to filter it)."""
    import pynvml
    pynvml.nvmlInit()
    try:
        for i in range(pynvml.nvmlDeviceGetCount()):
            for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(pynvml.nvmlDeviceGetHandleByIndex(i)):
                if proc.pid == pid:
                    return proc.usedGpuMemory
    finally:
        pynvml.nvmlShutdown()
    return None
