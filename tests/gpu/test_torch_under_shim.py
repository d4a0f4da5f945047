"""PyTorch on the machine's real GPU under the real shim and tokend
(FIELD-NOTES sections 7, 8 and 10), each workload run bare first in the
same test (skipped with the bare failure when the workload itself is
broken), through warm served processes (gslice.workloads_served):

- a valid torch.cuda.graph capture (warm-up on a side stream, no other
  thread touching CUDA while it captures) in each capture_error_mode,
  beside a busy group: it works, and the replays take tokens (counted only
  around the replays);
- each allocator (default, expandable_segments, cudaMallocAsync) held to a
  memory quota, with NVML's own figure for the process (read from outside
  the shim) within the quota and covered by the group's charge;
- a 30% limit held to 30% +- 3 points of bare throughput;
- two groups at 30/70 doing 30% +- 3 points of the work done;
- the per-launch overhead: median of 5 interleaved bare/shim pairs within
  1% beside the bare-against-bare noise of the same test.

Results are printed on lines starting with "gpu-result:" (run with -s).
Skipped without a real GPU (conftest.py) or without PyTorch."""
from __future__ import annotations

import functools
import statistics
import subprocess
import sys
import time

import pytest

from gslice.experiment import SharingExperiment

from gpu_reports import bare_or_skip, interleaved_ratios, nvml_used_by, served

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

GIB = 1 << 30
MIB = 1 << 20
READY_TIMEOUT = 180.0


@functools.lru_cache(maxsize=1)
def missing_torch() -> str:
    probe = subprocess.run([sys.executable, "-c", "import torch; assert torch.cuda.is_available()"],
                           capture_output=True, text=True, timeout=300)
    if probe.returncode == 0:
        return ""
    last = (probe.stderr.strip().splitlines() or ["(no message)"])[-1]
    return f"PyTorch with CUDA is not importable by {sys.executable} ({last})"


@pytest.fixture(autouse=True)
def _require_torch():
    reason = missing_torch()
    if reason:
        pytest.skip(f"real-GPU PyTorch test skipped: {reason}")


def ready(*workers):
    for w in workers:
        w.wait_ready(READY_TIMEOUT)


@pytest.mark.parametrize("mode", ["global", "thread_local", "relaxed"])
def test_torch_cuda_graph_capture_and_replay_beside_a_busy_group(tmp_path, mode):
    with SharingExperiment(tmp_path / "exp", gpu="real") as exp:
        exp.add_group("busy", request="50%", limit="100%", memory="4GiB")
        exp.add_group("graphs", request="50%", limit="100%", memory="8GiB")
        busy = served(exp, "busy", "torch", "busy", tmp_path)
        bare = served(exp, "graphs", "torch", "bare", tmp_path, shim=False)
        shim = served(exp, "graphs", "torch", "shim", tmp_path)
        ready(busy, shim)
        busy.call("neighbour_start", 60, unit="mm4096h", sync_every=4)
        bare_or_skip(bare, f"a torch.cuda.graph capture in {mode} mode", "capture", mode=mode, kernels=1000,
                     sleep_every=100)
        bare_or_skip(bare, f"replaying a torch.cuda.graph captured in {mode} mode", "replay", count=2)
        captured = shim.call("capture", 120, mode=mode, kernels=1000, sleep_every=100)
        before = exp.admin.status().group("graphs").tokens_granted
        replayed = shim.call("replay", 300, count=20)
        granted = exp.admin.status().group("graphs").tokens_granted - before
        busy.call("neighbour_stop", 120)
    print(f"gpu-result: torch.cuda.graph {mode}: capture {captured['capture_s']:.2f} s, 20 replays "
          f"{replayed['replay_s']:.2f} s, tokens granted around the replays {granted}")
    assert replayed["finite"]
    assert granted > 0, "the replays never asked for a token beside a busy group: cuGraphLaunch escaped the gate"


@pytest.mark.parametrize("conf", ["", "expandable_segments:True", "backend:cudaMallocAsync"],
                         ids=["default", "expandable_segments", "cudaMallocAsync"])
