"""GPU workloads through CuPy, for a real NVIDIA GPU (tests/gpu, benchmarks).

How CuPy reaches the driver (cupy-cuda12x 14.2, read from its binaries and
LD_DEBUG=symbols over the simulated libcuda.so.1):
- memory (cudaMalloc) and memory queries (cudaMemGetInfo) go through the
  CUDA runtime that CuPy links statically: it dlopens libcuda.so.1 and
  resolves the driver with cuGetProcAddress_v2; cuBLAS (matmul) launches
  its kernels through its own copy of the runtime (not measured here);
- kernel launches (RawModule / RawKernel) go through CuPy's own ctypes
  handle on libcuda.so.1: dlsym(handle, "cuLaunchKernel").
Both routes reach the shim only through its interposed dlsym, so these
workloads check what programs that never name the driver really do.

Kernels are loaded from PTX by default (the same spin kernel as
gslice.workloads), which needs only the driver's JIT; `--kernel-source cuda`
compiles the equivalent CUDA C with NVRTC instead (needs the NVRTC library,
e.g. `pip install "cupy-cuda12x[ctk]"`).

    python -m gslice.workloads_cupy spin --kernel-us 1000 --seconds 10 [--sync-every 1]
    python -m gslice.workloads_cupy matmul --size 4096 --seconds 10
    python -m gslice.workloads_cupy alloc --chunk-mib 64 --count 64 [--hold-seconds 5]
    python -m gslice.workloads_cupy launch --launches 200000 --rounds 3
    python -m gslice.workloads_cupy info

Each prints one JSON line (same keys as gslice.workloads where they overlap).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from .workloads import SPIN_PTX, add_spin_arguments

SPIN_KERNEL_NAME = "gslice_sim_sleep"
EMPTY_KERNEL_NAME = "empty"

# The smallest kernel there is, for timing the launch path alone.
EMPTY_PTX = b"""
.version 7.0
.target sm_70
.address_size 64

