"""What the simulated GPU's context model is calibrated against, measured on
a real GPU without gslice (no shim, no daemon): how the GPU shares itself
between two processes' contexts.

Part A (needs nvcc): simgpu/calibration/timeslice_probe.cu. A probe kernel
records every stretch when its context was switched out; beside a second
probe, or beside a process launching spin kernels, the stretches give the
time slice, the switch cost, and whether a switch waits for a kernel to end.

Part B (needs PyTorch): the FIELD-NOTES section 10 latency shapes, bare:
bursts of 8 fp16 4096x4096 matmuls with 10 ms think, alone and beside a
process doing 4096 or 8192 fp16 matmuls (4 per sync, or never syncing).

    python simgpu/calibration/h100_calibration.py OUT_DIR

Writes OUT_DIR/calibration.json (a summary, rewritten after each part, so
a run cut short keeps what it measured) and the raw outputs beside it.
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROWS = HERE / "h100_rows.py"


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else None


def gap_summary(report: dict) -> dict:
    """Stretches the probe was switched out (gaps) and ran (runs), in us."""
    gaps = [(b - a) / 1e3 for a, b in report["gaps"]]
    edges = [report["start"]] + [x for pair in report["gaps"] for x in pair] + [report["end"]]
    runs = [(edges[i + 1] - edges[i]) / 1e3 for i in range(0, len(edges) - 1, 2)]
    inner = runs[1:-1] if len(runs) > 2 else []
    return {"span_ms": (report["end"] - report["start"]) / 1e6, "gaps": len(gaps),
            "gap_us_p10": percentile(gaps, 0.1), "gap_us_p50": percentile(gaps, 0.5),
            "gap_us_p90": percentile(gaps, 0.9), "run_us_p10": percentile(inner, 0.1),
            "run_us_p50": percentile(inner, 0.5), "run_us_p90": percentile(inner, 0.9),
            "first_gaps_us": [round(g, 1) for g in gaps[:12]], "first_runs_us": [round(r, 1) for r in inner[:12]]}


def part_a(out: Path, summary: dict) -> None:
    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").exists() else None)
    if not nvcc:
        summary["part_a"] = "skipped: no nvcc"
        return
    binary = out / "timeslice_probe"
    t0 = time.monotonic()
    built = subprocess.run([nvcc, "-O2", "-o", str(binary), str(HERE / "timeslice_probe.cu")],
                           capture_output=True, text=True)
    summary["part_a_build_s"] = round(time.monotonic() - t0, 1)
    if built.returncode != 0:
        summary["part_a"] = f"nvcc failed: {built.stderr[-2000:]}"
        return
    results = {}

    def probe(name: str, beside: list[str] | None, probe_ms: float = 300, pair: bool = False):
        neighbour = None
        if beside:
            neighbour = subprocess.Popen([str(binary), "spinner", *beside], stdout=subprocess.PIPE, text=True)
            neighbour.stdout.readline()  # "ready"
            time.sleep(0.3)
        procs = [subprocess.Popen([str(binary), "probe", str(probe_ms), "3"], stdout=subprocess.PIPE, text=True)
                 for _ in range(2 if pair else 1)]
        reports = []
        for p in procs:
            text, _ = p.communicate(timeout=60)
            (out / f"probe-{name}-{p.pid}.json").write_text(text)
            reports.append(json.loads(text))
        if neighbour:
            neighbour.kill()
            neighbour.wait()
        results[name] = [gap_summary(r) for r in reports]
        summary["part_a"] = results
        (out / "calibration.json").write_text(json.dumps(summary, indent=1))

    for name, beside, pair in (("alone", None, False), ("two_probes", None, True),
                               ("beside_spin_200us_never_sync", ["200", "3", "0"], False),
                               ("beside_spin_200us_sync4", ["200", "3", "4"], False),
                               ("beside_spin_2000us_never_sync", ["2000", "3", "0"], False),
                               ("beside_spin_20000us_never_sync", ["20000", "3", "0"], False)):
        try:
            probe(name, beside, pair=pair)
        except Exception as error:  # keep the other scenarios
            results[name] = f"failed: {error!r}"


def part_b(out: Path, summary: dict) -> None:
    results = {}
    summary["part_b"] = results
    timing = subprocess.run([sys.executable, str(ROWS), "kernels"], capture_output=True, text=True, timeout=120)
    results["kernel_ms"] = json.loads(timing.stdout.strip().splitlines()[-1]) if timing.returncode == 0 else timing.stderr[-1500:]

    def series(name: str, count: int, neighbour: list[str] | None):
        n = None
        if neighbour:
            n = subprocess.Popen([sys.executable, str(ROWS), "neighbour", *neighbour], stdout=subprocess.PIPE,
                                 text=True)
            n.stdout.readline()  # "ready"
        b = subprocess.run([sys.executable, str(ROWS), "bursts", str(count)], capture_output=True, text=True,
                           timeout=200)
        if n:
            n.kill()
            n.wait()
        if b.returncode != 0:
            results[name] = f"failed: {b.stderr[-1500:]}"
            return
        latencies = json.loads(b.stdout.strip().splitlines()[-1])["latencies_ms"]
        (out / f"bursts-{name}.json").write_text(json.dumps(latencies))
        results[name] = {"bursts": len(latencies), "p50_ms": percentile(latencies, 0.5),
                         "p90_ms": percentile(latencies, 0.9), "p99_ms": percentile(latencies, 0.99),
                         "max_ms": max(latencies), "mean_ms": statistics.fmean(latencies)}
        (out / "calibration.json").write_text(json.dumps(summary, indent=1))

    for name, count, neighbour in (("alone", 500, None),
                                   ("beside_4096_sync4", 1000, ["4096", "4"]),
                                   ("beside_8192_sync4", 1000, ["8192", "4"]),
                                   ("beside_8192_never", 300, ["8192", "0"]),
                                   ("beside_4096_never", 300, ["4096", "0"]),
                                   ("alone_again", 500, None)):
        try:
            series(name, count, neighbour)
        except Exception as error:
            results[name] = f"failed: {error!r}"


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    summary: dict = {"started": time.time()}
    try:
        import subprocess as sp
        summary["gpu"] = sp.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.max.sm,compute_mode",
                                 "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
        summary["compute_policy"] = sp.run(["nvidia-smi", "compute-policy", "-l"], capture_output=True,
                                           text=True).stdout.strip()[-1500:]
    except Exception as error:
        summary["gpu"] = repr(error)
    for part in (part_a, part_b):
        t0 = time.monotonic()
        try:
            part(out, summary)
        except Exception as error:
            summary[part.__name__ + "_error"] = repr(error)
        summary[part.__name__ + "_s"] = round(time.monotonic() - t0, 1)
        (out / "calibration.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
