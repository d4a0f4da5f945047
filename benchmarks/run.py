"""Run gslice's benchmarks: `./scripts/bench` (or python benchmarks/run.py).

    python benchmarks/run.py                  # every experiment, full length
    python benchmarks/run.py --only share_accuracy,priority
    python benchmarks/run.py --smoke          # seconds-long versions (the test suite runs this)

Writes benchmarks/results/<experiment>.json (with the commit measured: see
results_io) and PNG plots next to them, then regenerates the figures section
of docs/benchmarks.md. The micro-benchmarks (scheduler decisions/s, daemon
round trip from Python) are pytest-benchmark tests in this folder; they run
here too and land in micro.json.

Exit status: 0 when every target was met; 1 when any was missed or a result
is untrustworthy (a comparison against bare without its bare-against-bare
noise figure). The results are written either way, as measured; the docs
are rewritten only when nothing missed, or with --write-docs-anyway. Smoke
runs write to build/bench-smoke/ unless --out says otherwise, mark their
files as smoke, and never touch the docs.
"""
from __future__ import annotations

import argparse
import json
import traceback
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import exp_latency  # noqa: E402
import exp_launch_overhead  # noqa: E402
import exp_memory  # noqa: E402
import exp_priority  # noqa: E402
import exp_rpc_roundtrip  # noqa: E402
import exp_scale  # noqa: E402
import exp_shares  # noqa: E402
import exp_soak  # noqa: E402
import exp_slices  # noqa: E402
import exp_throughput  # noqa: E402
import plots  # noqa: E402
import report  # noqa: E402
import results_io  # noqa: E402


def micro(smoke: bool):
    out = HERE / "results" / ".pytest-benchmark.tmp"
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(HERE / "test_core_bench.py"),
            str(HERE / "test_daemon_bench.py"), "--benchmark-only", f"--benchmark-json={out}"]
    if smoke:
        args += ["--benchmark-min-rounds=1", "--benchmark-max-time=0.2"]
    subprocess.run(args, check=True, cwd=HERE.parent)
    data = json.loads(out.read_text())
    out.unlink()
    result = results_io.Result("micro", device="none (CPU only)")
    for bench in data["benchmarks"]:
        extra = bench.get("extra_info", {})
        for key, value in extra.items():
            if isinstance(value, (int, float)):
                target = results_io.at_least(50_000) if key == "decisions_per_second" else None
                unit = "1/s" if key.endswith("_per_second") else key.rsplit("_", 1)[-1] if key.endswith(("_ms", "_us")) \
                    else "count"
                result.add(f"{bench['name']}/{key}", value, unit, target)
        # The daemon round trip from Python: p50 < 1 ms (docs/benchmarks.md).
        target = results_io.at_most(1000) if bench["name"] == "test_acquire_release_round_trip" else None
        result.add(f"{bench['name']}/median", bench["stats"]["median"] * 1e6, "us", target)
    return result


# name -> (full run, smoke run)
EXPERIMENTS = {
    "micro": (lambda: micro(False), lambda: micro(True)),
    "launch_overhead": (lambda: exp_launch_overhead.launch_overhead(),
                        lambda: exp_launch_overhead.launch_overhead(launches=200_000, repeats=3)),
    "rpc_roundtrip": (lambda: exp_rpc_roundtrip.rpc_roundtrip(), lambda: exp_rpc_roundtrip.rpc_roundtrip(calls=200)),
    "share_accuracy": (lambda: exp_shares.share_accuracy(),
                       lambda: exp_shares.share_accuracy(seconds=2, warmup=0.5,
                                                         splits={"30-70": exp_shares.SPLITS["30-70"]},
                                                         shapes={"long-5ms": exp_shares.SHAPES["long-5ms"]})),
    "work_conservation": (lambda: exp_shares.work_conservation(), lambda: None),
    "priority": (lambda: exp_priority.priority(), lambda: None),
    "memory_races": (lambda: exp_memory.memory_races(), lambda: exp_memory.memory_races(trials=1)),
    "memory_kill_reclaim": (lambda: exp_memory.kill_reclaim(), lambda: exp_memory.kill_reclaim(trials=1)),
    "scale": (lambda: exp_scale.scale(), lambda: None),
    "startup": (lambda: exp_scale.startup(), lambda: exp_scale.startup(processes=4)),
    # The suite's short form is tests/integration/test_soak_short.py.
    "soak": (lambda: exp_soak.soak(), lambda: None),
    # issues 8, 13, 14: no throughput tax, exact shares for long work, smooth caps, latency
    "throughput": (lambda: exp_throughput.throughput(),
                   lambda: exp_throughput.throughput(seconds=1.0, warmup=0.5, rounds=1, kernels_us=[1000], streams=2)),
    "busy": (lambda: exp_slices.busy(), lambda: exp_slices.busy(seconds=1.5, warmup=0.5)),
    "long_work": (lambda: exp_slices.long_work(),
                  lambda: exp_slices.long_work(seconds=1.0, warmup=0.5, long_kernel_us=100_000)),
    "smooth_cap": (lambda: exp_slices.smooth_cap(),
                   lambda: exp_slices.smooth_cap(seconds=2.0, warmup=0.3, long_kernel_us=100_000, long_warmup=1.0)),
    # The smoke run: both kinds of target (a short and a long neighbour kernel), one and two groups.
    "latency": (lambda: exp_latency.latency(),
                lambda: exp_latency.latency(seconds=1.5, rounds=2,
                                            cases=[exp_latency.Case(250, 4, 1), exp_latency.Case(2000, 0, 2)])),
}


