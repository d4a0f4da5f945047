"""CuPy workloads on the machine's real NVIDIA GPU, under the real shim, with a
real tokend (gslice.experiment.SharingExperiment).

What each test proves:
- CuPy's kernel launches (RawKernel, dlsym on CuPy's own libcuda handle)
  and cuBLAS's (through the CUDA runtime) wait for tokens, so tokend sees
  and limits them;
- cudaMalloc through the runtime is held to the group's quota, and
  cudaMemGetInfo reports the group's view;
- two saturating CuPy groups at 30/70 are charged 30/70;
- the shim's added cost per launch, printed (targets live in benchmarks).

Results are printed on lines starting with "gpu-result:" (run with -s).
Skipped unless a real GPU and CuPy are present (tests/gpu/conftest.py); the
driver-API workload's test is in test_driver_api_real_gpu.py (no CuPy needed).
"""
from __future__ import annotations

import math
import subprocess
import sys
import time

import pytest

from gslice.experiment import SharingExperiment
from gslice.workloads_cupy import compare_launch_overhead

from gpu_reports import PROCESS_TIMEOUT, finish_json, read_json_line

pytestmark = [pytest.mark.gpu, pytest.mark.slow, pytest.mark.usefixtures("needs_cupy")]

GIB = 1 << 30
MIB = 1 << 20


def cupy_workload(*args: str) -> list[str]:
    return [sys.executable, "-m", "gslice.workloads_cupy", *args]


def spawn_piped(exp: SharingExperiment, group: str, argv: list[str], shim: bool = True) -> subprocess.Popen:
    return exp.spawn(group, argv, shim=shim, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_cupy_kernel_launches_are_metered(tmp_path):
    with SharingExperiment(tmp_path / "exp", gpu="real") as exp:
        exp.add_group("cupy", request="50%", limit="100%", memory="2GiB")
        proc = spawn_piped(exp, "cupy", cupy_workload("spin", "--kernel-us", "1000", "--seconds", "3",
                                                      "--sync-every", "1"))
        report = finish_json(proc, "CuPy spin under the shim")
        granted = exp.admin.status().group("cupy").tokens_granted
    print(f"gpu-result: cupy spin kernels={report['kernels']} tokens_granted={granted}")
    assert report["kernels"] > 0
    assert granted > 0, "CuPy's launches never asked tokend for a token: the shim did not catch them"


def test_cublas_matmul_is_held_to_the_group_limit(tmp_path):
    # A short window: a fresh group may first spend its whole room
    # (limit x window) at full speed before the cap bites.
    with SharingExperiment(tmp_path / "exp", gpu="real", window=2.0) as exp:
        exp.add_group("blas", request="30%", limit="30%", memory="4GiB")
        bare_proc = spawn_piped(exp, "blas", cupy_workload("matmul", "--size", "4096", "--seconds", "5"), shim=False)
        try:
            bare = finish_json(bare_proc, "CuPy matmul without the shim")
        except (AssertionError, pytest.fail.Exception) as exc:
            pytest.skip(f"CuPy matmul does not run even without the shim (is cuBLAS installed? "
                        f"pip install 'cupy-cuda12x[ctk]'): {exc}")
        capped_proc = spawn_piped(exp, "blas", cupy_workload("matmul", "--size", "4096", "--seconds", "10"))
        capped = finish_json(capped_proc, "CuPy matmul under the shim, limit 30%")
        granted = exp.admin.status().group("blas").tokens_granted
    ratio = capped["tflops"] / bare["tflops"]
    print(f"gpu-result: matmul 4096 fp32 bare {bare['tflops']:.1f} TFLOP/s, under a 30% limit "
          f"{capped['tflops']:.1f} TFLOP/s (ratio {ratio:.2f}), tokens_granted={granted}")
    assert granted > 0, "cuBLAS's launches never asked tokend for a token"
    assert ratio < 0.6, (f"a group limited to 30% ran matmul at {ratio:.0%} of the bare speed: "
                         "cuBLAS's launches (CUDA runtime route) escape the token gate")


def test_cupy_malloc_is_held_to_the_memory_quota(tmp_path):
    # The process's context is charged too (GSLICE_CONTEXT_RESERVE_MIB, 512 MiB,
    # or NVML's figure when higher): 1 GiB of room for allocations on top.
    quota = 1 * GIB + 512 * MIB
    with SharingExperiment(tmp_path / "exp", gpu="real") as exp:
        exp.add_group("mem", request="50%", limit="100%", memory=quota)
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
def test_cupy_groups_get_their_requested_shares(tmp_path, sync_every):
    window, lead, run_seconds, sample_after = 5.0, 20.0, 12.0, 10.0
    requests = {"share30": 0.30, "share70": 0.70}
    with SharingExperiment(tmp_path / "exp", gpu="real", window=window) as exp:
        for name, request in requests.items():
            exp.add_group(name, request=request, limit="100%", memory="1GiB")
        # Both processes set up (CuPy import, context, JIT) before start_at,
        # then saturate the GPU with 1 ms kernels from the same instant.
        start_at = time.time() + lead
        procs = {name: spawn_piped(exp, name, cupy_workload(
            "spin", "--kernel-us", "1000", "--seconds", str(run_seconds), "--sync-every", str(sync_every),
            "--start-at", str(start_at))) for name in requests}
        time.sleep(max(0.0, start_at + sample_after - time.time()))
        shares = exp.window_shares()
        busy = exp.admin.status().busy_fraction
        sampled_at = time.time()
        reports = {name: finish_json(proc, f"CuPy spin in {name}") for name, proc in procs.items()}
    total = shares["share30"] + shares["share70"]
    assert total > 0, f"tokend charged neither group in its window: {shares}"
    fraction = shares["share30"] / total
    print(f"gpu-result: cupy shares ({'sync every kernel' if sync_every else 'never sync'}) "
          f"share30={shares['share30']:.3f} share70={shares['share70']:.3f} -> 30% side got {fraction:.3f}; "
          f"busy {busy:.2f}; kernels {({n: r['kernels'] for n, r in reports.items()})}")
    for name, report in reports.items():
        assert report["first_launch_at"] <= sampled_at - window, (
            f"{name} started launching at {report['first_launch_at']:.2f}, after the sampled window began "
            f"({sampled_at - window:.2f}); it was ready at {report['ready_at']:.2f} for start_at {start_at:.2f}")
    assert fraction == pytest.approx(0.30, abs=0.05)


def test_launch_overhead_with_and_without_the_shim(tmp_path):
    with SharingExperiment(tmp_path / "exp", gpu="real") as exp:
        exp.add_group("launch", request="50%", limit="100%", memory="1GiB")
        result = compare_launch_overhead(exp, "launch", launches=200_000, rounds=3)
    print(f"gpu-result: empty-kernel launch (CuPy RawKernel, {result['launches']} launches x {result['rounds']} "
          f"rounds, best round): bare {result['bare_ns_per_launch']:.0f} ns, under the shim "
          f"{result['shim_ns_per_launch']:.0f} ns, added {result['added_ns_per_launch']:+.0f} ns")
    for side in ("bare_ns_per_launch", "shim_ns_per_launch"):
        assert math.isfinite(result[side]) and result[side] > 0, result
