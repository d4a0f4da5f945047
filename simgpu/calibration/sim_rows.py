"""The calibration of the simulated GPU's context model, on the simulated GPU:
the same shapes as the real measurements, side by side with them.

- `bare` rows: no gslice. Bursts of 8 x 178 us kernels (10 +- 3 ms think) beside
  one process doing 178 us or 1505 us kernels, every 4 or never
  synchronising: the shapes h100_calibration.py measured with PyTorch on an
  H100 without gslice (h100_jitter.py -> h100-2026-11-26/jitter-*.json; fp16
  4096 and 8192 matmuls took 0.178 and 1.505 ms that day, calibration.json).
- `gslice` rows: the same bursts under the shim at high priority (think
  10 +- 3 ms) beside a low-priority process under the shim doing 178 us or
  1448 us kernels, 4 per sync or never: what benchmarks/gpu/latency_trace.py
  measured with PyTorch on an H200 with the wheel of d9f90a1 (series
  `gslice_jitter` against `alone_bare`, 300 bursts each,
  benchmarks/results/gpu/latency_trace_20261127T1413Z_h200_torch.log; fp16
  4096 and 8192 matmuls took 0.178 and 1.448 ms there, launch_pattern_*.json).
  (FIELD-NOTES section 10's gslice rows measured the wheel of 0873653, code
  long since changed: not a calibration.)

Each row: burst p50 and p99 minus the bare-alone series of the same run
(interleaved rounds), against the GPU's figure.

    .venv/bin/python simgpu/calibration/sim_rows.py [SECONDS_PER_SERIES] [ROUNDS] [bare|gslice|both]
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "python")]

from gslice.experiment import SharingExperiment  # noqa: E402

import exp_latency  # noqa: E402

H100_DIR = HERE / "h100-2026-11-26"


def _h100_jittered() -> dict:
    """h100_jitter.py's series (think 10 +- 3 ms) as {name: {"p50_ms", "p99_ms"}}."""
    result = {}
    for path in H100_DIR.glob("jitter-*.json"):
        ordered = sorted(json.loads(path.read_text()))
        result[path.stem[len("jitter-"):]] = {"p50_ms": ordered[int(0.5 * len(ordered))],
                                              "p99_ms": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]}
    return result


H100 = _h100_jittered()
# H100 bare rows: (neighbour kernel us, sync every) -> series name in calibration.json
BARE_ROWS = {(178, 4): "beside_4096_sync4", (178, 0): "beside_4096_never",
             (1505, 4): "beside_8192_sync4", (1505, 0): "beside_8192_never"}
# H200 under gslice (d9f90a1), think 10 +- 3 ms: (neighbour kernel us, sync every) -> (p50 +ms, p99 +ms,
# bursts measured), gslice_jitter minus alone_bare of the same shape in latency_trace_20261127T1413Z_h200_torch.log
GSLICE_ROWS = {(178, 4): (2.09 - 1.66, 2.59 - 1.80, 300), (1448, 4): (2.64 - 1.69, 4.05 - 1.78, 300),
               (178, 0): (2.24 - 1.70, 2.62 - 1.84, 300)}


def h100_bare(name: str) -> tuple[float, float]:
    alone_p50 = (H100["alone"]["p50_ms"] + H100["alone_again"]["p50_ms"]) / 2
    alone_p99 = (H100["alone"]["p99_ms"] + H100["alone_again"]["p99_ms"]) / 2
    return H100[name]["p50_ms"] - alone_p50, H100[name]["p99_ms"] - alone_p99


