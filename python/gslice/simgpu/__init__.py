"""The simulated GPU: environment for processes that should run on it, and a
read-only view of its shared state.

The stand-in ``libcuda.so.1`` / ``libnvidia-ml.so.1`` (built from simgpu/ by
``tools/build_native.py simgpu``) live next to this file. Every process
started with :func:`env` shares one simulated device, a POSIX shared-memory
segment ``/dev/shm/gslice-sim-<name>``, whose layout is defined in
simgpu/sim_shared.h and mirrored here.

    environ = simgpu.env("test-123", memory="4GiB", label="team-a")
    subprocess.run([...], env=environ)
    gpu = simgpu.SimGpu("test-123")
    gpu.busy_ns_by_label()   # {"team-a": 812345678}
    gpu.handoffs()           # [Handoff(from_pid=..., to_pid=..., gap_ns=..., at_ns=..., number=0), ...]
    gpu.unlink()
"""
from __future__ import annotations

import ctypes
import mmap
import os
import re
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

__all__ = ["DEFAULT_NAME", "HANDOFF_RING", "LAYOUT_VERSION", "EngineModel", "Handoff", "SimGpu", "SimGpuNotBuilt", "SimProcess", "env",
           "lib_dir", "shm_path", "unlink"]

DEFAULT_NAME = "default"
LAYOUT_VERSION = 4
HANDOFF_RING = 4096  # handoff records the segment keeps (SIM_HANDOFF_RING)
_MAGIC = 0x4753494D47505531
_MAX_PROCESSES = 256
_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,200}$")
_LIB_DIR = Path(__file__).resolve().parent

SLOT_FREE, SLOT_LIVE, SLOT_EXITED, SLOT_TEARDOWN = 0, 1, 2, 3  # enum sim_slot_state


class SimGpuNotBuilt(RuntimeError):
    """The stand-in driver libraries have not been compiled."""


def lib_dir() -> Path:
    """Directory holding the simulated libcuda.so.1 and libnvidia-ml.so.1."""
    missing = [n for n in ("libcuda.so.1", "libnvidia-ml.so.1") if not (_LIB_DIR / n).exists()]
    if missing:
        raise SimGpuNotBuilt(
            f"simulated GPU libraries {', '.join(missing)} are missing from {_LIB_DIR}; "
            "run tools/build_native.py simgpu")
    return _LIB_DIR


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ValueError(f"simulated GPU name {name!r} is not usable; expected 1-200 letters, digits, '-', '_' or '.'")
    return name


def shm_path(name: str = DEFAULT_NAME) -> Path:
    """Where the segment of simulator `name` lives."""
    return Path("/dev/shm") / f"gslice-sim-{_check_name(name)}"


