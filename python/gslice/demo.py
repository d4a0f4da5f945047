"""The sharing demo: two groups share one GPU under tokend.

    python -m gslice.demo [--seconds 10] [--gpu auto|sim|real]

"training" asks for 70% of the GPU and "inference" for 30%; each runs a
process that would happily take the whole GPU. Every second the demo
prints what each group really got; then it shows the memory quota: a
process of "inference" (quota 1 GiB) allocates 256 MiB chunks until the
shim refuses, and reports what the group is charged (the chunks plus its
CUDA context's reserve) and what cuMemGetInfo says inside the group.
Runs on the real NVIDIA GPU when one is present, else on the simulated GPU.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

from .experiment import SharingExperiment, busy_fraction_between, shares_between

GROUPS = [
    # name, request, limit, memory
    ("training", 0.70, 1.0, "2GiB"),
    ("inference", 0.30, 1.0, "1GiB"),
]


def _bar(fraction: float, width: int = 30) -> str:
    filled = round(max(0.0, min(1.0, fraction)) * width)
    return "#" * filled + "." * (width - filled)


def _reserve_setting() -> str:
    value = os.environ.get("GSLICE_CONTEXT_RESERVE_MIB")
    return f"set to {value} here" if value else "not set here, so the shim's default"


def run(seconds: float, gpu: str, kernel_us: float) -> int:
    with SharingExperiment(gpu=gpu) as exp:
        where = "simulated GPU" if exp.gpu == "sim" else "NVIDIA GPU"
        status = exp.admin.status()
        print(f"gslice demo on the {where} {status.gpu_name!r} ({status.gpu_uuid})")
        for name, request, limit, memory in GROUPS:
            exp.add_group(name, request=request, limit=limit, memory=memory)
            print(f"  group {name:<10} request {request:4.0%}  limit {limit:4.0%}  memory {memory}")
        for name, *_ in GROUPS:
            exp.spawn_workload(name, ["spin", "--kernel-us", str(kernel_us), "--seconds", str(seconds + 1)])
        print(f"\nboth groups saturate the GPU with {kernel_us:g} us kernels for {seconds:g} s:\n")
        time.sleep(0.5)  # let both attach before measuring
        first = exp.sample() if exp.gpu == "sim" else None
        previous = first
        for _ in range(int(seconds)):
            time.sleep(1.0)
            if exp.gpu == "sim":
                now = exp.sample()
                shares = shares_between(previous, now)
                previous = now
            else:
                shares = exp.window_shares()
            line = "  ".join(f"{g} {shares.get(g, 0):5.1%} {_bar(shares.get(g, 0), 20)}" for g, *_ in GROUPS)
            print(f"  t={time.monotonic() - first.at if first else 0:4.1f}s  {line}", flush=True)
        codes = exp.wait_all(timeout=60)
        print("\nover the whole run:")
        if exp.gpu == "sim":
            # The measured seconds only: after them the workloads end one by
            # one, and the last one left runs alone.
            totals = shares_between(first, previous)
            busy = busy_fraction_between(first, previous)
        else:
            totals, busy = exp.window_shares(), None
        for name, request, *_ in GROUPS:
            got = totals.get(name, 0.0)
            print(f"  {name:<10} asked {request:5.1%}  got {got:5.1%}  ({(got - request) * 100:+.1f} points)")
        if busy is not None:
            print(f"  GPU busy {busy:.1%} of the time")

        print("\nmemory quota: 'inference' (1 GiB) allocates 256 MiB chunks until refused:")
        # The workload reports, then holds its chunks for a second: long
        # enough to read the group's charge from tokend while it holds them.
        proc = exp.spawn_workload("inference", ["alloc", "--chunk-mib", "256", "--count", "8", "--hold-seconds", "1"])
        result = json.loads(proc.stdout.readline())
        group = exp.admin.status().group("inference")
        proc.communicate(timeout=60)
        print(f"  allocated {result['chunks']} chunks ({result['allocated_bytes'] >> 20} MiB), "
              f"then CUDA_ERROR_OUT_OF_MEMORY" if result["refused"] else
              f"  allocated {result['chunks']} chunks, none refused")
        print(f"  charged to the group meanwhile: {group.memory_used >> 20} MiB of its "
              f"{group.group.memory_quota >> 20} MiB quota = {result['allocated_bytes'] >> 20} MiB of chunks "
              f"+ {(group.memory_used - result['allocated_bytes']) >> 20} MiB context reserve")
        print(f"  (the context reserve: device memory a CUDA context uses that no allocation shows, its state,\n"
              f"   module code, heap and stacks; the shim charges it to the group when the process creates its\n"
              f"   context: GSLICE_CONTEXT_RESERVE_MIB, {_reserve_setting()})")
        print(f"  cuMemGetInfo inside the group: total {result['mem_total'] >> 20} MiB, "
              f"free {result['mem_free'] >> 20} MiB")
        failed = [c for cs in codes.values() for c in cs if c != 0]
        if failed:
            print(f"\nsome workload processes failed: exit codes {codes}", file=sys.stderr)
            return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gslice.demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--gpu", choices=["auto", "sim", "real"], default="auto")
    parser.add_argument("--kernel-us", type=float, default=1000.0)
    args = parser.parse_args(argv)
    return run(args.seconds, args.gpu, args.kernel_us)


if __name__ == "__main__":
    sys.exit(main())
