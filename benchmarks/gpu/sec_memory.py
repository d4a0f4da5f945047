"""Sections f and h: memory quotas per allocator, and kill -9 reclaim against NVML.

f. A 4 GiB quota with PyTorch's default caching allocator,
   expandable_segments:True (cuMemCreate/cuMemMap) and backend:cudaMallocAsync
   (stream-ordered pool), and JAX when importable (its default
   preallocation): each allocates 64 MiB chunks until refused. The same
   workload bare first must get past the quota (else the check proves
   nothing). The quota holds when NVML's figure for the process, the
   group's charge and what was allocated all stay within it.
h. A process holding ~3.7 GiB is killed with SIGKILL; NVML's process list
   and tokend's charge for its group are polled (~1 ms) from before the
   kill; when each drops is recorded. The requirement (issue 24): the
   charge returns only after NVML stops listing the process, within 50 ms."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

from gslice.experiment import SharingExperiment

from harness import NVML_WATCH, Context, Worker, nvml_env, nvml_processes, verdict, wait_ready

GIB, MIB = 1 << 30, 1 << 20

TORCH_ALLOCATORS = [("default", None), ("expandable_segments", "expandable_segments:True"),
                    ("cudaMallocAsync", "backend:cudaMallocAsync")]

JAX_ALLOC = r"""
import json, sys
chunk, count = int(sys.argv[1]), int(sys.argv[2])
try:
    import jax, jax.numpy as jnp
except Exception as exc:
    print(json.dumps({"ready": False, "error": f"JAX not importable: {exc}"})); sys.exit(3)
arrays, error = [], ""
try:
    for _ in range(count):
        arrays.append(jnp.zeros((chunk,), dtype=jnp.uint8).block_until_ready())
except Exception as exc:
    error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
stats = {}
try:
    stats = {k: v for k, v in (jax.devices()[0].memory_stats() or {}).items() if "bytes" in k}
except Exception:
    pass
print(json.dumps({"ready": True, "allocated": len(arrays) * chunk, "chunks": len(arrays), "refused": bool(error),
                  "error": error, "pid": __import__("os").getpid(), "memory_stats": stats,
                  "devices": [str(d) for d in jax.devices()]}), flush=True)