.visible .entry empty()
{
	ret;
}
"""

# The same two kernels in CUDA C, for --kernel-source cuda (NVRTC).
SPIN_CUDA = r"""
extern "C" __global__ void gslice_sim_sleep(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    if (ns == 0) return;
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}
"""
EMPTY_CUDA = r'extern "C" __global__ void empty() {}'

# cudaErrorMemoryAllocation: what the runtime's cudaMalloc returns when the
# driver (or the shim, over quota) answers CUDA_ERROR_OUT_OF_MEMORY.
CUDA_ERROR_MEMORY_ALLOCATION = 2


class CupyMissing(RuntimeError):
    """CuPy is not importable in this interpreter."""


def import_cupy():
    """CuPy, imported on first use so this module loads without it."""
    try:
        import cupy
    except ImportError as exc:
        raise CupyMissing(f"CuPy is not importable in {sys.executable} ({exc}); "
                          f"install it with: pip install cupy-cuda12x") from exc
    return cupy


def load_kernel(cupy, name: str, source: str, work_dir: str):
    """The kernel `name` (SPIN_KERNEL_NAME or EMPTY_KERNEL_NAME) as a CuPy
    RawKernel: from PTX through the driver's JIT (source="ptx"), or compiled
    from CUDA C by NVRTC (source="cuda"). `work_dir` must outlive the kernel
    (CuPy may load the PTX file lazily)."""
    ptx = {SPIN_KERNEL_NAME: SPIN_PTX, EMPTY_KERNEL_NAME: EMPTY_PTX}
    cuda = {SPIN_KERNEL_NAME: SPIN_CUDA, EMPTY_KERNEL_NAME: EMPTY_CUDA}
    if name not in ptx:
        raise ValueError(f"kernel {name!r} is not one of {sorted(ptx)}")
    if source == "cuda":
        return cupy.RawKernel(cuda[name], name)
    if source != "ptx":
        raise ValueError(f"kernel source {source!r} is not one of 'ptx', 'cuda'")
    path = Path(work_dir) / f"{name}.ptx"
    path.write_bytes(ptx[name].rstrip(b"\0"))
    return cupy.RawModule(path=str(path)).get_function(name)


def spin(kernel_us: float, seconds: float, sync_every: int, blocks: int, start_at: float | None = None,
         kernel_source: str = "ptx") -> dict:
    """Launch `kernel_us` kernels back to back for `seconds` of wall time,
    synchronising every `sync_every` launches (0: only at the end).
    `start_at` (epoch seconds) lines several processes up on one instant;
    `first_launch_at` is when the first launch returned (under the shim:
    about when the process first held the token)."""
    cupy = import_cupy()
    import numpy
    with tempfile.TemporaryDirectory(prefix="gslice-cupy-") as work_dir:
        kernel = load_kernel(cupy, SPIN_KERNEL_NAME, kernel_source, work_dir)
        stream = cupy.cuda.Stream(non_blocking=True)
        args = (numpy.uint64(int(kernel_us * 1000)),)
        with stream:
            kernel((1,), (1,), (numpy.uint64(0),))  # loads the module and creates the context
            stream.synchronize()
            ready_at = time.time()
            if start_at is not None:
                time.sleep(max(0.0, start_at - time.time()))
            kernel((blocks,), (1,), args)
            first_launch_at = time.time()
            launched = 1
            start = time.monotonic()
            deadline = start + seconds
            while time.monotonic() < deadline:
                for _ in range(max(1, sync_every) if sync_every else 32):
                    kernel((blocks,), (1,), args)
                    launched += 1
                if sync_every:
                    stream.synchronize()
            stream.synchronize()
            elapsed = time.monotonic() - start
    return {"kernels": launched, "kernel_us": kernel_us, "seconds": elapsed, "ready_at": ready_at,
            "first_launch_at": first_launch_at, "pid": os.getpid()}


def matmul(size: int, seconds: float) -> dict:
    """float32 `size` x `size` matrix products (cuBLAS) for `seconds`, each
    waited for; reports TFLOP/s. The inputs are copied from the host, so the
    GPU work is cuBLAS's kernels."""
    cupy = import_cupy()
    import numpy
    rng = numpy.random.default_rng(0)
    a = cupy.asarray(rng.standard_normal((size, size), dtype=numpy.float32))
    b = cupy.asarray(rng.standard_normal((size, size), dtype=numpy.float32))
    c = cupy.empty((size, size), dtype=numpy.float32)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        cupy.matmul(a, b, out=c)  # warm-up: cuBLAS handle, workspace, kernel choice
        stream.synchronize()
        products = 0
        start = time.monotonic()
        deadline = start + seconds
        while time.monotonic() < deadline:
            cupy.matmul(a, b, out=c)
            stream.synchronize()
            products += 1
        elapsed = time.monotonic() - start
    flops = 2.0 * size ** 3 * products
    return {"products": products, "size": size, "seconds": elapsed, "tflops": flops / elapsed / 1e12,
            "pid": os.getpid()}


def alloc(chunk_mib: int, count: int, hold_seconds: float) -> dict:
    """Allocate up to `count` chunks of `chunk_mib` MiB with cudaMalloc (CuPy's
    memory pool off, so every allocation and free reaches the driver),
    stopping at the first out-of-memory; print what was held and what
    cudaMemGetInfo said, hold it `hold_seconds`, free it."""
    cupy = import_cupy()
    cupy.cuda.set_allocator(None)
    chunk = chunk_mib << 20
    held = []
    refused = 0
    refused_with = ""
    for _ in range(count):
        try:
            held.append(cupy.cuda.alloc(chunk))
        except cupy.cuda.memory.OutOfMemoryError as exc:
            refused, refused_with = 1, f"{type(exc).__name__}: {exc}"
            break
        except cupy.cuda.runtime.CUDARuntimeError as exc:
            if exc.status != CUDA_ERROR_MEMORY_ALLOCATION:
                raise
            refused, refused_with = 1, f"{type(exc).__name__}: {exc}"
            break
    free, total = cupy.cuda.runtime.memGetInfo()
    result = {"allocated_bytes": len(held) * chunk, "chunks": len(held), "refused": refused,
              "refused_with": refused_with, "mem_free": free, "mem_total": total, "pid": os.getpid()}
    print(json.dumps(result), flush=True)
    time.sleep(hold_seconds)
    del held[:]  # MemoryPointer deletion is cudaFree with the pool off
    cupy.cuda.runtime.deviceSynchronize()
    return result


