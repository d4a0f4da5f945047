"""A long-lived workload process driven by JSON commands on stdin, for the
real-GPU check (benchmarks/gpu) and the GPU tests.

One process per side (bare, or under the shim in a group) is started once,
warmed up, and then told what to run, so interleaved bare/shim pairs cost no
process start each and token counts can be taken around the checked work
alone (the attach, and any lease at start, happen before "ready").

    python -m gslice.workloads_served --backend torch|driver

prints {"ready": true, ...} once set up, then answers each command line
({"op": ..., ...}) with one JSON line ({"ok": true, ...} or {"ok": false,
"error": ...}). Ops: throughput, launch, bursts, neighbour_start /
neighbour_stop, alloc / free, capture / replay, exit.

Backends give the same named units of work:
- torch (gslice.workloads_torch): PyTorch matmuls (FIELD-NOTES section 10);
- driver: the spin kernel of gslice.workloads through the driver API, each
  unit as long as the matmul it stands for on an H100. It runs on the
  simulated GPU, so the check's short form exercises this same loop.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import select
import subprocess
import sys
import random
import threading
import time
import traceback
from pathlib import Path

# What each unit of work stands for, and how long it runs on an H100 (us):
# the driver backend spins this long; the torch backend runs the matmul.
UNIT_US = {
    "mm4096h": 220.0,      # 4096x4096 fp16 matmul
    "mm8192h": 1800.0,     # 8192x8192 fp16 matmul
    "mm16384bf": 12500.0,  # 16384x16384 bf16 matmul
    "add": 0.0,            # x.add_ on 1024 floats: launch-bound
}
CUDA_ERROR_NOT_READY = 600  # cuEventQuery: not reached yet


def percentiles(values: list[float], qs=(0.1, 0.5, 0.9, 0.99)) -> dict:
    """Nearest-rank percentiles of `values` (empty dict when none)."""
    if not values:
        return {}
    ordered = sorted(values)
    out = {f"p{int(q * 100)}": ordered[min(len(ordered) - 1, int(q * len(ordered)))] for q in qs}
    out.update(n=len(ordered), max=ordered[-1], mean=sum(ordered) / len(ordered))
    return out


class DriverBackend:
    """Units of work as spin kernels through the CUDA driver API (ctypes):
    the simulated GPU's workload, and a real GPU's without PyTorch."""

    name = "driver"

    def __init__(self, fill_per_unit: bool = False):
        from .workloads import Driver
        self.drv = Driver()
        # PyTorch's matmul launches a 4-byte fill, then the GEMM, on its
        # stream (benchmarks/results/gpu/launch_pattern_20261127T1413Z_h200.json):
        # fill_per_unit gives the simulated GPU that pattern, so a gate that
        # judges a GEMM by the launch before it is seen here too.
        self.fill_target = None
        if fill_per_unit:
            self.name = "driver_fills"
            target = ctypes.c_uint64()
            self.drv._check("cuMemAlloc_v2", self.drv.mem_alloc(ctypes.byref(target), 4))
            self.fill_target = target.value
            self.lib_fill = self.drv.lib.cuMemsetD32Async
            self.lib_fill.argtypes = [ctypes.c_uint64, ctypes.c_uint, ctypes.c_size_t, ctypes.c_void_p]
        # One kernel per unit, as on a real GPU (an add and a matmul are
        # different functions): the shim keeps a length estimate per function,
        # and one shared by a 0 us add and a 12.5 ms unit is neither.
        self.functions: dict[str, ctypes.c_void_p] = {}
        self.stream = self.drv.stream()
        self._params = {}
        self.lib = self.drv.lib
        self.held: list[int] = []
        self.graph = None
        self.launch_unit("mm4096h")
        self.sync()

    def _unit_params(self, unit: str):
        if unit not in self._params:
            ns = ctypes.c_uint64(int(UNIT_US[unit] * 1000))
            self._params[unit] = (ns, (ctypes.c_void_p * 1)(ctypes.cast(ctypes.byref(ns), ctypes.c_void_p)))
        return self._params[unit][1]

    def _function(self, unit: str) -> ctypes.c_void_p:
        if unit not in self.functions:
            self.functions[unit] = self.drv.spin_kernel()
        return self.functions[unit]

    def launch_unit(self, unit: str) -> None:
        if self.fill_target is not None:
            self.drv._check("cuMemsetD32Async", self.lib_fill(self.fill_target, 0, 1, self.stream))
        self.drv._check("cuLaunchKernel", self.drv.launch(self._function(unit), 1, 1, 1, 1, 1, 1, 0, self.stream,
                                                          self._unit_params(unit), None))

    def sync(self) -> None:
        self.drv.synchronize(self.stream)

    def bind_thread(self) -> None:
        """Make the context current in a thread of the caller's (the driver API's current context is per thread)."""
        self.drv._check("cuCtxSetCurrent", self.lib.cuCtxSetCurrent(self.drv.ctx))

    # Events: kernel durations measured on the GPU.
    def event(self):
        ev = ctypes.c_void_p()
        self.drv._check("cuEventCreate", self.lib.cuEventCreate(ctypes.byref(ev), 0))
        return ev

    def record(self, ev) -> None:
        self.drv._check("cuEventRecord", self.lib.cuEventRecord(ev, self.stream))

    def elapsed_ms(self, start, end) -> float:
        ms = ctypes.c_float()
        self.drv._check("cuEventElapsedTime", self.lib.cuEventElapsedTime(ctypes.byref(ms), start, end))
        return ms.value

    def done(self, ev) -> bool:
        """Has the GPU reached the event?"""
        rc = self.lib.cuEventQuery(ev)
        if rc == CUDA_ERROR_NOT_READY:
            return False
        self.drv._check("cuEventQuery", rc)
        return True

    def allocate(self, nbytes: int) -> bool:
        """One allocation; False when the driver (or the shim) says out of memory."""
        from .workloads import CUDA_ERROR_OUT_OF_MEMORY
        ptr = ctypes.c_uint64()
        code = self.drv.mem_alloc(ctypes.byref(ptr), nbytes)
        if code == CUDA_ERROR_OUT_OF_MEMORY:
            return False
        self.drv._check("cuMemAlloc_v2", code)
        self.held.append(ptr.value)
        return True

    def free_all(self) -> None:
        for ptr in self.held:
            self.drv._check("cuMemFree_v2", self.drv.mem_free(ptr))
        self.held.clear()

    def mem_get_info(self) -> tuple[int, int]:
        return self.drv.mem_get_info()

    def memory_reserved(self) -> int:
        return 0

    def capture(self, mode: str, kernels: int, sleep_every: int) -> dict:
        modes = {"global": 0, "thread_local": 1, "relaxed": 2}
        stream = self.drv.stream()
        self.drv._check("cuStreamBeginCapture_v2", self.lib.cuStreamBeginCapture_v2(stream, modes[mode]))
        try:
            for i in range(kernels):
                self.drv._check("cuLaunchKernel", self.drv.launch(self._function("mm4096h"), 1, 1, 1, 1, 1, 1, 0, stream,
                                                                  self._unit_params("mm4096h"), None))
                if sleep_every and i % sleep_every == sleep_every - 1:
                    time.sleep(0.01)  # the capture spans several of the shim's slices
        finally:
            graph = ctypes.c_void_p()
            end_rc = self.lib.cuStreamEndCapture(stream, ctypes.byref(graph))
        self.drv._check("cuStreamEndCapture", end_rc)
        graph_exec = ctypes.c_void_p()
        self.drv._check("cuGraphInstantiateWithFlags",
                        self.lib.cuGraphInstantiateWithFlags(ctypes.byref(graph_exec), graph, ctypes.c_ulonglong(0)))
        self.lib.cuGraphLaunch.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        self.graph = graph_exec
        return {"nodes": kernels}

    def launch_on_own_stream_until(self, stop, unit: str) -> int:
        """In a thread of the caller's: launch `unit` on a stream of this
        thread's own, never synchronising, until `stop` is set; then wait for
        that stream alone. How many were launched."""
        self.bind_thread()
        stream = self.drv.stream()
        n = 0
        while not stop.is_set():
            self.drv._check("cuLaunchKernel", self.drv.launch(self._function(unit), 1, 1, 1, 1, 1, 1, 0, stream,
                                                              self._unit_params(unit), None))
            n += 1
        self.drv.synchronize(stream)
        return n

    def replay(self, count: int) -> dict:
        for _ in range(count):
            self.drv._check("cuGraphLaunch", self.lib.cuGraphLaunch(self.graph, self.stream))
        self.sync()
        return {"finite": True}


class WorkerError(RuntimeError):
    """A served workload process failed, answered with an error, or went quiet."""


def read_json_line(proc: subprocess.Popen, timeout: float, what: str, stderr_tail=lambda: "") -> dict:
    """The next JSON line `proc` prints (stdout piped, text), within `timeout`
    seconds; WorkerError (with `stderr_tail()`) when it exits, closes its
    output or stays quiet."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise WorkerError(f"{what}: no JSON line within {timeout:.0f} s; stderr: {stderr_tail()}")
        ready, _, _ = select.select([proc.stdout], [], [], min(left, 0.5))
        if not ready:
            if proc.poll() is not None:
                raise WorkerError(f"{what}: exited with {proc.returncode}; stderr: {stderr_tail()}")
            continue
        line = proc.stdout.readline()
        if not line:
            raise WorkerError(f"{what}: closed its output (exit {proc.wait()}); stderr: {stderr_tail()}")
        if line.startswith("{"):
            return json.loads(line)