SMOKE_OUT = HERE.parent / "build" / "bench-smoke" / "results"


def main(argv: list[str] | None = None, experiments: dict | None = None) -> int:
    experiments = EXPERIMENTS if experiments is None else experiments
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="", help=f"comma-separated subset of: {', '.join(experiments)}")
    parser.add_argument("--smoke", action="store_true", help="short versions, to check the command works")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"results folder (default {results_io.RESULTS_DIR}; with --smoke {SMOKE_OUT})")
    parser.add_argument("--docs", type=Path, default=report.DOC, help="the document whose figures are regenerated")
    parser.add_argument("--no-report", action="store_true", help="do not rewrite the docs")
    parser.add_argument("--write-docs-anyway", action="store_true",
                        help="rewrite the docs even when a target was missed (the exit status still says so)")
    args = parser.parse_args(argv)
    out = args.out or (SMOKE_OUT if args.smoke else results_io.RESULTS_DIR)
    names = [n for n in args.only.split(",") if n] or list(experiments)
    unknown = [n for n in names if n not in experiments]
    if unknown:
        parser.error(f"unknown experiment(s) {unknown}; expected some of {list(experiments)}")
    failed = []   # "experiment: what" for each missed target, untrustworthy figure or crash
    for name in names:
        started = time.monotonic()
        print(f"== {name}", flush=True)
        try:
            result = experiments[name][1 if args.smoke else 0]()
        except Exception:  # noqa: BLE001 - one experiment's crash must not hide the others' figures
            traceback.print_exc()
            failed.append(f"{name}: crashed (traceback above)")
            continue
        if result is None:
            print("   (no smoke version; skipped)")
            continue
        path = results_io.write(result, out, smoke=args.smoke)
        saved = json.loads(path.read_text())
        saved["plots"] = plots.plot(saved, out)
        path.write_text(json.dumps(saved, indent=2) + "\n")
        by_name = {m.name: m for m in result.metrics}
        for m in result.metrics:
            flag = {True: "ok  ", False: "MISS", None: "    "}[m.met]
            noise = f"  (bare vs bare: {by_name[m.noise].value:.4g})" if m.noise in by_name else ""
            print(f"   {flag} {m.name} = {m.value:.4g} {m.unit} {m.target or ''}{noise}")
        failed += [f"{name}: {m.name} = {m.value:.4g} {m.unit}, target {m.target}" for m in result.missed()]
        for problem in result.problems():
            print(f"   BAD  {problem}")
            failed.append(f"{name}: {problem}")
        print(f"   ({time.monotonic() - started:.0f} s) -> {path}", flush=True)
    if failed:
        print(f"targets missed or figures untrustworthy ({len(failed)}):\n  " + "\n  ".join(failed))
    if args.smoke or args.no_report:
        pass
    elif out.resolve() != results_io.RESULTS_DIR and args.docs.resolve() == report.DOC:
        print(f"{args.docs} left as it was: it quotes only {results_io.RESULTS_DIR}, not {out}")
    elif failed and not args.write_docs_anyway:
        print(f"{args.docs} left as it was (a target was missed; --write-docs-anyway rewrites it)")
    else:
        report.render(out, args.docs)
        print(f"figures rewritten in {args.docs}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
