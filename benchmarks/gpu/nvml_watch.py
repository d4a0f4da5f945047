"""NVML, read in a process of its own (so the simulated GPU's NVML can be put
in front with LD_LIBRARY_PATH, and a driver call that hangs takes only this
process down). Times are time.monotonic(), one clock for every process of
the machine.

    python nvml_watch.py clocks --interval 0.05      # until stdin closes
    python nvml_watch.py pid-gone PID --seconds 2    # when NVML stops listing PID
    python nvml_watch.py processes                   # per-process used memory now

Each prints one JSON line at the end ("pid-gone" also prints one when it
first sees the process listed, so the caller knows the watch is live)."""
from __future__ import annotations

import argparse
import json
import select
import sys
import time


def device():
    import pynvml
    pynvml.nvmlInit()
    return pynvml, pynvml.nvmlDeviceGetHandleByIndex(0)


def processes(pynvml, handle) -> dict[int, int | None]:
    listed = {}
    for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
        listed[int(proc.pid)] = proc.usedGpuMemory
    return listed


def clocks(interval: float) -> dict:
    """SM clock (MHz), power (W), utilization (%) every `interval` s until stdin closes."""
    pynvml, handle = device()
    samples, errors = [], {}

    def read(name, fn):
        try:
            return fn()
        except Exception as exc:  # a figure this NVML does not give
            errors.setdefault(name, f"{type(exc).__name__}: {exc}")
            return None

    while True:
        t = time.monotonic()
        sm = read("sm_clock", lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM))
        power = read("power", lambda: pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0)
        util = read("utilization", lambda: pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
        temp = read("temperature", lambda: pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU))
        samples.append([round(t, 4), sm, power, util, temp])
        ready, _, _ = select.select([sys.stdin], [], [], interval)
        if ready and not sys.stdin.readline():
            break
    return {"columns": ["t", "sm_clock_mhz", "power_w", "util_pct", "temp_c"], "samples": samples, "errors": errors}


def pid_gone(pid: int, seconds: float) -> dict:
    """Poll NVML's process list as fast as it answers; report when `pid` is
    last and first no longer listed, and the poll interval achieved."""
    pynvml, handle = device()
    first = processes(pynvml, handle)
    print(json.dumps({"watching": True, "listed": pid in first, "used": first.get(pid)}), flush=True)
    last_seen, gone_at, polls = (time.monotonic() if pid in first else None), None, 1
    start = time.monotonic()
    deadline = start + seconds
    while time.monotonic() < deadline:
        now = time.monotonic()
        listed = processes(pynvml, handle)
        polls += 1
        if pid in listed:
            last_seen, gone_at = now, None
        elif gone_at is None and last_seen is not None:
            gone_at = now
        time.sleep(0.0005)
    return {"pid": pid, "last_seen": last_seen, "gone_at": gone_at, "polls": polls,
            "poll_interval_ms": (time.monotonic() - start) * 1e3 / max(1, polls - 1)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="kind", required=True)
    p_clocks = sub.add_parser("clocks")
    p_clocks.add_argument("--interval", type=float, default=0.05)
    p_gone = sub.add_parser("pid-gone")
    p_gone.add_argument("pid", type=int)
    p_gone.add_argument("--seconds", type=float, default=2.0)
    sub.add_parser("processes")
    args = parser.parse_args(argv)
    if args.kind == "clocks":
        report = clocks(args.interval)
    elif args.kind == "pid-gone":
        report = pid_gone(args.pid, args.seconds)
    else:
        pynvml, handle = device()
        report = {"processes": {str(k): v for k, v in processes(pynvml, handle).items()}}
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
