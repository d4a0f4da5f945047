"""Sharing experiments: a real tokend, groups, and workload processes running
under the real shim, with each group's achieved share measured.

The demo, the multi-process tests and the benchmarks all run through this
one harness, so "what a share is" is defined once:

- on the simulated GPU, a group's share over an interval is the engine time
  its processes' kernels used (the simulator records it per process,
  labelled with the group) over the engine time of all groups;
- on a real GPU, it is the token time tokend charged to the group over its
  sliding window (the real driver has no per-process busy counter).

    with SharingExperiment(tmp_dir) as exp:
        exp.add_group("a", request=0.3)
        exp.spawn_workload("a", ["spin", "--kernel-us", "1000", "--seconds", "10"])
        start = exp.sample(); time.sleep(10); end = exp.sample()
        print(shares_between(start, end))
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import paths
from .testing import TokendProcess
from .units import parse_bytes


def shim_library() -> Path:
    """Path of the built libgslice.so (paths.shim_library)."""
    path = paths.shim_library()
    if not path.exists():
        raise FileNotFoundError(f"{path} is not built: run `python tools/build_native.py hook`")
    return path


def real_gpu_present() -> bool:
    """True when the system's NVML (not the simulator) sees an NVIDIA GPU."""
    probe = ("import pynvml, sys\n"
             "try:\n    pynvml.nvmlInit(); sys.exit(0 if pynvml.nvmlDeviceGetCount() > 0 else 1)\n"
             "except Exception:\n    sys.exit(1)\n")
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    try:
        return subprocess.run([sys.executable, "-c", probe], env=env, timeout=30,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0
    except subprocess.TimeoutExpired:
        return False


@dataclass
class Sample:
    """Cumulative GPU time per group (ns) at one instant."""
    at: float
    busy_ns: dict[str, int]


def shares_between(start: Sample, end: Sample) -> dict[str, float]:
    """Each group's fraction of the GPU time used by all groups in (start, end]."""
    deltas = {g: end.busy_ns.get(g, 0) - start.busy_ns.get(g, 0) for g in end.busy_ns}
    total = sum(deltas.values())
    return {g: (d / total if total else 0.0) for g, d in sorted(deltas.items())}


def busy_fraction_between(start: Sample, end: Sample) -> float:
    """GPU time of all groups over wall time in (start, end]."""
    wall_ns = (end.at - start.at) * 1e9
    used = sum(end.busy_ns.values()) - sum(start.busy_ns.get(g, 0) for g in end.busy_ns)
    return used / wall_ns if wall_ns > 0 else 0.0


@dataclass
class ExperimentGroup:
    name: str
    secret: str
    processes: list[subprocess.Popen] = field(default_factory=list)


class SharingExperiment:
    """tokend + groups + workload processes; everything is stopped on exit,
    and the simulated GPU's shared-memory segment is removed.

    gpu: "sim" (simulated GPU), "real" (the machine's NVIDIA GPU), or
    "auto" (real when present, else simulated)."""

    def __init__(self, base_dir: str | os.PathLike | None = None, gpu: str = "auto",
                 sim_memory: str | int = "16GiB", tokend_args: list[str] | tuple = (),
                 window: float | None = None, shim_env: dict[str, str] | None = None):
        if gpu == "auto":
            gpu = "real" if real_gpu_present() else "sim"
        if gpu not in ("sim", "real"):
            raise ValueError(f"gpu {gpu!r} is not one of 'auto', 'sim', 'real'")
        self.gpu = gpu
        self._own_dir = base_dir is None
        self.base_dir = Path(base_dir or tempfile.mkdtemp(prefix="gslice-exp-"))
        # The daemon owns the simulated GPU (a private one, removed on close).
        self.tokend = TokendProcess(self.base_dir, gpu="sim" if gpu == "sim" else "system",
                                    extra_args=list(tokend_args), window=window,
                                    fake_gpu_memory=parse_bytes(sim_memory), log_level=os.environ.get("GSLICE_EXPERIMENT_TOKEND_LOG", "info"))
        self.sim_name = self.tokend.sim_name
        self.sim_env = dict(self.tokend.sim_env)
        self.shim_env = dict(shim_env or {})
        self.groups: dict[str, ExperimentGroup] = {}
        self._admin = None

    # -- lifecycle
    def __enter__(self) -> "SharingExperiment":
        try:
            self.tokend.start()
            self._admin = self.tokend.admin()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for group in self.groups.values():
            for proc in group.processes:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGKILL)
                proc.wait()
        self.tokend.close()
        if self._own_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    # -- groups and processes
    @property
    def admin(self):
        return self._admin

    def add_group(self, name: str, request, limit=None, memory="1GiB", priority="normal") -> ExperimentGroup:
        created = self._admin.create_group(name, request=request, limit=limit, memory=memory, priority=priority)
        group = ExperimentGroup(name, created.secret)
        self.groups[name] = group
        return group

    def process_env(self, group: str) -> dict[str, str]:
        """Environment of a process that runs in `group` under the shim."""
        env = dict(os.environ)
        env.update(self.sim_env)
        env["LD_PRELOAD"] = paths.preload_with(shim_library(), env.get("LD_PRELOAD", ""), env)
        env["GSLICE_SOCKET"] = str(self.tokend.client_socket)
        env["GSLICE_GROUP"] = group
        env["GSLICE_GROUP_SECRET"] = self.groups[group].secret
        env["GSLICE_SIM_LABEL"] = group
        env.update(self.shim_env)
        return env

    def spawn(self, group: str, argv: list[str], shim: bool = True, **popen_kwargs) -> subprocess.Popen:
        env = self.process_env(group) if shim else {**os.environ, **self.sim_env, "GSLICE_SIM_LABEL": group}
        proc = subprocess.Popen(argv, env=env, **popen_kwargs)
        self.groups[group].processes.append(proc)
        return proc

    def spawn_workload(self, group: str, workload_args: list[str], shim: bool = True,
                       **popen_kwargs) -> subprocess.Popen:
        """`python -m gslice.workloads ARGS` in `group`."""
        popen_kwargs.setdefault("stdout", subprocess.PIPE)
        popen_kwargs.setdefault("text", True)
        return self.spawn(group, [sys.executable, "-m", "gslice.workloads", *workload_args], shim=shim,
                          **popen_kwargs)

    def wait_all(self, timeout: float) -> dict[str, list[int]]:
        """Wait for every workload process; returns exit codes per group."""
        deadline = time.monotonic() + timeout
        codes: dict[str, list[int]] = {}
        for name, group in self.groups.items():
            for proc in group.processes:
                codes.setdefault(name, []).append(proc.wait(max(0.1, deadline - time.monotonic())))
        return codes

    def check_workloads(self) -> None:
        """Raise if a workload process has failed (exit status > 0): a
        measurement must not quietly go on with fewer processes than it
        says (e.g. one refused at context creation by its memory quota).
        Processes killed by a signal are a test's own doing and pass."""
        for name, group in self.groups.items():
            for proc in group.processes:
                code = proc.poll()
                if code is not None and code > 0:
                    raise RuntimeError(f"a workload process of group {name!r} (pid {proc.pid}, {proc.args!r}) "
                                       f"exited with status {code}; its output says why")

    # -- measurement
    def sample(self) -> Sample:
        """Cumulative engine time per group now (simulated GPU only: the real
        driver keeps no per-process busy counter; use `window_shares`)."""
        if self.gpu != "sim":
            raise RuntimeError("sample() needs the simulated GPU; on a real GPU use window_shares()")
        import gslice.simgpu as simgpu
        self.check_workloads()
        now = time.monotonic()
        with simgpu.SimGpu(self.sim_name) as sim:
            by_label = sim.busy_ns_by_label()
        return Sample(now, {name: by_label.get(name, 0) for name in self.groups})

    def window_shares(self) -> dict[str, float]:
        """Each group's charged token time over tokend's sliding window."""
        return {g.group.name: g.share for g in self._admin.status().groups}