sys.stdin.readline()
"""


def _check_quota(quota: int, bare: dict | None, shim: dict, nvml_used, charged: int) -> dict:
    return {"bare": bare, "shim": shim, "nvml_used": nvml_used, "charged": charged, "quota": quota,
            "bare_got_past_quota": bool(bare and bare["allocated"] > quota and not bare["refused"]),
            "refused_under_quota": bool(shim["refused"]),
            "allocated_within_quota": shim["allocated"] <= quota,
            "nvml_within_quota": verdict(nvml_used, high=quota) if nvml_used is not None else "NVML gave no figure",
            "charge_covers_nvml": (charged >= nvml_used) if nvml_used is not None else None,
            "charge_within_quota": charged <= quota}


def quotas(ctx: Context) -> None:
    rec = ctx.record
    quota = ctx.count(4 * GIB, 1 * GIB)
    chunk_mib = 64
    max_chunks = (quota + 2 * GIB) // (chunk_mib * MIB)
    allocators = TORCH_ALLOCATORS if ctx.backend == "torch" else [("driver_cuMemAlloc", None)]
    with SharingExperiment(ctx.work_dir / "exp", gpu=ctx.gpu, sim_memory="16GiB") as exp:
        pairs = {}
        for name, conf in allocators:
            exp.add_group(f"q-{name}", request="10%", limit="100%", memory=quota)
            env = {"PYTORCH_CUDA_ALLOC_CONF": conf} if conf else None
            pairs[name] = (Worker(exp, f"q-{name}", ctx.backend, f"bare-{name}", ctx.work_dir, shim=False, env=env),
                           Worker(exp, f"q-{name}", ctx.backend, f"shim-{name}", ctx.work_dir, env=env))
        try:
            wait_ready([w for pair in pairs.values() for w in pair], min(120.0, ctx.left()))
            for name, (bare, shim) in pairs.items():
                try:
                    bare_report = bare.call("alloc", 120, chunk_mib=chunk_mib, max_chunks=max_chunks)
                    bare.call("free", 60)
                    shim_report = shim.call("alloc", 120, chunk_mib=chunk_mib, max_chunks=max_chunks)
                    charged = exp.admin.status().group(f"q-{name}").memory_used
                    nvml_used = nvml_processes(exp).get(shim.pid)
                    rec.set(f"quota_{name}", {"what": f"{quota // MIB} MiB quota, {chunk_mib} MiB chunks until "
                                                      f"refused (at most {max_chunks}), allocator {name}",
                                              **_check_quota(quota, bare_report, shim_report, nvml_used, charged)})
                    shim.call("free", 60)
                except Exception as exc:
                    rec.set(f"quota_{name}", {"error": f"{type(exc).__name__}: {exc}"})
        finally:
            for pair in pairs.values():
                for w in pair:
                    w.close()
        if ctx.backend == "torch":
            _jax_quota(ctx, exp, quota, chunk_mib, max_chunks)


def _jax_quota(ctx: Context, exp, quota: int, chunk_mib: int, max_chunks: int) -> None:
    rec = ctx.record
    probe = subprocess.run([sys.executable, "-c", "import jax"], capture_output=True, text=True, timeout=120)
    if probe.returncode != 0:
        rec.set("quota_jax", {"skipped": f"JAX not importable: {(probe.stderr.strip().splitlines() or [''])[-1]}"})
        return
    exp.add_group("q-jax", request="10%", limit="100%", memory=quota)
    reports = {}
    for label, shim in (("bare", False), ("shim", True)):
        if ctx.left() < 30:
            rec.set("quota_jax", {"skipped": f"only {ctx.left():.0f} s left", **reports})
            return
        proc = exp.spawn("q-jax", [sys.executable, "-c", JAX_ALLOC, str(chunk_mib * MIB), str(max_chunks)],
                         shim=shim, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            line = _first_json_line(proc, min(120.0, ctx.left() - 10))
            if shim and line.get("ready"):
                line["charged"] = exp.admin.status().group("q-jax").memory_used
                line["nvml_used"] = nvml_processes(exp).get(proc.pid)
            reports[label] = line
        finally:
            proc.kill()
            proc.wait()
        rec.set("quota_jax", dict(reports))
    shim_report = reports.get("shim") or {}
    if shim_report.get("ready"):
        rec.set("quota_jax", {"what": f"JAX (default preallocation), {quota // MIB} MiB quota",
                              **_check_quota(quota, reports.get("bare"), shim_report, shim_report.get("nvml_used"),
                                             shim_report.get("charged", 0))})


def _first_json_line(proc: subprocess.Popen, timeout: float) -> dict:
    import select
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.5)
        if ready:
            line = proc.stdout.readline()
            if not line:
                return {"ready": False, "error": f"exited {proc.wait()}: {proc.stderr.read()[-1500:]}"}
            if line.startswith("{"):
                return json.loads(line)
    return {"ready": False, "error": f"no JSON line within {timeout:.0f} s"}


class ChargePoller:
    """tokend's charge of one group, polled as fast as status answers: when it
    first drops below `below` (time.monotonic())."""

    def __init__(self, admin, group: str, below: int):
        self.admin, self.group, self.below = admin, group, below
        self.dropped_at = None
        self.polls = 0
        self.t0 = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            used = self.admin.status().group(self.group).memory_used
            self.polls += 1
            if used < self.below and self.dropped_at is None:
                self.dropped_at = time.monotonic()
            time.sleep(0.0005)

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join(10)
        elapsed = time.monotonic() - self.t0
        return {"dropped_at": self.dropped_at, "polls": self.polls,
                "poll_interval_ms": elapsed * 1e3 / max(1, self.polls)}


def kill_reclaim(ctx: Context) -> None:
    rec = ctx.record
    holders = ctx.count(3, 1)
    chunks = ctx.count(48, 8)  # 48 x 64 MiB = 3 GiB, plus the context: ~3.7 GiB in NVML
    with SharingExperiment(ctx.work_dir / "exp", gpu=ctx.gpu, sim_memory="16GiB") as exp:
        workers = []
        for i in range(holders):
            exp.add_group(f"k{i}", request="10%", limit="100%", memory="4GiB")
            workers.append(Worker(exp, f"k{i}", ctx.backend, f"holder-{i}", ctx.work_dir))
        try:
            wait_ready(workers, min(120.0, ctx.left()))
            for i, w in enumerate(workers):
                held = w.call("alloc", 120, chunk_mib=64, max_chunks=chunks)
                before = exp.admin.status().group(f"k{i}").memory_used
                trial = {"allocated": held["allocated"], "charged_before": before}
                if before <= 0:
                    trial["error"] = "the group was charged nothing before the kill: nothing to reclaim"
                    rec.add("trials", trial)
                    continue
                watch = subprocess.Popen([sys.executable, str(NVML_WATCH), "pid-gone", str(w.pid), "--seconds",
                                          str(ctx.seconds(1.5, 1.0))], env=nvml_env(exp), stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True)
                first = json.loads(watch.stdout.readline() or '{"watching": false}')
                trial["nvml_listed_before"] = first.get("listed")
                trial["nvml_used_before"] = first.get("used")
                # Half the charge: the figure may move a little with NVML's view before the kill.
                poller = ChargePoller(exp.admin, f"k{i}", below=before // 2)
                time.sleep(0.05)
                killed_at = time.monotonic()
                os.kill(w.pid, signal.SIGKILL)
                out, err = watch.communicate(timeout=60)
                charge = poller.stop()
                gone = json.loads(out.strip().splitlines()[-1]) if out.strip() else {"error": err[-800:]}
                nvml_gone_ms = (gone["gone_at"] - killed_at) * 1e3 if gone.get("gone_at") else None
                charge_ms = (charge["dropped_at"] - killed_at) * 1e3 if charge["dropped_at"] else None
                lag = charge_ms - nvml_gone_ms if charge_ms is not None and nvml_gone_ms is not None else None
                trial.update({"nvml_gone_after_kill_ms": nvml_gone_ms, "charge_dropped_after_kill_ms": charge_ms,
                              "charge_after_nvml_gone_ms": lag, "nvml_poll_ms": gone.get("poll_interval_ms"),
                              "charge_poll_ms": charge["poll_interval_ms"], "charged_after": exp.admin.status().group(
                                  f"k{i}").memory_used,
                              "target": verdict(lag, low=0.0, high=50.0)})
                rec.add("trials", trial)
        finally:
            for w in workers:
                w.close()
