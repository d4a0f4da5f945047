"""Fixtures for the simulated GPU's tests: a fresh simulator per test,
compiled check programs, and processes that are always cleaned up."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

from gslice import simgpu  # noqa: E402

PROGRAMS = Path(__file__).resolve().parent / "programs"


@pytest.fixture(scope="session")
def sim_libs() -> Path:
    """The built libraries (built here if missing, as tools/build_native.py would)."""
    try:
        return simgpu.lib_dir()
    except simgpu.SimGpuNotBuilt:
        subprocess.run([sys.executable, str(ROOT / "tools" / "build_native.py"), "simgpu"], check=True)
        return simgpu.lib_dir()


@pytest.fixture(scope="session")
def programs(tmp_path_factory, sim_libs) -> dict[str, Path]:
    """The check programs in programs/, compiled once per session."""
    out = tmp_path_factory.mktemp("simgpu-programs")
    include = ROOT / "include"
    built = {}
    builds = {
        "driver_check": ["-L", str(sim_libs), "-lcuda"],
        "capture_check": ["-L", str(sim_libs), "-lcuda", "-lpthread"],
        "memory_rules_check": ["-L", str(sim_libs), "-lcuda", "-lnvidia-ml"],
        "proc_address_check": ["-ldl"],
        "layout_check": [],
    }
    for name, extra in builds.items():
        target = out / name
        subprocess.run(["gcc", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{include}", f"-I{ROOT / 'simgpu'}",
                        str(PROGRAMS / f"{name}.c"), "-o", str(target), *extra], check=True)
        built[name] = target
    interposer = out / "libinterposer.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O2", str(PROGRAMS / "interposer.c"), "-o", str(interposer)],
                   check=True)
    built["interposer"] = interposer
    return built


@pytest.fixture(scope="session")
def burst_latency(sim_libs, tmp_path_factory) -> Path:
    """programs/burst_latency.c: bursts, queues and saturating loops timed from C."""
    out = tmp_path_factory.mktemp("burst-latency") / "burst_latency"
    subprocess.run(["gcc", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{ROOT / 'include'}", f"-I{PROGRAMS}",
                    str(PROGRAMS / "burst_latency.c"), "-o", str(out), f"-L{sim_libs}", "-lcuda"], check=True)
    return out


@pytest.fixture
def sim_name(request):
    """A unique simulator name; its segment is removed after the test."""
    name = f"test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    yield name
    simgpu.unlink(name)


class Processes:
    """Processes started by a test; all are killed and reaped at the end."""

    def __init__(self):
        self.started: list[subprocess.Popen] = []

    def start(self, args, env, **kwargs) -> subprocess.Popen:
        proc = subprocess.Popen([str(a) for a in args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, **kwargs)
        self.started.append(proc)
        return proc

    def run(self, args, env, timeout=60, check=True, **kwargs) -> subprocess.CompletedProcess:
        proc = self.start(args, env, **kwargs)
        out, err = proc.communicate(timeout=timeout)
        result = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        if check and proc.returncode != 0:
            raise AssertionError(f"{args} exited {proc.returncode}\nstdout: {out}\nstderr: {err}")
        return result

    def spin_side_by_side(self, driver_check, sim_name: str, labels, kernel_ns: int, count: int) -> list:
        """One `driver_check spin` process per label on simulator sim_name,
        all started before any is waited for; returns them once all exited 0."""
        import gslice.simgpu as simgpu
        procs = [self.start([driver_check, "spin", kernel_ns, count], simgpu.env(sim_name, label=label))
                 for label in labels]
        for proc in procs:
            out, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, (out, err)
        return procs

    def cleanup(self):
        for proc in self.started:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            try:
                proc.communicate(timeout=10)
            except Exception:  # already drained or stuck pipes: the process is dead either way
                pass


@pytest.fixture
def processes():
    tracker = Processes()
    yield tracker
    tracker.cleanup()


def _parse(output: str) -> dict[str, str]:
    values = {}
    for line in output.splitlines():
        for token in line.split():
            if "=" in token:
                key, value = token.split("=", 1)
                values[key] = value
    return values


@pytest.fixture
def parse():
    """key=value pairs from a check program's output."""
    return _parse