def env(name: str = DEFAULT_NAME, memory: int | str | None = None, kernel_us: float | None = None,
        label: str | None = None, base: Mapping[str, str] | None = None,
        context_memory: int | str | None = 0, teardown_ms: float | None = None, timeslice_us: int | None = None,
        switch_us: int | None = None, preempt: bool | None = None) -> dict[str, str]:
    """Environment for a process that should run on simulated GPU `name`.

    memory: device memory (bytes or "16GiB"); only the process that creates
    the segment (the first to use it) applies it, so give every process the
    same value. kernel_us: duration of kernels other than gslice_sim_sleep.
    label: how this process is named in the per-process accounting.
    context_memory: device memory each context costs beyond its allocations
    (GSLICE_SIM_CONTEXT_MEMORY). The library's own default is 256 MiB; this
    helper passes 0 unless told otherwise, so tests that count exact bytes
    stay exact; None leaves the library default.
    teardown_ms: how long a gone process's memory stays used, NVML still
    listing it (GSLICE_SIM_TEARDOWN_MS; the library's default is 130, as
    measured on an H100); like memory, only the segment's creator applies it.
    timeslice_us, switch_us, preempt: how contexts share the engine
    (GSLICE_SIM_TIMESLICE_US, GSLICE_SIM_CTX_SWITCH_US, GSLICE_SIM_PREEMPT;
    applied by the process that creates the segment; None: the library's
    calibrated defaults).
    """
    result = dict(os.environ if base is None else base)
    libs = str(lib_dir())
    previous = result.get("LD_LIBRARY_PATH", "")
    result["LD_LIBRARY_PATH"] = libs + (os.pathsep + previous if previous else "")
    result["GSLICE_SIM_NAME"] = _check_name(name)
    if memory is not None:
        if isinstance(memory, bool) or not isinstance(memory, (int, str)) or (isinstance(memory, int) and memory <= 0):
            raise ValueError(f"simulated GPU memory {memory!r} is not a size; expected bytes > 0 or e.g. '16GiB'")
        result["GSLICE_SIM_MEMORY"] = str(memory)
    if kernel_us is not None:
        if not kernel_us >= 0:
            raise ValueError(f"kernel_us {kernel_us!r} must be a duration in microseconds >= 0")
        result["GSLICE_SIM_KERNEL_US"] = repr(float(kernel_us))
    if label is not None:
        result["GSLICE_SIM_LABEL"] = label
    if teardown_ms is not None:
        if isinstance(teardown_ms, bool) or not isinstance(teardown_ms, (int, float)) or not teardown_ms >= 0:
            raise ValueError(f"teardown_ms {teardown_ms!r} must be a duration in milliseconds >= 0")
        result["GSLICE_SIM_TEARDOWN_MS"] = repr(float(teardown_ms))
    if context_memory is not None:
        if isinstance(context_memory, bool) or not isinstance(context_memory, (int, str)) or (
                isinstance(context_memory, int) and context_memory < 0):
            raise ValueError(f"context_memory {context_memory!r} is not a size; expected bytes >= 0 or e.g. '256MiB'")
        result["GSLICE_SIM_CONTEXT_MEMORY"] = str(context_memory)
    for variable, value in (("GSLICE_SIM_TIMESLICE_US", timeslice_us), ("GSLICE_SIM_CTX_SWITCH_US", switch_us)):
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{variable} {value!r} must be whole microseconds >= 0")
            result[variable] = str(value)
    if preempt is not None:
        result["GSLICE_SIM_PREEMPT"] = "1" if preempt else "0"
    return result


# ---- mirror of simgpu/sim_shared.h ----------------------------------------

class _Slot(ctypes.Structure):
    _fields_ = [
        ("state", ctypes.c_uint32),
        ("pid", ctypes.c_int32),
        ("start_ticks", ctypes.c_uint64),
        ("label", ctypes.c_char * 64),
        ("busy_ns", ctypes.c_uint64),
        ("kernels_launched", ctypes.c_uint64),
        ("kernels_completed", ctypes.c_uint64),
        ("memory_used", ctypes.c_uint64),
        ("memory_peak", ctypes.c_uint64),
        ("first_activity_ns", ctypes.c_uint64),
        ("last_activity_ns", ctypes.c_uint64),
        ("attached_ns", ctypes.c_uint64),
        ("exited_ns", ctypes.c_uint64),
        ("engine_waiting", ctypes.c_uint32),
        ("out_of_memory", ctypes.c_uint32),
        # layout version 3
        ("queued_work", ctypes.c_uint64),
        ("waiting_since_ns", ctypes.c_uint64),
        ("slices", ctypes.c_uint64),
        ("preempted", ctypes.c_uint64),
    ]


class _Bucket(ctypes.Structure):
    _fields_ = [("epoch", ctypes.c_uint64), ("busy_ns", ctypes.c_uint64)]


class _Handoff(ctypes.Structure):
    _fields_ = [("from_pid", ctypes.c_int32), ("to_pid", ctypes.c_int32),
                ("from_end_ns", ctypes.c_uint64), ("to_start_ns", ctypes.c_uint64)]