def test_torch_allocators_are_held_to_the_quota(tmp_path, conf):
    quota = 4 * GIB
    max_chunks = (quota + 2 * GIB) // (64 * MIB)
    env = {"PYTORCH_CUDA_ALLOC_CONF": conf} if conf else None
    with SharingExperiment(tmp_path / "exp", gpu="real") as exp:
        exp.add_group("mem", request="50%", limit="100%", memory=quota)
        bare = served(exp, "mem", "torch", "bare", tmp_path, shim=False, env=env)
        shim = served(exp, "mem", "torch", "shim", tmp_path, env=env)
        alone = bare_or_skip(bare, f"torch allocation ({conf or 'default'})", "alloc", chunk_mib=64,
                             max_chunks=max_chunks)
        assert alone["chunks"] == max_chunks and not alone["refused"], (
            f"without gslice the workload could not get past the quota ({alone}): this test would prove nothing")
        bare.call("free", 60)
        ready(shim)
        report = shim.call("alloc", 120, chunk_mib=64, max_chunks=max_chunks)
        charged = exp.admin.status().group("mem").memory_used
        nvml = nvml_used_by(shim.pid)
    print(f"gpu-result: torch {conf or 'default'}: allocated {report['allocated'] / MIB:.0f} MiB (reserved "
          f"{report['reserved'] / MIB:.0f} MiB) before {report['error']!r}; group charged {charged / MIB:.0f} MiB; "
          f"NVML {None if nvml is None else nvml / MIB} MiB; mem_get_info total {report['mem_total'] / MIB:.0f} MiB")
    assert report["refused"], f"{max_chunks} x 64 MiB all fit in a {quota} byte quota: {report}"
    assert report["allocated"] <= quota and report["mem_total"] <= quota
    assert report["reserved"] <= charged <= quota, "the allocator holds memory the group is not charged for"
    if nvml is None:
        pytest.skip("NVML gives no per-process used memory here (a container without the host pid namespace?)")
    assert nvml <= quota, f"NVML sees {nvml} bytes used by a process held to a {quota} byte quota"
    assert charged >= nvml, "the process uses device memory (context included) its group is not charged for"


def test_a_30_percent_limit_gives_30_percent_of_bare_throughput(tmp_path):
    with SharingExperiment(tmp_path / "exp", gpu="real") as exp:
        exp.add_group("cap", request="30%", limit="30%", memory="4GiB")
        bare = served(exp, "cap", "torch", "bare", tmp_path, shim=False)
        shim = served(exp, "cap", "torch", "shim", tmp_path)
        run = dict(unit="mm4096h", seconds=3.0, sync_every=4)
        before = bare_or_skip(bare, "the 4096 fp16 matmul loop", "throughput", **run)
        ready(shim)
        capped = shim.call("throughput", 120, **{**run, "seconds": 10.0})
        after = bare.call("throughput", 120, **run)
    rate = lambda r: r["iterations"] / r["seconds"]  # noqa: E731
    bare_rate = (rate(before) + rate(after)) / 2
    ratio = rate(capped) / bare_rate
    print(f"gpu-result: torch 4096 fp16 matmul under a 30% limit: {ratio:.3f} of bare ({rate(capped):.0f} vs "
          f"{bare_rate:.0f} it/s; bare after/before {rate(after) / rate(before):.3f})")
    assert ratio == pytest.approx(0.30, abs=0.03)


def test_groups_at_30_and_70_do_30_and_70_percent_of_the_work(tmp_path):
    with SharingExperiment(tmp_path / "exp", gpu="real") as exp:
        exp.add_group("s30", request="30%", limit="100%", memory="4GiB")
        exp.add_group("s70", request="70%", limit="100%", memory="4GiB")
        bare = served(exp, "s30", "torch", "bare", tmp_path, shim=False)
        workers = {name: served(exp, name, "torch", name, tmp_path) for name in ("s30", "s70")}
        bare_or_skip(bare, "the 4096 fp16 matmul loop", "throughput", unit="mm4096h", seconds=1.0, sync_every=4)
        ready(*workers.values())
        start_at = time.time() + 0.5
        for w in workers.values():
            w.send("throughput", unit="mm4096h", seconds=10.0, sync_every=4, start_at=start_at)
        done = {name: w.receive("throughput", 180)["iterations"] for name, w in workers.items()}
    fraction = done["s30"] / (done["s30"] + done["s70"])
    print(f"gpu-result: torch shares 30/70: iterations {done}, the 30% side did {fraction:.3f}")
    assert fraction == pytest.approx(0.30, abs=0.03)


def test_launch_overhead_is_within_one_percent_beside_the_bare_noise(tmp_path):
    with SharingExperiment(tmp_path / "exp", gpu="real") as exp:
        exp.add_group("launch", request="100%", limit="100%", memory="2GiB")
        bare_a = served(exp, "launch", "torch", "bare-a", tmp_path, shim=False)
        bare_b = served(exp, "launch", "torch", "bare-b", tmp_path, shim=False)
        shim = served(exp, "launch", "torch", "shim", tmp_path)
        bare_or_skip(bare_a, "the launch-bound add_ loop", "launch", launches=2000, sync_every=2000)
        ready(bare_b, shim)
        ratios, noise = interleaved_ratios(bare_a, shim, bare_b, "launch", lambda r: r["ns_per_launch"], rounds=5,
                                           launches=20000, sync_every=2000)
    added, spread = statistics.median(ratios) - 1, abs(statistics.median(noise) - 1)
    print(f"gpu-result: launch-bound loop, 5 interleaved rounds: shim/bare {[round(r, 3) for r in ratios]} "
          f"(median {added:+.2%}), bare B/bare A {[round(n, 3) for n in noise]} (median {spread:.2%})")
    assert added <= 0.01 + spread, f"the shim adds {added:.2%} per launch, beyond 1% + the bare noise {spread:.2%}"
