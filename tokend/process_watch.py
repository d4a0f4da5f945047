"""Makes bypass visible: compares the processes NVML sees on the GPU with the
attached clients.

gslice's enforcement is cooperative (the shim runs inside the tenant's
process), so a process can escape it: no LD_PRELOAD, GSLICE_DISABLE, no
group set, a statically linked driver call. It cannot hide from the
driver, though: NVML lists every process with a context on the GPU. Every
process that uses the GPU without being attached, or uses more device
memory than its group's quota, is reported (status, the
gslice_unmanaged_processes metric, a bypass_detected event) and, under the
operator's policy, killed.

`find_bypass` is the sans-I/O rule; `list_gpu_processes` the NVML query
(run on a worker thread: NVML calls can block). Pids are compared as NVML
reports them, i.e. in tokend's pid namespace: run tokend where it sees the
tenants' pids (systemd on the host; hostPID in Kubernetes)."""
from __future__ import annotations

import os
import signal
import threading
from dataclasses import dataclass

POLICIES = ("none", "warn", "kill")


@dataclass(frozen=True)
class GpuProcessUse:
    pid: int
    used_memory: int  # bytes; NVML reports 0 or N/A when it cannot tell


@dataclass(frozen=True)
class Bypass:
    pid: int
    used_memory: int
    group: str      # "" when not attached
    problem: str    # "not attached" | "over quota"


def find_bypass(processes: list[GpuProcessUse], attached: dict[int, str], quotas: dict[str, int],
                exempt: frozenset[int] = frozenset()) -> list[Bypass]:
    """Processes on the GPU that escape gslice. `attached`: pid -> group of
    every attached client; `quotas`: group -> memory quota in bytes.

    Memory is judged per group, from what NVML measures, not from what the
    processes declared: a process that re-attached declaring less than it
    holds (0 after a daemon restart) still counts with all it uses."""
    found = []
    group_use: dict[str, int] = {}
    for process in processes:
        group = attached.get(process.pid)
        if group is not None:
            group_use[group] = group_use.get(group, 0) + process.used_memory
    for process in processes:
        if process.pid in exempt:
            continue
        group = attached.get(process.pid)
        if group is None:
            found.append(Bypass(process.pid, process.used_memory, "", "not attached"))
        elif group_use[group] > quotas.get(group, group_use[group]):
            found.append(Bypass(process.pid, process.used_memory, group, "over quota"))
    return found


_nvml_lock = threading.Lock()
_nvml_handles: dict[str, object] = {}  # GPU UUID -> NVML handle, while NVML stays initialised


def list_gpu_processes(gpu_uuid: str) -> list[GpuProcessUse]:
    """Compute processes on the GPU `gpu_uuid`, through NVML (pynvml).

    NVML stays initialised between calls: while departed processes' memory
    awaits the driver this runs every 10 ms, and an init/shutdown pair per
    call would cost more than the query. After a failure NVML is shut down
    and initialised afresh by the next call."""
    import pynvml
    with _nvml_lock:
        handle = _nvml_handles.get(gpu_uuid)
        if handle is None:
            pynvml.nvmlInit()
            try:
                handle = pynvml.nvmlDeviceGetHandleByUUID(gpu_uuid.encode())
            except pynvml.NVMLError:
                pynvml.nvmlShutdown()
                raise
            _nvml_handles[gpu_uuid] = handle
    try:
        infos = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
    except pynvml.NVMLError:
        with _nvml_lock:
            if _nvml_handles.pop(gpu_uuid, None) is not None:
                pynvml.nvmlShutdown()
        raise
    return [GpuProcessUse(int(info.pid), int(info.usedGpuMemory or 0)) for info in infos]


def kill(pid: int) -> str:
    """SIGKILL `pid`; returns the action taken, for status and events."""
    try:
        os.kill(pid, signal.SIGKILL)
        return "killed"
    except ProcessLookupError:
        return "gone"
    except PermissionError:
        return "kill refused (permission)"