class ServedWorker:
    """The caller's side: one `python -m gslice.workloads_served` process in
    `group` of a gslice.experiment.SharingExperiment (shim=False: bare, same
    GPU), its stderr in `log_dir`/worker-`label`.log; every read has a timeout."""

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
        return read_json_line(self.proc, timeout, f"{self.label}: {what}", self.stderr_tail)

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


def wait_all_ready(workers: list[ServedWorker], timeout: float) -> list[ServedWorker]:
    """Wait until every worker (started together, so their imports overlap) is set up."""
    deadline = time.monotonic() + timeout
    for w in workers:
        w.wait_ready(max(1.0, deadline - time.monotonic()))
    return workers


SHIM_STATS_FIELDS = ("tokens_acquired", "tokens_released", "idle_releases", "revokes", "checkpoints",
                     "checkpoint_waits", "slow_entries", "used_us", "overrun_us", "daemon_losses", "doorbell_pauses",
                     "doorbell_unanswered", "doorbell_rings", "anticipation_pauses", "anticipation_lapses",
                     "lease_resumes", "leases_at_start", "memory_held", "memory_pending_release",
                     "tracked_allocations", "reservations", "refusals", "release_flushes", "bytes_released",
                     "head_starts", "head_start_refusals", "paced_launches", "handbacks_sent",
                     "handback_starts", "handback_lapses", "burst_ends", "renewals", "wrap_ups", "launch_gpu_us",
                     "longest_work_us", "submit_lag_margin_us")


