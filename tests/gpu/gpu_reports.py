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