class _Device(ctypes.Structure):
    _fields_ = [
        ("magic", ctypes.c_uint64),
        ("layout_version", ctypes.c_uint32),
        ("initialised", ctypes.c_uint32),
        ("slot_count", ctypes.c_uint32),
        ("sm_count", ctypes.c_uint32),
        ("total_memory", ctypes.c_uint64),
        ("created_ns", ctypes.c_uint64),
        ("name", ctypes.c_char * 96),
        ("uuid", ctypes.c_char * 96),
        ("uuid_bytes", ctypes.c_ubyte * 16),
        ("memory_used", ctypes.c_uint64),
        ("busy_ns", ctypes.c_uint64),
        ("kernels", ctypes.c_uint64),
        ("engine_holder_pid", ctypes.c_int32),
        ("engine_waiters", ctypes.c_uint32),
        ("engine_acquisitions", ctypes.c_uint64),
        ("engine_busy_since_ns", ctypes.c_uint64),
        ("engine_courtesy_waiters", ctypes.c_uint32),
        ("reserved32", ctypes.c_uint32),
        ("teardown_ns", ctypes.c_uint64),
        # layout version 3: contexts on the engine
        ("ctx_owner", ctypes.c_uint32),
        ("sched_seq", ctypes.c_uint32),
        ("ctx_slice_end_ns", ctypes.c_uint64),
        ("ctx_ready_ns", ctypes.c_uint64),
        ("ctx_switches", ctypes.c_uint64),
        ("ctx_preemptions", ctypes.c_uint64),
        ("ctx_timeslice_ns", ctypes.c_uint32),
        ("ctx_switch_ns", ctypes.c_uint32),
        ("ctx_preempt", ctypes.c_uint32),
        ("ctx_owner_drained", ctypes.c_uint32),
        ("timeline", _Bucket * 32),
        ("engine", ctypes.c_ubyte * 64),
        ("registry", ctypes.c_ubyte * 64),
        ("slots", _Slot * _MAX_PROCESSES),
        # layout version 2
        ("engine_last_pid", ctypes.c_int32),
        ("reserved_v2", ctypes.c_uint32),
        ("engine_last_end_ns", ctypes.c_uint64),
        ("handoff_count", ctypes.c_uint64),
        ("handoffs", _Handoff * HANDOFF_RING),
    ]


# The C side asserts the same numbers (sim_shared.h _Static_asserts).
assert ctypes.sizeof(_Slot) == 192
assert _Device.timeline.offset == 368 and _Device.engine.offset == 880 and _Device.slots.offset == 1008
assert ctypes.sizeof(_Handoff) == 24
assert _Device.engine_last_pid.offset == 50160 and _Device.handoff_count.offset == 50176
assert _Device.handoffs.offset == 50184
assert ctypes.sizeof(_Device) == 148488
_COUNT = struct.Struct("<Q")
_RING_BYTES = ctypes.sizeof(_Handoff) * HANDOFF_RING


@dataclass(frozen=True)
class SimProcess:
    """One process that used the simulated GPU (a snapshot)."""
    pid: int
    label: str
    alive: bool               # slot live and the pid still exists
    busy_ns: int              # engine time its kernels held
    kernels_launched: int
    kernels_completed: int
    memory_used: int          # bytes held now (kept while its context is torn down, 0 once exited)
    memory_peak: int
    first_activity_ns: int    # CLOCK_MONOTONIC (time.monotonic_ns()), 0 if it ran no kernel
    last_activity_ns: int
    attached_ns: int
    exited_ns: int            # when it was seen gone (its teardown began), 0 while alive
    tearing_down: bool = False  # gone, its memory still used and NVML still listing it
    out_of_memory: int = 0    # its allocations the device refused for want of free memory
    slices: int = 0           # times the engine switched to its context
    preempted: int = 0        # its kernels stopped at a slice end (and resumed later)


@dataclass(frozen=True)
class EngineModel:
    """How the simulated GPU shares its engine between contexts (set by the
    process that created it: GSLICE_SIM_TIMESLICE_US, _CTX_SWITCH_US, _PREEMPT)."""
    timeslice_ns: int   # 0: a context keeps the engine until its queue drains
    switch_ns: int      # engine time a switch to another context costs
    preempt: bool       # a kernel running at its slice's end is stopped there


