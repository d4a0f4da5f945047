"""The real-GPU tests run only where a real NVIDIA GPU is present, and those
that use the `needs_cupy` fixture only where CuPy is importable by the
interpreter that spawns the workloads; elsewhere they are skipped, with the
reason saying what is missing. (The driver-API test needs no CuPy, so it
still runs on a GPU machine where CuPy could not be installed.)"""
from __future__ import annotations

import functools
import subprocess
import sys

import pytest

from gslice.experiment import real_gpu_present


@functools.lru_cache(maxsize=1)
def missing_gpu() -> str:
    return "" if real_gpu_present() else "no real NVIDIA GPU (NVML through pynvml finds none)"


@functools.lru_cache(maxsize=1)
def missing_cupy() -> str:
    # In a subprocess: the workloads run in one, and importing CuPy here would
    # slow every default test run on machines that have it.
    probe = subprocess.run([sys.executable, "-c", "import cupy"], capture_output=True, text=True, timeout=120)
    if probe.returncode == 0:
        return ""
    last_line = (probe.stderr.strip().splitlines() or ["(no message)"])[-1]
    return f"CuPy is not importable by {sys.executable} ({last_line}); install it with: pip install cupy-cuda12x"


@pytest.fixture
def needs_cupy():
    """Marks a test as needing CuPy (checked by the autouse fixture below)."""


@pytest.fixture(autouse=True)
def _require_real_gpu(request):
    missing = [missing_gpu()]
    if "needs_cupy" in request.fixturenames:
        missing.append(missing_cupy())
    reason = "; ".join(m for m in missing if m)
    if reason:
        pytest.skip(f"real-GPU test skipped: {reason}")
