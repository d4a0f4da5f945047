"""The shim's token and memory calls on the Calls stream against unary calls
(GSLICE_CALLS_STREAM=0), in one daemon, rounds alternating, on the
calibrated simulated GPU: a diagnostic beside rpc_roundtrip (which compares
the two for bare round trips) for what the stream changes where it counts.

    python benchmarks/calls_stream_ab.py [--seconds 6] [--rounds 4] [cases...]

Cases:
- `burst:K:S:G`: latency's bursts (exp_latency.py) beside G low-priority
  neighbour groups with K us kernels synchronising every S (0: never);
  burst p50/p99 and the GPU's busy time;
- `handover:K:N`: busy's saturating groups (exp_slices.py), two groups of N
  processes with K us kernels; the GPU idle per handover (p50/p99) and busy.
Short runs on a shared machine are noisy: read the two columns of one run
against each other, not against another run."""
from __future__ import annotations

import argparse
import statistics

from gslice.experiment import SharingExperiment, busy_fraction_between

import exp_slices
from exp_latency import LatencyRunner, build_program

MODES = {"stream": "1", "unary": "0"}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def bursts(kernel_us: int, sync_every: int, groups: int, seconds: float, rounds: int) -> dict:
    latencies = {mode: [] for mode in MODES}
    busy = {mode: [] for mode in MODES}
    program = build_program()
    with SharingExperiment(gpu="sim") as exp:
        exp.add_group("inference", request=0.3, limit=1.0, memory="1GiB", priority="high")
        exp.add_group("batch-a", request=0.35, limit=1.0, memory="1GiB", priority="low")
        exp.add_group("batch-b", request=0.35, limit=1.0, memory="1GiB", priority="low")
        runner = LatencyRunner(exp, program)
        for round_index in range(rounds):
            for mode in (list(MODES) if round_index % 2 == 0 else list(MODES)[::-1]):
                exp.sim_env["GSLICE_CALLS_STREAM"] = MODES[mode]
                neighbours = runner.start_neighbours(kernel_us, sync_every, groups, seconds + 1.0)
                before = exp.sample()
                report = runner.bursts(seconds, shim=True)
                after = exp.sample()
                for process in neighbours:
                    process.wait(30)
                latencies[mode] += report["latencies_ms"][1:]  # the first pays the attach
                busy[mode].append(busy_fraction_between(before, after))
    return {mode: {"bursts": len(latencies[mode]), "p50_ms": percentile(latencies[mode], 0.5),
                   "p99_ms": percentile(latencies[mode], 0.99), "busy_%": statistics.mean(busy[mode]) * 100}
            for mode in MODES}


def handovers(kernel_us: int, processes: int, seconds: float, rounds: int) -> dict:
    gaps = {mode: {"p50": [], "p99": []} for mode in MODES}
    busy = {mode: [] for mode in MODES}
    workload = [["--kernel-us", str(kernel_us)]] * processes
    for round_index in range(rounds):
        for mode in (list(MODES) if round_index % 2 == 0 else list(MODES)[::-1]):
            run = exp_slices._run([("g1", 0.5, 1.0, workload), ("g2", 0.5, 1.0, workload)], seconds, 1.5,
                                  shim_env={"GSLICE_CALLS_STREAM": MODES[mode]})
            gaps[mode]["p50"].append(run["handoffs"]["gap_us_p50"])
            gaps[mode]["p99"].append(run["handoffs"]["gap_us_p99"])
            busy[mode].append(run["busy_fraction"] * 100)
    return {mode: {"gap_p50_us (per round)": [round(v) for v in gaps[mode]["p50"]],
                   "gap_p99_us (per round)": [round(v) for v in gaps[mode]["p99"]],
                   "busy_% (per round)": [round(v, 2) for v in busy[mode]]} for mode in MODES}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=6.0, help="per round and mode (default 6)")
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds (default 4)")
    parser.add_argument("cases", nargs="*", default=["burst:2000:0:2", "burst:250:0:1", "handover:500:4",
                                                     "handover:1000:1"])
    args = parser.parse_args()
    for case in args.cases:
        kind, *numbers = case.split(":")
        values = [int(n) for n in numbers]
        if kind == "burst" and len(values) == 3:
            figures = bursts(*values, args.seconds, args.rounds)
        elif kind == "handover" and len(values) == 2:
            figures = handovers(*values, args.seconds, args.rounds)
        else:
            parser.error(f"case {case!r}: expected burst:K:S:G or handover:K:N")
        for mode, row in figures.items():
            print(f"{case:18s} {mode:6s} " + "  ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
                                                      for k, v in row.items()), flush=True)


if __name__ == "__main__":
    main()
