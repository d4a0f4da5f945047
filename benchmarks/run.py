"""Run gslice's benchmarks: `./scripts/bench` (or python benchmarks/run.py).

    python benchmarks/run.py                  # every experiment, full length
    python benchmarks/run.py --only share_accuracy,priority
    python benchmarks/run.py --smoke          # seconds-long versions (the test suite runs this)

Writes benchmarks/results/<experiment>.json and PNG plots next to them, then
regenerates the figures section of docs/benchmarks.md. The micro-benchmarks
(scheduler decisions/s, daemon round trip from Python) are pytest-benchmark
tests in this folder; they run here too and land in micro.json.
"""
from __future__ import annotations

import argparse
import json
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
                target = {"decisions_per_second": ">= 50000", "p50_ms": "<= 1"}.get(key, "")
                unit = "1/s" if key.endswith("_per_second") else key.rsplit("_", 1)[-1] if key.endswith(("_ms", "_us")) \
                    else "count"
                result.add(f"{bench['name']}/{key}", value, unit, target)
        result.add(f"{bench['name']}/median", bench["stats"]["median"] * 1e6, "us")
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
                  lambda: exp_slices.long_work(seconds=2.0, warmup=0.5, long_kernel_us=100_000)),
    "smooth_cap": (lambda: exp_slices.smooth_cap(), lambda: exp_slices.smooth_cap(seconds=2.0, warmup=0.3)),
    "latency": (lambda: exp_latency.latency(), lambda: exp_latency.latency(seconds=1.5, rounds=2)),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="", help=f"comma-separated subset of: {', '.join(EXPERIMENTS)}")
    parser.add_argument("--smoke", action="store_true", help="short versions, to check the command works")
    parser.add_argument("--out", type=Path, default=results_io.RESULTS_DIR)
    parser.add_argument("--no-report", action="store_true", help="do not rewrite docs/benchmarks.md")
    args = parser.parse_args(argv)
    names = [n for n in args.only.split(",") if n] or list(EXPERIMENTS)
    unknown = [n for n in names if n not in EXPERIMENTS]
    if unknown:
        parser.error(f"unknown experiment(s) {unknown}; expected some of {list(EXPERIMENTS)}")
    missed = []
    for name in names:
        started = time.monotonic()
        print(f"== {name}", flush=True)
        result = EXPERIMENTS[name][1 if args.smoke else 0]()
        if result is None:
            print("   (no smoke version; skipped)")
            continue
        path = results_io.write(result, args.out)
        saved = json.loads(path.read_text())
        saved["plots"] = plots.plot(saved, args.out)
        path.write_text(json.dumps(saved, indent=2) + "\n")
        for m in result.metrics:
            flag = {True: "ok  ", False: "MISS", None: "    "}[m.met]
            print(f"   {flag} {m.name} = {m.value:.4g} {m.unit} {m.target}")
            if m.met is False:
                missed.append(f"{name}: {m.name}")
        print(f"   ({time.monotonic() - started:.0f} s) -> {path}", flush=True)
    if not args.no_report and not args.smoke:
        report.render(args.out)
    if missed:
        print("targets missed:\n  " + "\n  ".join(missed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
