"""What anticipation buys and costs, on the calibrated simulated GPU (issue
23): the latency section's bursts beside one low-priority neighbour, with
tokend's `--anticipate-preemption` on (the default) and off, and both bare
for reference, in interleaved rounds (a fresh tokend per round and setting).

    python benchmarks/anticipation_ab.py [--rounds 3] [--seconds 3] [--cases 250:0 2000:4]
                                         [--thinks 10:0 10:3] [--settings ...] [--out FILE.json]

Per case (neighbour kernel length and sync; think fixed at 10 ms or 10 +- 3
ms): the bursts' p50 / p99 minus the bare bursts alone of the same round,
the GPU's busy fraction and the neighbour's part of the time the bursts
leave idle (the simulated GPU's own accounting: a context switch is idle).
Anticipation keeps the neighbour from starting work that would still run
when a burst is expected; the GPU time left idle waiting for the burst is
its price, at most a kernel plus the expected window (tokend/scheduler.py,
Anticipation). Short runs on a shared machine are noisy: read a case's
settings against each other, round by round (both are listed)."""
from __future__ import annotations

import argparse
import json
import sys

from gslice.experiment import SharingExperiment

import exp_latency
from handoff_gaps import percentile

CASES = [(250, 0), (2000, 4)]        # neighbour kernel (us), sync every (0: never)
THINKS = [(10.0, 0.0), (10.0, 3.0)]  # think (ms), jitter (ms)
SETTINGS = {"anticipation": ["--anticipate-preemption", "on"],
            "no_anticipation": ["--anticipate-preemption", "off"],
            "both_bare": []}


def one_round(program, setting: str, seconds: float, cases=CASES, thinks=THINKS) -> dict:
    """Each case and think once under `setting`, with the bare bursts alone
    they are read against."""
    shim = setting != "both_bare"
    out = {}
    with SharingExperiment(gpu="sim", tokend_args=SETTINGS[setting]) as exp:
        exp.add_group("inference", request=0.3, limit=1.0, memory="1GiB", priority="high")
        exp.add_group("batch-a", request=0.7, limit=1.0, memory="1GiB", priority="low")
        for think, jitter in thinks:
            runner = exp_latency.LatencyRunner(exp, program, think_ms=think, jitter_ms=jitter)
            alone = runner.bursts(seconds / 2, shim=False)["latencies_ms"][1:]
            for kernel_us, sync in cases:
                report = runner.beside(kernel_us, sync, 1, seconds, None, shim=shim)
                out[f"{kernel_us}us_sync{sync}_think{think:g}+-{jitter:g}"] = {
                    "alone_ms": alone, "beside_ms": report["latencies_ms"][1:],
                    "gpu_busy": report["gpu_busy"], "neighbours_of_idle": report["neighbours_of_idle"]}
    return out


def summarise(rounds: dict[str, list[dict]]) -> dict:
    table = {}
    for setting, runs in rounds.items():
        for case in runs[0]:
            alone = sorted(x for r in runs for x in r[case]["alone_ms"])
            beside = sorted(x for r in runs for x in r[case]["beside_ms"])
            table.setdefault(case, {})[setting] = {
                "bursts": len(beside),
                "p50_minus_alone_ms": percentile(beside, 0.5) - percentile(alone, 0.5),
                "p99_minus_alone_ms": percentile(beside, 0.99) - percentile(alone, 0.99),
                "gpu_busy_by_round": [round(r[case]["gpu_busy"], 3) for r in runs],
                "neighbours_of_idle_by_round": [round(r[case]["neighbours_of_idle"], 3) for r in runs]}
    return table


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0, help="bursts per case, round and setting (s)")
    parser.add_argument("--cases", nargs="+", default=[f"{k}:{s}" for k, s in CASES],
                        help="neighbours, KERNEL_US:SYNC_EVERY (0: never)")
    parser.add_argument("--thinks", nargs="+", default=[f"{t:g}:{j:g}" for t, j in THINKS],
                        help="the bursts' think, MS:JITTER_MS")
    parser.add_argument("--settings", nargs="+", choices=sorted(SETTINGS), default=list(SETTINGS))
    parser.add_argument("--out", help="write the rounds and the table here (JSON)")
    args = parser.parse_args(argv)
    program = exp_latency.build_program()
    pairs = lambda texts, kind: [tuple(kind(x) for x in t.split(":")) for t in texts]  # noqa: E731
    cases, thinks = pairs(args.cases, int), pairs(args.thinks, float)
    rounds: dict[str, list[dict]] = {s: [] for s in args.settings}
    for _ in range(args.rounds):
        for setting in args.settings:
            rounds[setting].append(one_round(program, setting, args.seconds, cases, thinks))
    table = summarise(rounds)
    for case, settings in table.items():
        print(case)
        for setting, s in settings.items():
            print(f"  {setting:16} n={s['bursts']:4} p50 {s['p50_minus_alone_ms']:+.2f} p99 {s['p99_minus_alone_ms']:+.2f} "
                  f"ms over alone; GPU busy {s['gpu_busy_by_round']}, neighbour's part of the idle "
                  f"{s['neighbours_of_idle_by_round']}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"rounds": rounds, "table": table, "settings": SETTINGS}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