class _ShimStats(ctypes.Structure):
    # hook/shim_api.h's gslice_shim_stats; room at the end for fields a newer shim adds.
    _fields_ = ([("metered", ctypes.c_int), ("slots", ctypes.c_int), ("gate_state", ctypes.c_int),
                 ("checkpoint_interval", ctypes.c_int32), ("quantum_us", ctypes.c_uint32)]
                + [(name, ctypes.c_uint64) for name in SHIM_STATS_FIELDS] + [("_room", ctypes.c_uint64 * 64)])


def shim_stats() -> dict:
    """The preloaded shim's own counters (gslice_shim_stats_get), or why there are none."""
    try:
        get = ctypes.CDLL(None).gslice_shim_stats_get
    except AttributeError:
        return {"available": False, "why": "no gslice_shim_stats_get in this process (not under the shim)"}
    stats = _ShimStats()
    if get(ctypes.byref(stats)) != 0:
        return {"available": False, "why": "gslice_shim_stats_get answered -1 (not attached yet)"}
    names = ["metered", "slots", "gate_state", "checkpoint_interval", "quantum_us", *SHIM_STATS_FIELDS]
    return {"available": True, **{name: getattr(stats, name) for name in names}}


class _UnitMarks:
    """A neighbour loop's units on the host's clock: [launch call, end on
    the GPU] each, from an event recorded after every unit (reused once
    read)."""

    PENDING_MAX = 2048   # more unread than that (never synced, no gate): wait for them

    def __init__(self, server: "Server", backend):
        self.server, self.b = server, backend
        self.units: list[list[float]] = []
        self.pending: list = []
        self.spare: list = []
        self.base = None
        self.base_at = 0.0

    def start(self) -> None:
        self.base, self.base_at = self.server.gpu_clock()

    def launched(self, at: float) -> None:
        ev = self.spare.pop() if self.spare else self.b.event()
        self.b.record(ev)
        self.pending.append((at, ev))
        if len(self.pending) > self.PENDING_MAX:
            self.b.sync()
            self.harvest()

    def harvest(self) -> None:
        """Read the events the GPU has reached, oldest first."""
        read = 0
        for at, ev in self.pending:
            if not self.b.done(ev):
                break
            end = self.base_at + self.b.elapsed_ms(self.base, ev) / 1e3
            self.units.append([round(at, 6), round(end, 6)])
            self.spare.append(ev)
            read += 1
        del self.pending[:read]