@dataclass(frozen=True)
class Handoff:
    """The engine went from work of process from_pid to work of another
    process to_pid (kernels and device-side copies/fills alike)."""
    from_pid: int
    to_pid: int
    gap_ns: int   # GPU idle between the two: to_pid's start minus from_pid's end
    at_ns: int    # CLOCK_MONOTONIC (time.monotonic_ns()) when to_pid's work started
    number: int   # its place in the device's count of handoffs (0 = the first ever)


def _pid_exists(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
        return state not in (b"Z", b"X")
    except (OSError, IndexError):
        return False


class SimGpu:
    """Read-only view of simulated GPU `name` (the segment must exist)."""

    def __init__(self, name: str = DEFAULT_NAME):
        self.name = _check_name(name)
        self.path = shm_path(name)
        self._map: mmap.mmap | None = None
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            raise FileNotFoundError(
                f"simulated GPU {name!r} does not exist ({self.path} is missing): no process has used it yet") from None
        try:
            size = os.fstat(fd).st_size
            if size != ctypes.sizeof(_Device):
                raise RuntimeError(f"{self.path} is {size} bytes, expected {ctypes.sizeof(_Device)}: "
                                   "made by a different simgpu layout; remove it")
            self._map = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
        finally:
            os.close(fd)
        view = self._snapshot()
        if view.magic != _MAGIC or view.layout_version != LAYOUT_VERSION:
            self.close()
            raise RuntimeError(f"{self.path} has layout version {view.layout_version}, this reader understands "
                               f"{LAYOUT_VERSION}; remove it or rebuild")

    def _snapshot(self) -> _Device:
        """A copy of the whole segment (145 KB): one consistent-enough read
        without handing ctypes a pointer into a read-only mapping."""
        if self._map is None:
            raise ValueError(f"simulated GPU view {self.name!r} is closed")
        return _Device.from_buffer_copy(self._map)

    # -- device -------------------------------------------------------------
    @property
    def total_memory(self) -> int:
        return self._snapshot().total_memory

    @property
    def uuid(self) -> str:
        return self._snapshot().uuid.decode()

    @property
    def device_name(self) -> str:
        return self._snapshot().name.decode()

    def memory_used(self) -> int:
        """Bytes counted as used (a dead process's memory is subtracted once
        a simulator process or NVML query has noticed it and its teardown
        time has passed)."""
        return self._snapshot().memory_used

    @property
    def teardown_ns(self) -> int:
        """How long a gone process's memory stays used (GSLICE_SIM_TEARDOWN_MS)."""
        return self._snapshot().teardown_ns

    def total_busy_ns(self) -> int:
        return self._snapshot().busy_ns

    def kernels_completed(self) -> int:
        return self._snapshot().kernels

    def engine_holder_pid(self) -> int:
        return self._snapshot().engine_holder_pid

    def engine_model(self) -> EngineModel:
        view = self._snapshot()
        return EngineModel(view.ctx_timeslice_ns, view.ctx_switch_ns, bool(view.ctx_preempt))

    def context_switches(self) -> int:
        """Switches of the engine from one context to another."""
        return self._snapshot().ctx_switches

    def preemptions(self) -> int:
        """Kernels stopped at a slice end so that another context could run."""
        return self._snapshot().ctx_preemptions

    # -- handoffs -----------------------------------------------------------
    def handoff_count(self) -> int:
        """Handoffs between processes since the device was created (never
        decreases; read on its own, without copying the segment)."""
        if self._map is None:
            raise ValueError(f"simulated GPU view {self.name!r} is closed")
        return _COUNT.unpack_from(self._map, _Device.handoff_count.offset)[0]

    def handoffs(self, since_count: int = 0) -> list[Handoff]:
        """Handoffs numbered since_count and later, oldest first.

        The device keeps only the last HANDOFF_RING (4096) records; older
        ones are overwritten, and the oldest kept one may be being
        overwritten as this reads, so at most HANDOFF_RING - 1 come back:
        the list starts later than since_count when more happened since
        (compare its first `number`, or handoff_count(), with since_count).
        Records written while this reads are left out; they come with the
        next call."""
        if since_count < 0:
            raise ValueError(f"since_count {since_count} must be a handoff count >= 0")
        before = self.handoff_count()
        ring = (_Handoff * HANDOFF_RING).from_buffer_copy(self._map, _Device.handoffs.offset)
        after = self.handoff_count()
        # Record n sits in ring[n % HANDOFF_RING]. Those below `before` were
        # complete when the copy began; a writer busy during the copy may
        # have been overwriting the records up to after - HANDOFF_RING.
        first = max(since_count, after - HANDOFF_RING + 1, 0)
        result = []
        for number in range(first, before):
            r = ring[number % HANDOFF_RING]
            result.append(Handoff(from_pid=r.from_pid, to_pid=r.to_pid, gap_ns=r.to_start_ns - r.from_end_ns,
                                  at_ns=r.to_start_ns, number=number))
        return result

    # -- processes ----------------------------------------------------------
    def processes(self, include_exited: bool = True) -> list[SimProcess]:
        result = []
        for slot in self._snapshot().slots:
            state = slot.state
            if state == SLOT_FREE or (state == SLOT_EXITED and not include_exited):
                continue
            result.append(SimProcess(
                pid=slot.pid, label=slot.label.decode(errors="replace"),
                alive=state == SLOT_LIVE and _pid_exists(slot.pid),
                busy_ns=slot.busy_ns, kernels_launched=slot.kernels_launched,
                kernels_completed=slot.kernels_completed, memory_used=slot.memory_used,
                memory_peak=slot.memory_peak, first_activity_ns=slot.first_activity_ns,
                last_activity_ns=slot.last_activity_ns, attached_ns=slot.attached_ns, exited_ns=slot.exited_ns,
                tearing_down=state == SLOT_TEARDOWN, out_of_memory=slot.out_of_memory,
                slices=slot.slices, preempted=slot.preempted))
        return result

    def process(self, pid: int) -> SimProcess:
        matches = [p for p in self.processes() if p.pid == pid]
        if not matches:
            raise KeyError(f"pid {pid} never used simulated GPU {self.name!r}")
        return max(matches, key=lambda p: p.attached_ns)

    def busy_ns_by_label(self) -> dict[str, int]:
        """Engine time per label, the kernel running now included up to now
        (a process's busy_ns grows only when a kernel ends: without this, a
        sample taken during a 1 s kernel would miss up to a second of it)."""
        device = self._snapshot()
        totals: dict[str, int] = {}
        for slot in device.slots:
            if slot.state == SLOT_FREE:
                continue
            label = slot.label.decode(errors="replace")
            totals[label] = totals.get(label, 0) + slot.busy_ns
        since, pid = device.engine_busy_since_ns, device.engine_holder_pid
        if since and pid:
            holders = [slot for slot in device.slots if slot.state == SLOT_LIVE and slot.pid == pid]
            if holders:
                label = max(holders, key=lambda slot: slot.attached_ns).label.decode(errors="replace")
                totals[label] = totals.get(label, 0) + max(0, time.monotonic_ns() - since)
        return totals

    def shares_by_label(self) -> dict[str, float]:
        """Each label's fraction of all recorded engine time."""
        totals = self.busy_ns_by_label()
        whole = sum(totals.values())
        return {label: (busy / whole if whole else 0.0) for label, busy in totals.items()}

    # -- lifetime -----------------------------------------------------------
    def close(self) -> None:
        if getattr(self, "_map", None) is not None:
            self._map.close()
            self._map = None

    def unlink(self) -> None:
        """Remove the segment; processes still attached keep their mapping."""
        self.close()
        unlink(self.name)

    def __enter__(self) -> "SimGpu":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def unlink(name: str = DEFAULT_NAME) -> bool:
    """Remove simulated GPU `name`'s segment; False if it did not exist."""
    try:
        os.unlink(shm_path(name))
        return True
    except FileNotFoundError:
        return False
