"""What one unit of the real-GPU check's PyTorch workloads runs on the GPU,
as the gate sees it: each kernel, fill and copy of one torch.matmul, with
its GPU time (torch.profiler, bare: no shim). The gate counts launches and
measures GPU time per launch; a unit of several launches of very different
lengths (a GEMM and a short fill, as cuBLAS runs some shapes on Hopper) is
what its per-launch estimate must average, not follow launch by launch.

    python benchmarks/gpu/launch_pattern.py [--units mm4096h mm8192h] [--calls 8] [--out DIR]

Prints one line per GPU operation and unit, and writes DIR/launch_pattern.json."""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from gslice.workloads_torch import UNIT_SHAPES, TorchBackend


def _device_us(row) -> float:
    for name in ("self_device_time_total", "self_cuda_time_total", "device_time_total", "cuda_time_total"):
        if hasattr(row, name):
            return float(getattr(row, name))
    return 0.0


def pattern(backend: TorchBackend, unit: str, calls: int) -> tuple[list[dict], str]:
    """The GPU operations `calls` calls of `unit` ran: name, count per call
    and mean GPU time (the profiler's rows with GPU time and no CPU time of
    their own: the kernels, fills and copies, not the aten ops that launch
    them nor the profiler's own buffer requests), and the profiler's table."""
    torch = backend.torch
    for _ in range(3):
        backend.launch_unit(unit)
    backend.sync()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            backend.launch_unit(unit)
        backend.sync()
    averages = prof.key_averages()
    rows = []
    for row in averages:
        gpu_us = _device_us(row)
        if gpu_us > 0 and row.count and not getattr(row, "self_cpu_time_total", 0):
            rows.append({"name": row.key, "per_call": row.count / calls, "mean_us": gpu_us / row.count})
    try:
        table = averages.table(sort_by="self_cuda_time_total", row_limit=12)
    except Exception as exc:  # the sort key's name changed across torch versions
        table = f"(table: {type(exc).__name__}: {exc})"
    return rows, table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", nargs="+", default=["mm4096h", "mm8192h"], choices=sorted(UNIT_SHAPES))
    parser.add_argument("--calls", type=int, default=8)
    parser.add_argument("--out", default=os.environ.get("OUT") or ".")
    args = parser.parse_args()
    backend = TorchBackend()
    report = {"device": backend.torch.cuda.get_device_name(), "torch": backend.torch.__version__, "units": {}}
    for unit in args.units:
        rows, table = pattern(backend, unit, args.calls)
        report["units"][unit] = {"operations": rows, "table": table}
        print(table, flush=True)
        for row in rows:
            print(f"[launch-pattern] {unit}: {row['per_call']:.2f} per call, {row['mean_us']:9.1f} us  "
                  f"{row['name'][:110]}", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "launch_pattern.json").write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