def make_backend(name: str):
    if name == "torch":
        from .workloads_torch import TorchBackend
        return TorchBackend()
    if name == "driver":
        return DriverBackend()
    if name == "driver_fills":
        return DriverBackend(fill_per_unit=True)
    raise ValueError(f"backend {name!r} is not one of 'torch', 'driver', 'driver_fills'")


class Server:
    """The command loop's operations over one backend."""

    def __init__(self, backend):
        self.b = backend
        self.neighbour: threading.Thread | None = None
        self.neighbour_stop = threading.Event()
        self.neighbour_report: dict = {}

    def throughput(self, unit: str, seconds: float, sync_every: int = 4, probe_every: int = 0,
                   start_at: float | None = None, stall_every: int = 0, stall_ms: float = 0.0) -> dict:
        """Units back to back for `seconds`, synchronising every `sync_every`.
        With `stall_every`, the launching thread sleeps `stall_ms` after
        every `stall_every`-th unit (a collection, a data loader: a GPU with
        enough queued rides it out). Every `probe_every`-th iteration is timed on the GPU: a tiny launch
        first opens the gate (so a wait for a token falls before the start
        event), then start event, the unit, end event. Iterations are
        counted per 1 s bucket (by sync completion) for per-second fractions."""
        b = self.b
        events = []
        self.warm(unit)
        if start_at:
            time.sleep(max(0.0, start_at - time.time()))
        per_second: list[int] = []
        done = 0
        start = time.monotonic()
        deadline = start + seconds
        pending = 0
        i = 0
        while True:
            now = time.monotonic()
            if now >= deadline:
                break
            if probe_every and i % probe_every == 0:
                b.launch_unit("add")
                ev0, ev1 = b.event(), b.event()
                b.record(ev0)
                b.launch_unit(unit)
                b.record(ev1)
                events.append((ev0, ev1))
            else:
                b.launch_unit(unit)
            i += 1
            pending += 1
            if stall_every and i % stall_every == 0:
                time.sleep(stall_ms / 1e3)
            if pending >= max(1, sync_every):
                b.sync()
                done += pending
                pending = 0
                bucket = int(time.monotonic() - start)
                while len(per_second) <= bucket:
                    per_second.append(0)
                per_second[bucket] += max(1, sync_every)
        b.sync()
        done += pending
        elapsed = time.monotonic() - start
        kernel_ms = [b.elapsed_ms(e0, e1) for e0, e1 in events]
        # The last bucket is partial: report only whole seconds.
        whole = per_second[:int(elapsed)]
        return {"iterations": done, "seconds": elapsed, "per_second": whole, "kernel_ms": percentiles(kernel_ms),
                "unit": unit, "sync_every": sync_every, "first_at": start}

    def gpu_clock(self):
        """An event the GPU has reached and time.monotonic() just after:
        another event's GPU time then reads on the host's clock as that time
        + elapsed_ms(base, event) / 1e3 (late by the sync's return, some
        microseconds). Each process its own, so two processes' GPU marks
        line up with each other and with the shims' debug lines."""
        base = self.b.event()
        self.b.record(base)
        self.b.sync()
        return base, time.monotonic()

    def warm(self, unit: str) -> None:
        """One unit, untimed: a new shape's first run (buffers, library
        kernel choice, lazy module load) stays out of what is measured."""
        self.b.launch_unit(unit)
        self.b.sync()

    def launch(self, launches: int, sync_every: int = 2000) -> dict:
        """Launch-bound loop: `launches` tiny launches, a sync every `sync_every`."""
        b = self.b
        b.sync()
        t0 = time.perf_counter_ns()
        for i in range(launches):
            b.launch_unit("add")
            if i % sync_every == sync_every - 1:
                b.sync()
        b.sync()
        elapsed = time.perf_counter_ns() - t0
        return {"launches": launches, "ns_per_launch": elapsed / launches}

    def bursts(self, count: int, burst: int = 8, think_ms: float = 10.0, unit: str = "mm4096h",
               think_jitter_ms: float = 0.0, seed: int = 0, gpu_marks: bool = False) -> dict:
        """Closed loop: `burst` units, wait for them, think (uniform in
        think_ms +- think_jitter_ms); latencies in ms, and each burst's start
        on time.monotonic() (to line up with the shim's debug lines).
        gpu_marks: also each unit's end on the GPU, in ms after an event
        recorded just before the first (the burst's GPU span, and whether
        another context ran in the middle of it), and when the GPU reached
        that first event, on time.monotonic() (gpu_clock)."""
        b = self.b
        latencies, starts, marks, gpu_starts = [], [], [], []
        rng = random.Random(seed)
        self.warm(unit)
        events = [b.event() for _ in range(burst + 1)] if gpu_marks else []
        base, base_at = self.gpu_clock() if gpu_marks else (None, 0.0)
        start = time.monotonic()
        for _ in range(count):
            starts.append(round(time.monotonic(), 6))
            t0 = time.perf_counter()
            if events:
                b.record(events[0])
            for i in range(burst):
                b.launch_unit(unit)
                if events:
                    b.record(events[i + 1])
            b.sync()
            latencies.append((time.perf_counter() - t0) * 1e3)
            if events:
                marks.append([round(b.elapsed_ms(events[0], ev), 4) for ev in events[1:]])
                gpu_starts.append(round(base_at + b.elapsed_ms(base, events[0]) / 1e3, 6))
            time.sleep(max(0.0, think_ms + rng.uniform(-think_jitter_ms, think_jitter_ms)) / 1e3)
        out = {"bursts": count, "seconds": time.monotonic() - start, "latency_ms": percentiles(latencies),
               "latencies_ms": [round(x, 4) for x in latencies], "starts_monotonic": starts}
        if gpu_marks:
            out["gpu_marks_ms"] = marks
            out["gpu_starts_monotonic"] = gpu_starts
        return out

    def neighbour_start(self, unit: str, sync_every: int, gpu_marks: bool = False) -> dict:
        """Saturate in a background thread until neighbour_stop
        (sync_every 0: never synchronise until stopped). gpu_marks: the stop
        reports each unit's launch call and its end on the GPU, both on
        time.monotonic() (gpu_clock): what the neighbour had queued when a
        burst started, and how much of it ran inside the burst."""
        if self.neighbour is not None:
            raise RuntimeError("a neighbour loop is already running")
        self.neighbour_stop.clear()
        self.warm(unit)
        report = self.neighbour_report = {"iterations": 0}

        def loop():
            b = self.b
            t0 = time.monotonic()
            n = 0
            marks = _UnitMarks(self, b) if gpu_marks else None
            try:
                getattr(b, "bind_thread", lambda: None)()
                if marks:
                    marks.start()
                while not self.neighbour_stop.is_set():
                    for _ in range(sync_every or 16):
                        launched = time.monotonic()
                        b.launch_unit(unit)
                        if marks:
                            marks.launched(launched)
                    n += sync_every or 16
                    if sync_every:
                        b.sync()
                    if marks:
                        marks.harvest()
                b.sync()
                if marks:
                    marks.harvest()
                    report["units"] = marks.units
            except BaseException as exc:  # reported on stop
                report["error"] = f"{type(exc).__name__}: {exc}"
            report.update(iterations=n, seconds=time.monotonic() - t0)

        self.neighbour = threading.Thread(target=loop, daemon=True)
        self.neighbour.start()
        return {"started": True}

    def neighbour_stop_op(self) -> dict:
        if self.neighbour is None:
            raise RuntimeError("no neighbour loop is running")
        self.neighbour_stop.set()
        self.neighbour.join(120)
        alive = self.neighbour.is_alive()
        self.neighbour = None
        if alive:
            raise RuntimeError("the neighbour loop did not stop within 120 s")
        if "error" in self.neighbour_report:
            raise RuntimeError(self.neighbour_report["error"])
        return dict(self.neighbour_report)

    def alloc(self, chunk_mib: int, max_chunks: int) -> dict:
        """Allocate chunks until refused (or max_chunks); hold them until free."""
        refused, error = False, ""
        count = 0
        for _ in range(max_chunks):
            try:
                if not self.b.allocate(chunk_mib << 20):
                    refused = True
                    break
            except Exception as exc:  # an allocator's own out-of-memory exception
                refused, error = True, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                break
            count += 1
        free, total = self.b.mem_get_info()
        return {"allocated": count * (chunk_mib << 20), "chunks": count, "refused": refused, "error": error[:300],
                "mem_free": free, "mem_total": total, "reserved": self.b.memory_reserved(), "pid": os.getpid()}

    def free(self) -> dict:
        self.b.free_all()
        return {"freed": True}

    def capture(self, mode: str, kernels: int = 1000, sleep_every: int = 100) -> dict:
        t0 = time.monotonic()
        out = self.b.capture(mode, kernels, sleep_every)
        out["capture_s"] = time.monotonic() - t0
        return out

    def capture_beside_own_launches(self, mode: str, kernels: int = 1000, sleep_every: int = 100,
                                    unit: str = "mm4096h") -> dict:
        """capture() while another thread of this process launches `unit` on
        its own stream without synchronising: in GLOBAL mode a potentially
        unsafe call made on that thread (by the application, or by a shim
        underneath it) invalidates the capture."""
        self.warm(unit)
        stop = threading.Event()
        launched: dict = {}

        def launch():
            try:
                launched["n"] = self.b.launch_on_own_stream_until(stop, unit)
            except BaseException as exc:  # reported below
                launched["error"] = f"{type(exc).__name__}: {exc}"

        thread = threading.Thread(target=launch, daemon=True)
        thread.start()
        time.sleep(0.05)   # the thread is launching (and its gate asking for tokens) when the capture begins
        try:
            out = self.capture(mode, kernels, sleep_every)
        finally:
            stop.set()
            thread.join(120)
        if thread.is_alive() or "error" in launched:
            raise RuntimeError(f"the launching thread failed: {launched.get('error', 'still running after 120 s')}")
        out["own_thread_launches"] = launched["n"]
        return out

    def replay(self, count: int) -> dict:
        t0 = time.monotonic()
        out = self.b.replay(count)
        out["replay_s"] = time.monotonic() - t0
        return out

    def handle(self, command: dict) -> dict:
        op = command.pop("op", None)
        table = {"throughput": self.throughput, "launch": self.launch, "bursts": self.bursts,
                 "neighbour_start": self.neighbour_start, "neighbour_stop": self.neighbour_stop_op,
                 "alloc": self.alloc, "free": self.free, "capture": self.capture, "replay": self.replay,
                 "capture_beside_own_launches": self.capture_beside_own_launches,
                 "shim_stats": shim_stats, "ping": lambda: {"pid": os.getpid()}}
        if op not in table:
            raise ValueError(f"op {op!r} is not one of {sorted(table)}")
        return table[op](**command)


def serve(backend_name: str) -> int:
    t0 = time.monotonic()
    try:
        server = Server(make_backend(backend_name))
    except Exception as exc:
        print(json.dumps({"ready": False, "error": f"{type(exc).__name__}: {exc}",
                          "trace": traceback.format_exc()[-2000:]}), flush=True)
        return 1
    print(json.dumps({"ready": True, "pid": os.getpid(), "backend": backend_name,
                      "setup_s": time.monotonic() - t0}), flush=True)
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            command = json.loads(line)
        except ValueError as exc:
            print(json.dumps({"ok": False, "error": f"not a JSON command: {line[:200]!r} ({exc})"}), flush=True)
            continue
        if command.get("op") == "exit":
            break
        try:
            reply = {"ok": True, **server.handle(command)}
        except Exception as exc:
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:2000], "trace": traceback.format_exc()[-2000:]}
        print(json.dumps(reply), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gslice.workloads_served", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=("torch", "driver", "driver_fills"), default="torch")
    parser.add_argument("--tag", default="", help="ignored: names the process (e.g. after its log) for ps")
    args = parser.parse_args(argv)
    return serve(args.backend)


if __name__ == "__main__":
    sys.exit(main())
