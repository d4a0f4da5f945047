"""CuPy workloads on the machine's real NVIDIA GPU, under the real shim, with a
real tokend (gslice.experiment.SharingExperiment).

What each test proves (each runs its workload bare first, and skips with
the bare failure when the workload itself is broken):
- CuPy's kernel launches (RawKernel, dlsym on CuPy's own libcuda handle)
  wait for tokens: counted only around the launches, beside a busy group
  (a lease at start grants a token at attach, before the work);
- cuBLAS's launches (through the CUDA runtime) are held to a 30% limit:
  30% +- 3 points of bare throughput;
- cudaMalloc through the runtime is held to the group's quota, and
  cudaMemGetInfo reports the group's view;
- two saturating CuPy groups at 30/70 do 30/70 of the kernels (work done
  per process, not tokend's charge);
- the shim's added cost per launch: median of 5 interleaved bare/shim pairs
  within 1% beside the bare-against-bare noise.

Results are printed on lines starting with "gpu-result:" (run with -s).
Skipped unless a real GPU and CuPy are present (tests/gpu/conftest.py); the
driver-API workload's test is in test_driver_api_real_gpu.py (no CuPy needed).
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

import pytest

from gslice.experiment import SharingExperiment

from gpu_reports import PROCESS_TIMEOUT, finish_json, read_json_line

pytestmark = [pytest.mark.gpu, pytest.mark.slow, pytest.mark.usefixtures("needs_cupy")]

GIB = 1 << 30
MIB = 1 << 20


def cupy_workload(*args: str) -> list[str]:
    return [sys.executable, "-m", "gslice.workloads_cupy", *args]


def spawn_piped(exp: SharingExperiment, group: str, argv: list[str], shim: bool = True,
                **popen_kwargs) -> subprocess.Popen:
    return exp.spawn(group, argv, shim=shim, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                     **popen_kwargs)


def finish_or_skip_bare(proc, what: str) -> dict:
    try:
        return finish_json(proc, what)
    except (AssertionError, pytest.fail.Exception) as exc:
        pytest.skip(f"{what} fails without gslice too, so this test cannot blame gslice: {exc}")


def test_cupy_kernel_launches_wait_for_tokens(tmp_path):
    spin = ["spin", "--kernel-us", "1000", "--seconds", "3", "--sync-every", "1"]
    with SharingExperiment(tmp_path / "exp", gpu="real") as exp:
        exp.add_group("busy", request="50%", limit="100%", memory="2GiB")
        exp.add_group("cupy", request="50%", limit="100%", memory="2GiB")
        finish_or_skip_bare(spawn_piped(exp, "cupy", cupy_workload(*spin), shim=False), "CuPy spin")
        exp.spawn_workload("busy", ["spin", "--kernel-us", "1000", "--seconds", "60", "--sync-every", "4"],
                           stderr=subprocess.PIPE)
        # Set up (import, context, module load, attach) before start_at; count only from then on.
        start_at = time.time() + 12
        proc = spawn_piped(exp, "cupy", cupy_workload(*spin, "--start-at", str(start_at)))
        time.sleep(max(0.0, start_at - 0.3 - time.time()))
        sampled_at = time.time()
        before = exp.admin.status().group("cupy").tokens_granted
        report = finish_json(proc, "CuPy spin under the shim")
        granted = exp.admin.status().group("cupy").tokens_granted - before
    print(f"gpu-result: cupy spin kernels={report['kernels']} tokens granted during the spin={granted}")
    assert report["ready_at"] <= sampled_at, "the workload was still setting up when the count began"
    assert report["kernels"] > 0
    assert granted > 0, "CuPy's launches beside a busy group never asked tokend for a token"


def test_cublas_matmul_is_held_to_the_group_limit(tmp_path):
    with SharingExperiment(tmp_path / "exp", gpu="real") as exp:
        exp.add_group("blas", request="30%", limit="30%", memory="4GiB")
        matmul = lambda seconds: cupy_workload("matmul", "--size", "4096", "--seconds", str(seconds))  # noqa: E731
        before = finish_or_skip_bare(spawn_piped(exp, "blas", matmul(3), shim=False), "CuPy matmul (cuBLAS)")
        capped = finish_json(spawn_piped(exp, "blas", matmul(10)), "CuPy matmul under the shim, limit 30%")
        after = finish_json(spawn_piped(exp, "blas", matmul(3), shim=False), "CuPy matmul bare again")
    bare = (before["tflops"] + after["tflops"]) / 2
    ratio = capped["tflops"] / bare
    print(f"gpu-result: cupy matmul 4096 fp32 bare {bare:.1f} TFLOP/s (after/before "
          f"{after['tflops'] / before['tflops']:.3f}), under a 30% limit {capped['tflops']:.1f} TFLOP/s, "
          f"ratio {ratio:.3f}")
    assert ratio == pytest.approx(0.30, abs=0.03)


def test_cupy_malloc_is_held_to_the_memory_quota(tmp_path):
    # The process's context is charged too (GSLICE_CONTEXT_RESERVE_MIB, 512 MiB,
    # or NVML's figure when higher): 1 GiB of room for allocations on top.
    quota = 1 * GIB + 512 * MIB
    with SharingExperiment(tmp_path / "exp", gpu="real") as exp:
        exp.add_group("mem", request="50%", limit="100%", memory=quota)
        alone = finish_or_skip_bare(spawn_piped(exp, "mem", cupy_workload("alloc", "--chunk-mib", "64", "--count",
                                                                          "64"), shim=False), "CuPy alloc")
        if alone["chunks"] < 64:
            pytest.skip(f"without gslice the workload cannot get past the quota here ({alone}): nothing to prove")
        proc = spawn_piped(exp, "mem", cupy_workload("alloc", "--chunk-mib", "64", "--count", "64",
                                                     "--hold-seconds", "5"))
        report = read_json_line(proc, "CuPy alloc under the shim")
        used_while_held = exp.admin.status().group("mem").memory_used
        _, err = proc.communicate(timeout=PROCESS_TIMEOUT)
        assert proc.returncode == 0, f"CuPy alloc exited with {proc.returncode}; stderr tail:\n{err[-3000:]}"
        deadline = time.monotonic() + 15.0
        used_after_exit = exp.admin.status().group("mem").memory_used
        while used_after_exit and time.monotonic() < deadline:
            time.sleep(0.2)
            used_after_exit = exp.admin.status().group("mem").memory_used
    held = report["allocated_bytes"]
    print(f"gpu-result: cupy alloc held {held / MIB:.0f} MiB in {report['chunks']} chunks, refused with "
          f"{report['refused_with']!r}; memGetInfo free {report['mem_free'] / MIB:.0f} MiB total "
          f"{report['mem_total'] / MIB:.0f} MiB; tokend memory_used {used_while_held / MIB:.0f} MiB while held, "
          f"{used_after_exit / MIB:.0f} MiB after exit")
    assert report["refused"] == 1, f"64 chunks of 64 MiB (4 GiB) all fit in a 1.5 GiB quota: {report}"
    assert held <= quota
    assert report["chunks"] >= 8, f"under half of the 1 GiB beside the context was usable: {report}"
    assert report["mem_total"] <= quota, f"cudaMemGetInfo total is not the group's quota: {report}"
    assert report["mem_free"] <= quota - held, f"cudaMemGetInfo free exceeds quota - held: {report}"
    assert held <= used_while_held <= quota
    assert used_after_exit == 0, f"{used_after_exit} bytes still counted 15 s after the process exited"


@pytest.mark.parametrize("sync_every", [1, 0], ids=["sync-each-kernel", "never-sync"])
def test_cupy_groups_do_their_requested_shares_of_the_work(tmp_path, sync_every):
    lead, run_seconds = 12.0, 8.0
    requests = {"share30": 0.30, "share70": 0.70}
    spin = ["spin", "--kernel-us", "1000", "--seconds", str(run_seconds), "--sync-every", str(sync_every)]
    with SharingExperiment(tmp_path / "exp", gpu="real") as exp:
        for name, request in requests.items():
            exp.add_group(name, request=request, limit="100%", memory="1GiB")
        finish_or_skip_bare(spawn_piped(exp, "share30", cupy_workload(*spin[:3], "--seconds", "1"), shim=False),
                            "CuPy spin")
        # Both processes set up (CuPy import, context, JIT) before start_at,
        # then saturate the GPU with 1 ms kernels from the same instant.
        start_at = time.time() + lead
        procs = {name: spawn_piped(exp, name, cupy_workload(*spin, "--start-at", str(start_at)))
                 for name in requests}
        reports = {name: finish_json(proc, f"CuPy spin in {name}") for name, proc in procs.items()}
    kernels = {name: r["kernels"] for name, r in reports.items()}
    fraction = kernels["share30"] / (kernels["share30"] + kernels["share70"])
    print(f"gpu-result: cupy shares ({'sync every kernel' if sync_every else 'never sync'}): kernels {kernels}; "
          f"the 30% side did {fraction:.3f} of the work")
    for name, report in reports.items():
        assert report["ready_at"] <= start_at, f"{name} was still setting up at start_at: {report}"
    assert fraction == pytest.approx(0.30, abs=0.03)


def _on_one_cpu():
    """preexec_fn: the child runs on the last CPU it may use, every run the same
    one. Unpinned, an empty-kernel launch loop's rate differed up to 1.8x
    between two bare processes on the H100 (2026-11-27: bare B/bare A 0.85-1.80),
    more than the 1% this test is about (FIELD-NOTES 10: pinned, 0.99 and 1.03)."""
    cpu = max(os.sched_getaffinity(0))
    return lambda: os.sched_setaffinity(0, {cpu})


def test_launch_overhead_is_within_one_percent_beside_the_bare_noise(tmp_path):
    # Best of three rounds per process, each process on the same CPU.
    launch = cupy_workload("launch", "--launches", "50000", "--rounds", "3")
    ns = lambda report: report["ns_per_launch_best"]  # noqa: E731
    pin = _on_one_cpu()
    with SharingExperiment(tmp_path / "exp", gpu="real") as exp:
        exp.add_group("launch", request="100%", limit="100%", memory="1GiB")
        finish_or_skip_bare(spawn_piped(exp, "launch", launch, shim=False), "CuPy empty-kernel launches")
        ratios, noise = [], []
        for r in range(5):
            sides = [("bare_a", False), ("shim", True), ("bare_b", False)]
            sides = sides[r % 3:] + sides[:r % 3]  # order rotated
            got = {label: ns(finish_json(spawn_piped(exp, "launch", launch, shim=shim, preexec_fn=pin),
                                         f"CuPy launches ({label})"))
                   for label, shim in sides}
            ratios.append(got["shim"] / got["bare_a"])
            noise.append(got["bare_b"] / got["bare_a"])
    added, spread = statistics.median(ratios) - 1, abs(statistics.median(noise) - 1)
    print(f"gpu-result: cupy empty-kernel launch, 5 interleaved rounds: shim/bare {[round(x, 3) for x in ratios]} "
          f"(median {added:+.2%}), bare B/bare A {[round(x, 3) for x in noise]} (median {spread:.2%})")
    assert added <= 0.01 + spread, f"the shim adds {added:.2%} per launch, beyond 1% + the bare noise {spread:.2%}"