def run(seconds: float, rounds: int, which: str) -> dict:
    program = exp_latency.build_program()
    out: dict = {"load_before": os.getloadavg()}
    with SharingExperiment(gpu="sim") as exp, tempfile.TemporaryDirectory() as trace_dir:
        exp.add_group("inference", request=0.3, limit=1.0, memory="1GiB", priority="high")
        exp.add_group("batch-a", request=0.35, limit=1.0, memory="1GiB", priority="low")
        exp.add_group("batch-b", request=0.35, limit=1.0, memory="1GiB", priority="low")
        # Think 10 +- 3 ms, as h100_jitter.py measured (the fixed 10 ms locks onto the slices' phase).
        bare_runner = exp_latency.LatencyRunner(exp, program, burst_kernel_us=178, jitter_ms=3.0)
        series: dict[str, list[dict]] = {}
        part = seconds / rounds
        for _ in range(rounds):
            if which in ("bare", "both"):
                series.setdefault("bare/alone", []).append(bare_runner.bursts(part, shim=False, trace_dir=trace_dir))
                for (kernel_us, sync) in BARE_ROWS:
                    series.setdefault(f"bare/{kernel_us}us_sync{sync}", []).append(
                        bare_runner.beside(kernel_us, sync, 1, part, trace_dir, shim=False))
            if which in ("gslice", "both"):
                series.setdefault("gslice/bare", []).append(bare_runner.bursts(part, shim=False, trace_dir=trace_dir))
                for (kernel_us, sync) in GSLICE_ROWS:
                    series.setdefault(f"gslice/{kernel_us}us_sync{sync}", []).append(
                        bare_runner.beside(kernel_us, sync, 1, part, trace_dir))
        out["engine_model"] = exp_latency._engine_model(exp.sim_name)
    out["load_after"] = os.getloadavg()
    summaries = {n: exp_latency.pooled(r) for n, r in series.items()}
    out["series"] = summaries
    rows = []
    if "bare/alone" in summaries:
        alone = summaries["bare/alone"]
        for (kernel_us, sync), name in BARE_ROWS.items():
            s = summaries[f"bare/{kernel_us}us_sync{sync}"]
            h50, h99 = h100_bare(name)
            rows.append({"row": f"bare beside {kernel_us} us, sync {sync or 'never'}",
                         "sim_p50_plus": s["p50_ms"] - alone["p50_ms"], "gpu_p50_plus": h50,
                         "sim_p99_plus": s["p99_ms"] - alone["p99_ms"], "gpu_p99_plus": h99,
                         "bursts": s["bursts"], "gpu": "H100"})
    if "gslice/bare" in summaries:
        bare = summaries["gslice/bare"]
        for (kernel_us, sync), (h50, h99, h_bursts) in GSLICE_ROWS.items():
            s = summaries[f"gslice/{kernel_us}us_sync{sync}"]
            rows.append({"row": f"gslice beside {kernel_us} us, sync {sync or 'never'}",
                         "sim_p50_plus": s["p50_ms"] - bare["p50_ms"], "gpu_p50_plus": h50,
                         "sim_p99_plus": s["p99_ms"] - bare["p99_ms"], "gpu_p99_plus": h99,
                         "bursts": s["bursts"], "gpu_bursts": h_bursts, "gpu": "H200",
                         "sim_neighbours_of_idle": s.get("neighbours_of_idle"), "sim_gpu_busy": s.get("gpu_busy")})
    for row in rows:
        row["p50_ratio"] = row["sim_p50_plus"] / row["gpu_p50_plus"]
        row["p99_ratio"] = row["sim_p99_plus"] / row["gpu_p99_plus"]
    out["rows"] = rows
    return out


def main() -> int:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 12.0
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    which = sys.argv[3] if len(sys.argv) > 3 else "both"
    out = run(seconds, rounds, which)
    for row in out["rows"]:
        gpu = row["gpu"]
        print(f"{row['row']:32s} p50 +{row['sim_p50_plus']:.2f} ({gpu} +{row['gpu_p50_plus']:.2f}, "
              f"x{row['p50_ratio']:.2f})  p99 +{row['sim_p99_plus']:.2f} ({gpu} +{row['gpu_p99_plus']:.2f}, "
              f"x{row['p99_ratio']:.2f})  bursts {row['bursts']}"
              + (f"  neighbours_of_idle {row['sim_neighbours_of_idle']:.2f} busy {row['sim_gpu_busy']:.2f}"
                 if row.get("sim_neighbours_of_idle") is not None else ""))
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
