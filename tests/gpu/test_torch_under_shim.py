"""PyTorch on the machine's real GPU under the real shim and tokend: the
routes of issue 7 as a framework uses them (FIELD-NOTES sections 7 and 8:
PyTorch 2.x with the CUDA 13 runtime).

- torch.cuda.graph capture and replay, in each capture_error_mode, beside a
  group that keeps the GPU busy: the capture is not broken by the shim (its
  keeper thread, checkpoints, slice ends) and the replays take tokens;
- PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (cuMemCreate/cuMemMap)
  and backend:cudaMallocAsync (stream-ordered pool) held to a memory quota;
- a cuBLAS matmul loop held to a 30 % limit;
- NVML's own-process used memory is covered by the group's charge (context
  memory included), and after a matmul and a fill to the quota stays within
  the quota (default allocator, expandable segments, cudaMallocAsync).

Results are printed on lines starting with "gpu-result:" (run with -s).
Skipped without a real GPU (conftest.py) or without PyTorch."""
from __future__ import annotations

import functools
import subprocess
import sys

import pytest

from gslice.experiment import SharingExperiment

from gpu_reports import finish_json, read_json_line

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

GIB = 1 << 30
MIB = 1 << 20


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


def spawn(exp: SharingExperiment, group: str, script: str, *args: str, shim: bool = True,
          extra_env: dict | None = None) -> subprocess.Popen:
    import os
    env = exp.process_env(group) if shim else {**os.environ, **exp.sim_env}
    env.update(extra_env or {})
    # stdin piped: the scripts that hold memory wait on it until killed.
    proc = subprocess.Popen([sys.executable, "-c", script, *args], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    exp.groups[group].processes.append(proc)
    return proc


BUSY = r"""
import sys, time, torch
a = torch.randn(2048, 2048, device="cuda")
end = time.time() + float(sys.argv[1])
while time.time() < end:
    for _ in range(20):
        a = torch.tanh(a @ a)
    torch.cuda.synchronize()
print('{"done": 1}')
"""

GRAPH = r"""
import json, sys, threading, time, torch
mode, replays = sys.argv[1], int(sys.argv[2])
x = torch.randn(1024, 1024, device="cuda")
s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):                     # warm-up outside the capture, as PyTorch requires
    for _ in range(3):
        y = x
        for _ in range(200):
            y = torch.relu(y @ x) * 0.001
torch.cuda.current_stream().wait_stream(s)
# Another thread keeps launching during the capture: the shim's gate,
# checkpoints and slice ends are all active while the capture runs.
stop = threading.Event()
def other():
    z = torch.randn(512, 512, device="cuda")
    while not stop.is_set():
        z = torch.tanh(z @ z)
        torch.cuda.synchronize()
t = threading.Thread(target=other); t.start()
g = torch.cuda.CUDAGraph()
t0 = time.time()
with torch.cuda.graph(g, capture_error_mode=mode):
    y = x
    for i in range(1000):
        y = torch.relu(y @ x) * 0.001
        if i % 100 == 99:
            time.sleep(0.01)                     # the capture spans many slices
capture_s = time.time() - t0
stop.set(); t.join()
torch.cuda.synchronize()
t0 = time.time()
for _ in range(replays):
    g.replay()
torch.cuda.synchronize()
print(json.dumps({"capture_s": capture_s, "replay_s": time.time() - t0, "finite": bool(torch.isfinite(y).all())}))
"""


@pytest.mark.parametrize("mode", ["global", "thread_local", "relaxed"])
def test_torch_cuda_graph_capture_and_replay_beside_a_busy_group(tmp_path, mode):
    with SharingExperiment(tmp_path / "exp", gpu="real") as exp:
        exp.add_group("busy", request="50%", limit="100%", memory="4GiB")
        exp.add_group("graphs", request="50%", limit="100%", memory="8GiB")
        busy = spawn(exp, "busy", BUSY, "60")
        before = exp.admin.status().group("graphs").tokens_granted
        graphs = spawn(exp, "graphs", GRAPH, mode, "20")
        report = finish_json(graphs, f"torch.cuda.graph ({mode}) under the shim")
        granted = exp.admin.status().group("graphs").tokens_granted - before
        busy.kill()
    print(f"gpu-result: torch.cuda.graph {mode}: capture {report['capture_s']:.2f} s, 20 replays "
          f"{report['replay_s']:.2f} s, tokens granted {granted}")
    assert report["finite"]
    assert granted > 0, "the replays never asked for a token: cuGraphLaunch escaped the gate"


# Allocate count chunks until PyTorch refuses one: (chunks, first line of the refusal or None).
FILL = r"""
def fill(chunk_bytes, count):
    import torch
    chunks, refused = [], None
    try:
        for _ in range(count):
            chunks.append(torch.empty(chunk_bytes, dtype=torch.uint8, device="cuda"))
    except torch.cuda.OutOfMemoryError as e:
        refused = str(e).splitlines()[0]
    return chunks, refused
"""

ALLOC = FILL + r"""
import json, torch
chunks, refused = fill(64 * 2**20, 256)
free, total = torch.cuda.mem_get_info()
print(json.dumps({"allocated": len(chunks) * 64 * 2**20, "refused": refused, "free": free, "total": total,
                  "reserved": torch.cuda.memory_reserved()}))
import sys; sys.stdout.flush()
input()
"""


@pytest.mark.parametrize("conf", ["expandable_segments:True", "backend:cudaMallocAsync"])
def test_torch_allocator_backends_are_held_to_the_quota(tmp_path, conf):
    quota = 2 * GIB
    with SharingExperiment(tmp_path / "exp", gpu="real") as exp:
        exp.add_group("mem", request="50%", limit="100%", memory=quota)
        proc = spawn(exp, "mem", ALLOC, extra_env={"PYTORCH_CUDA_ALLOC_CONF": conf})
        report = read_json_line(proc, f"torch allocation with {conf}")
        charged = exp.admin.status().group("mem").memory_used
        proc.kill()
    print(f"gpu-result: torch {conf}: allocated {report['allocated'] / MIB:.0f} MiB (reserved "
          f"{report['reserved'] / MIB:.0f} MiB) before {report['refused']!r}; group charged {charged / MIB:.0f} MiB; "
          f"mem_get_info total {report['total'] / MIB:.0f} MiB")
    assert report["refused"], f"256 x 64 MiB all fit in a {quota} byte quota: {report}"
    assert report["allocated"] <= quota
    assert report["total"] <= quota
    assert report["reserved"] <= charged <= quota, "the allocator holds memory the group is not charged for"


MATMUL = r"""
import json, sys, time, torch
n, seconds = 4096, float(sys.argv[1])
a = torch.randn(n, n, device="cuda"); b = torch.randn(n, n, device="cuda")
for _ in range(3):
    a @ b
torch.cuda.synchronize()
count, t0 = 0, time.time()
while time.time() - t0 < seconds:
    for _ in range(10):
        c = a @ b
    torch.cuda.synchronize()
    count += 10
elapsed = time.time() - t0
print(json.dumps({"tflops": 2 * n**3 * count / elapsed / 1e12}))
"""


def test_cublas_matmul_loop_is_held_to_a_share(tmp_path):
    with SharingExperiment(tmp_path / "exp", gpu="real", window=2.0) as exp:
        exp.add_group("blas", request="30%", limit="30%", memory="4GiB")
        bare = finish_json(spawn(exp, "blas", MATMUL, "5", shim=False), "torch matmul without the shim")
        capped = finish_json(spawn(exp, "blas", MATMUL, "10"), "torch matmul under a 30% limit")
    ratio = capped["tflops"] / bare["tflops"]
    print(f"gpu-result: torch matmul 4096 fp32 bare {bare['tflops']:.1f} TFLOP/s, 30% limit "
          f"{capped['tflops']:.1f} TFLOP/s, ratio {ratio:.2f}")
    assert ratio < 0.6


# NVML's used memory of this process (None: NVML lists none, e.g. another pid namespace).
NVML_OWN_USED = r"""
def nvml_own_used():
    import os, pynvml
    pynvml.nvmlInit()
    used = None
    for i in range(pynvml.nvmlDeviceGetCount()):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
            if p.pid == os.getpid():
                used = p.usedGpuMemory
    return used
"""

NVML_OWN = NVML_OWN_USED + r"""
import json, sys, torch
x = torch.empty(512 * 2**20, dtype=torch.uint8, device="cuda")
y = torch.randn(2048, 2048, device="cuda") @ torch.randn(2048, 2048, device="cuda")   # loads cuBLAS
torch.cuda.synchronize()
torch.cuda.mem_get_info()                  # a memory query: the shim reconciles with NVML here
print(json.dumps({"nvml_used": nvml_own_used(), "torch_reserved": torch.cuda.memory_reserved()}))
sys.stdout.flush()
input()
"""


def test_nvml_own_process_used_memory_is_covered_by_the_group_charge(tmp_path):
    with SharingExperiment(tmp_path / "exp", gpu="real") as exp:
        exp.add_group("own", request="50%", limit="100%", memory="8GiB")
        proc = spawn(exp, "own", NVML_OWN)
        report = read_json_line(proc, "NVML own-process used memory")
        charged = exp.admin.status().group("own").memory_used
        proc.kill()
    print(f"gpu-result: NVML own-process used {report['nvml_used']} bytes, torch reserved "
          f"{report['torch_reserved']} bytes, group charged {charged} bytes")
    if report["nvml_used"] is None:
        pytest.skip("NVML lists no per-process memory here (e.g. a container without the host pid namespace)")
    assert charged >= report["nvml_used"], "the process uses device memory its group is not charged for"


FILL_AFTER_MATMUL = NVML_OWN_USED + FILL + r"""
import json, sys, torch
a = torch.randn(4096, 4096, device="cuda")
(a @ a).sum().item()                       # cuBLAS loads its kernels and builds its state first
chunks, refused = fill(16 * 2**20, 1024)
(a @ a).sum().item()
torch.cuda.synchronize()
print(json.dumps({"allocated": len(chunks) * 16 * 2**20, "refused": refused, "nvml_used": nvml_own_used()}))
sys.stdout.flush()
input()
"""


@pytest.mark.parametrize("conf", ["", "expandable_segments:True", "backend:cudaMallocAsync"])
def test_footprint_after_a_matmul_and_a_fill_stays_within_the_quota(tmp_path, conf):
    """The quota holds for the process's whole footprint as NVML sees it: on
    an H100 a matmul before filling a 4 GiB quota left NVML at 4134-4234 MiB
    while the shim reconciled only at memory queries (hook/README.md, "The
    footprint under the quota")."""
    quota = 4 * GIB
    with SharingExperiment(tmp_path / "exp", gpu="real") as exp:
        exp.add_group("mem", request="50%", limit="100%", memory=quota)
        proc = spawn(exp, "mem", FILL_AFTER_MATMUL, extra_env={"PYTORCH_CUDA_ALLOC_CONF": conf} if conf else None)
        report = read_json_line(proc, f"torch fill after a matmul ({conf or 'default allocator'})")
        charged = exp.admin.status().group("mem").memory_used
        proc.kill()
    used = report["nvml_used"]
    print(f"gpu-result: torch {conf or 'default allocator'} after a matmul: allocated "
          f"{report['allocated'] / MIB:.0f} MiB before {report['refused']!r}; group charged {charged / MIB:.0f} MiB; "
          f"NVML own-process used {used if used is None else f'{used / MIB:.0f} MiB'}; quota {quota / MIB:.0f} MiB")
    assert report["refused"], f"1024 x 16 MiB all fit in a {quota} byte quota: {report}"
    if used is None:
        pytest.skip("NVML lists no per-process memory here (e.g. a container without the host pid namespace)")
    assert used <= quota, f"the process holds {(used - quota) / MIB:.0f} MiB more than its quota (NVML)"
    assert used <= charged, "the process uses device memory its group is not charged for"