def launch(launches: int, rounds: int, kernel_source: str = "ptx") -> dict:
    """Time `launches` launches of an empty kernel, `rounds` times; the cost
    per launch (ns) includes CuPy's Python call path, so compare runs of this
    same workload (with and without the shim), not absolute numbers."""
    cupy = import_cupy()
    with tempfile.TemporaryDirectory(prefix="gslice-cupy-") as work_dir:
        kernel = load_kernel(cupy, EMPTY_KERNEL_NAME, kernel_source, work_dir)
        stream = cupy.cuda.Stream(non_blocking=True)
        grid, block, args = (1,), (1,), ()
        per_launch: list[float] = []
        with stream:
            for _ in range(1000):  # warm-up: module load, context, the shim's first token
                kernel(grid, block, args)
            stream.synchronize()
            for _ in range(rounds):
                start = time.perf_counter_ns()
                for _ in range(launches):
                    kernel(grid, block, args)
                stream.synchronize()
                per_launch.append((time.perf_counter_ns() - start) / launches)
    return {"launches": launches, "rounds": rounds, "ns_per_launch_best": min(per_launch),
            "ns_per_launch_median": statistics.median(per_launch), "ns_per_launch_rounds": per_launch,
            "pid": os.getpid()}


def info() -> dict:
    """The device CuPy sees and its memory (under the shim: the group's view)."""
    cupy = import_cupy()
    runtime = cupy.cuda.runtime
    name = runtime.getDeviceProperties(0)["name"]
    free, total = runtime.memGetInfo()
    return {"device_name": name.decode() if isinstance(name, bytes) else str(name),
            "device_count": runtime.getDeviceCount(), "driver_version": runtime.driverGetVersion(),
            "runtime_version": runtime.runtimeGetVersion(), "cupy_version": cupy.__version__,
            "mem_free": free, "mem_total": total, "pid": os.getpid()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gslice.workloads_cupy", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="kind", required=True)
    p_spin = add_spin_arguments(sub.add_parser("spin", help="saturate the GPU with fixed-length kernels (RawKernel)"))
    p_spin.add_argument("--kernel-source", choices=("ptx", "cuda"), default="ptx")
    p_matmul = sub.add_parser("matmul", help="float32 matrix products with cuBLAS; reports TFLOP/s")
    p_matmul.add_argument("--size", type=int, default=4096)
    p_matmul.add_argument("--seconds", type=float, default=10.0)
    p_alloc = sub.add_parser("alloc", help="cudaMalloc chunks until refused")
    p_alloc.add_argument("--chunk-mib", type=int, default=64)
    p_alloc.add_argument("--count", type=int, default=64)
    p_alloc.add_argument("--hold-seconds", type=float, default=0.0)
    p_launch = sub.add_parser("launch", help="time launches of an empty kernel")
    p_launch.add_argument("--launches", type=int, default=200_000)
    p_launch.add_argument("--rounds", type=int, default=3)
    p_launch.add_argument("--kernel-source", choices=("ptx", "cuda"), default="ptx")
    sub.add_parser("info", help="device name, driver version, memory")
    args = parser.parse_args(argv)
    for name in ("kernel_us", "seconds", "blocks", "size", "chunk_mib", "count", "launches", "rounds"):
        value = getattr(args, name, None)
        if value is not None and value <= 0:
            parser.error(f"--{name.replace('_', '-')} must be positive, got {value}")
    try:
        if args.kind == "spin":
            report = spin(args.kernel_us, args.seconds, args.sync_every, args.blocks, args.start_at,
                          args.kernel_source)
        elif args.kind == "matmul":
            report = matmul(args.size, args.seconds)
        elif args.kind == "alloc":
            alloc(args.chunk_mib, args.count, args.hold_seconds)  # prints its line before holding
            return 0
        elif args.kind == "launch":
            report = launch(args.launches, args.rounds, args.kernel_source)
        else:
            report = info()
    except CupyMissing as exc:
        print(f"gslice.workloads_cupy: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
