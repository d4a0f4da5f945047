"""The latency section's bursts beside one neighbour, in several settings
side by side, in interleaved rounds (issue 23): what a setting of the
holder's gate, the bursts' or tokend's buys the bursts and costs the GPU,
on a real GPU or the simulated one.

    python benchmarks/gpu/latency_ab.py [--gpu real|sim] [--backend torch|driver]
        [--shapes ii i] [--rounds 2] [--bursts 500]
        [--variant NAME=SETTING[,SETTING...] ...] [--out DIR]

A SETTING is VAR=VALUE (the neighbour's environment), burst:VAR=VALUE (the
bursts' environment) or --tokend-flag=VALUE (tokend's command line). By
default the long kernels' overlap with an expected preemptor's window,
GSLICE_ANTICIPATION_LONG_OVERLAP_PCT 0, 50 and 100 (hook/gate_pause.c).
Variants with the same tokend flags share one daemon (the first also
serves the bare series); each variant has its own burst and neighbour
processes: a high-priority group (bursts of 8 fp16 4096 matmuls, 10 ms
think, as sec_latency) and a low-priority one (the neighbour). On the
simulated GPU each daemon has its own simulated GPU.

Each round, per shape: the bursts alone bare (the reference), beside a bare
neighbour (the GPU's own time-slicing), then beside each variant in an
order rotated by round; each variant's neighbour alone for a second. Per
variant over the rounds: the bursts' p50 / p99 over alone bare, the GPU
busy estimate and the neighbour's part of the idle GPU (sec_latency's
gpu_time_figures, its rate beside over its own rate alone), NVML's
utilization over its spans; per round too, so a difference reads against
the rounds' spread. Writes DIR/latency_ab.json and the workers' logs,
DIR/latency_ab_logs.tar.gz. About 2 minutes on an H200 with the defaults
(2 shapes, 2 rounds of 500)."""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gslice.experiment import SharingExperiment  # noqa: E402
from gslice.workloads_served import percentiles  # noqa: E402

from harness import ClockSampler, Worker, archive_logs, util_over_spans, wait_ready  # noqa: E402
from sec_latency import SHAPES, gpu_time_figures  # noqa: E402

OVERLAP_VAR = "GSLICE_ANTICIPATION_LONG_OVERLAP_PCT"
DEFAULT_VARIANTS = [f"overlap{pct}={OVERLAP_VAR}={pct}" for pct in (0, 50, 100)]
BURST = dict(burst=8, think_ms=10.0, unit="mm4096h")


def parse_variant(text: str) -> dict:
    """NAME=SETTING[,SETTING...] -> {"name", "neighbour_env", "burst_env",
    "tokend_args"} (see the module's doc for SETTING)."""
    name, sep, settings = text.partition("=")
    if not sep or not name:
        raise ValueError(f"variant {text!r} is not NAME=SETTING[,SETTING...]")
    variant = {"name": name, "neighbour_env": {}, "burst_env": {}, "tokend_args": []}
    for item in settings.split(",") if settings else []:
        key, eq, value = item.partition("=")
        if key.startswith("--") and len(key) > 2:
            variant["tokend_args"] += [key, value] if eq else [key]
            continue
        target = "neighbour_env"
        if key.startswith("burst:"):
            target, key = "burst_env", key[len("burst:"):]
        if not eq or not key:
            raise ValueError(f"variant {text!r}: {item!r} is not VAR=VALUE, burst:VAR=VALUE or --tokend-flag=VALUE")
        variant[target][key] = value
    return variant


def summarise(shape: dict) -> dict:
    """Per series over all rounds, and per round: the bursts' p50 / p99
    against the alone-bare bursts of the same rounds (or round), and for a
    variant the GPU-time figures."""
    alone = [x for r in shape["rounds"] for x in r["alone_bare"]]
    a50, a99 = percentiles(alone)["p50"], percentiles(alone)["p99"]
    # Bare against bare: the reference's own round-to-round spread, beside
    # every difference read against it.
    table = {"alone_bare": {"p50": a50, "p99": a99, "n": len(alone),
                            "by_round": [{k: percentiles(r["alone_bare"])[k] for k in ("p50", "p99")}
                                         for r in shape["rounds"]]}}
    for series in shape["rounds"][0]["beside"]:
        beside = [x for r in shape["rounds"] for x in r["beside"][series]["latencies_ms"]]
        p = percentiles(beside)
        row = {"p50": p["p50"], "p99": p["p99"], "n": p["n"], "p50_added_ms": p["p50"] - a50,
               "p99_added_ms": p["p99"] - a99, "by_round": []}
        for r in shape["rounds"]:
            rp, ra = percentiles(r["beside"][series]["latencies_ms"]), percentiles(r["alone_bare"])
            entry = {"p50_added_ms": rp["p50"] - ra["p50"], "p99_added_ms": rp["p99"] - ra["p99"]}
            if series in r["neighbour_alone"]:
                entry.update({k: v for k, v in gpu_time_figures(
                    ra["p50"], rp["n"], {"alone": [r["neighbour_alone"][series]],
                                         "beside": [r["beside"][series]["neighbour"]]}).items()
                    if k in ("gpu_busy_estimate", "neighbour_share_of_idle")})
            row["by_round"].append(entry)
        if all(series in r["neighbour_alone"] for r in shape["rounds"]):
            figures = gpu_time_figures(a50, len(beside), {
                "alone": [r["neighbour_alone"][series] for r in shape["rounds"]],
                "beside": [r["beside"][series]["neighbour"] for r in shape["rounds"]]})
            row.update({k: figures[k] for k in ("gpu_busy_estimate", "neighbour_share_of_idle",
                                                "neighbour_rate_alone", "neighbour_rate_beside",
                                                "neighbour_rate_alone_last_over_first")})
        table[series] = row
    return table


def run(gpu: str, backend: str, shape_names: list[str], rounds: int, bursts: int,
        variants: list[dict], out: Path) -> dict:
    work = Path(tempfile.mkdtemp(prefix="latency-ab-"))
    shapes = [s for s in SHAPES if s[0].split("_")[0] in shape_names]
    report: dict = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "gpu": gpu, "backend": backend,
                    "variants": {v["name"]: v for v in variants}, "rounds": rounds, "bursts": bursts,
                    "shapes": {}}
    result = out / "latency_ab.json"
    daemons: dict[tuple, SharingExperiment] = {}
    with contextlib.ExitStack() as stack:
        for v in variants:
            args = tuple(v["tokend_args"])
            if args not in daemons:
                daemons[args] = exp = stack.enter_context(
                    SharingExperiment(work / f"exp{len(daemons)}", gpu=gpu, tokend_args=list(args)))
                exp.add_group("hi", request="50%", limit="100%", memory="8GiB", priority="high")
                exp.add_group("lo", request="50%", limit="100%", memory="8GiB", priority="low")
        exp = daemons[tuple(variants[0]["tokend_args"])]
        workers: list = []   # closed in the end, however far their start got

        def worker(home, group, label, **kwargs):
            workers.append(Worker(home, group, backend, label, work, **kwargs))
            return workers[-1]

        clocks = None
        try:
            bursters = {"bare": worker(exp, "hi", "burst-bare", shim=False)}
            neighbours = {"bare": worker(exp, "lo", "neighbour-bare", shim=False)}
            for v in variants:
                home = daemons[tuple(v["tokend_args"])]
                bursters[v["name"]] = worker(home, "hi", f"burst-{v['name']}", env=v["burst_env"])
                neighbours[v["name"]] = worker(home, "lo", f"neighbour-{v['name']}", env=v["neighbour_env"])
            bursts_bare = bursters["bare"]
            wait_ready(workers, 240.0)
            clocks = ClockSampler(exp, interval=0.1)
            spans: dict = {}
            for shape_name, unit, sync_every, kernel_ms in shapes:
                shape = {"neighbour": {"unit": unit, "sync_every": sync_every, "kernel_ms": kernel_ms}, "rounds": []}
                report["shapes"][shape_name] = shape
                for k in range(rounds):
                    one = {"alone_bare": bursts_bare.call("bursts", 300, count=max(50, bursts // 5),
                                                          **BURST)["latencies_ms"],
                           "beside": {}, "neighbour_alone": {}}
                    order = [v["name"] for v in variants]
                    order = order[k % len(order):] + order[:k % len(order)]
                    for series in ["bare", *order]:
                        worker, burster = neighbours[series], bursters[series]
                        worker.call("neighbour_start", 60, unit=unit, sync_every=sync_every)
                        time.sleep(0.3)
                        t0 = time.monotonic()
                        reply = burster.call("bursts", 600, count=bursts, seed=k, **BURST)
                        spans.setdefault(shape_name, {}).setdefault(series, []).append((t0, time.monotonic()))
                        stopped = worker.call("neighbour_stop", 120)
                        stopped["burst_seconds"] = reply["seconds"]
                        one["beside"][series] = {"latencies_ms": reply["latencies_ms"], "neighbour": stopped}
                        p = percentiles(reply["latencies_ms"])
                        print(f"[{shape_name} round {k}] {series:12s} n={p['n']:4d} p50 {p['p50']:.2f} "
                              f"p99 {p['p99']:.2f} max {p['max']:.2f} ms; neighbour "
                              f"{stopped['iterations'] / stopped['seconds']:.0f} it/s", flush=True)
                    for series in order:
                        neighbours[series].call("neighbour_start", 60, unit=unit, sync_every=sync_every)
                        time.sleep(1.0 if gpu == "real" else 0.3)
                        one["neighbour_alone"][series] = neighbours[series].call("neighbour_stop", 120)
                    shape["rounds"].append(one)
                    result.write_text(json.dumps(report))
                shape["summary"] = summarise(shape)
                result.write_text(json.dumps(report))
        finally:
            if clocks is not None:
                report_clocks = clocks.stop()
                for shape_name, by_series in spans.items():
                    if "summary" in report["shapes"].get(shape_name, {}):
                        for series, series_spans in by_series.items():
                            report["shapes"][shape_name]["summary"][series]["nvml_util_pct"] = util_over_spans(
                                report_clocks, series_spans)
                result.write_text(json.dumps(report))
            for w in workers:
                w.close()
    for shape_name, shape in report["shapes"].items():
        print_summary(shape_name, shape.get("summary", {}))
    logs = archive_logs(work, out / "latency_ab_logs.tar.gz")
    print(f"[latency-ab] {result}, logs in {logs}", flush=True)
    return report


def print_summary(shape_name: str, table: dict) -> None:
    if not table:
        return
    alone = table["alone_bare"]
    by_round = "; ".join(f"{r['p50']:.2f}/{r['p99']:.2f}" for r in alone.get("by_round", []))
    print(f"{shape_name}: bursts alone bare p50 {alone['p50']:.2f} p99 {alone['p99']:.2f} ms (n={alone['n']}; "
          f"by round, the bare-against-bare noise: {by_round})")
    for series, row in table.items():
        if series == "alone_bare":
            continue
        fmt = lambda v, f=".3f": "-" if v is None else format(v, f)  # noqa: E731
        rounds = "; ".join(f"+{r['p50_added_ms']:.2f}/+{r['p99_added_ms']:.2f}"
                           + (f" busy {fmt(r.get('gpu_busy_estimate'))}" if 'gpu_busy_estimate' in r else "")
                           for r in row["by_round"])
        print(f"  {series:12s} p50 +{row['p50_added_ms']:.2f} p99 +{row['p99_added_ms']:.2f} ms (n={row['n']}); "
              f"busy {fmt(row.get('gpu_busy_estimate'))} (neighbour alone, last round over first: "
              f"{fmt(row.get('neighbour_rate_alone_last_over_first'))}), neighbour of idle "
              f"{fmt(row.get('neighbour_share_of_idle'))}, "
              f"NVML {fmt(row.get('nvml_util_pct'), '.1f')}%; by round: {rounds}", flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpu", default="real", choices=("real", "sim"))
    parser.add_argument("--backend", default=None, choices=("torch", "driver"),
                        help="default: torch on a real GPU, driver on the simulated one")
    parser.add_argument("--shapes", nargs="+", default=["ii", "i"], help="prefixes of sec_latency.SHAPES")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--bursts", type=int, default=500, help="bursts per variant and round")
    parser.add_argument("--variant", action="append", dest="variants",
                        help=f"NAME=SETTING[,SETTING...]: VAR=VALUE (the neighbour's environment), "
                             f"burst:VAR=VALUE (the bursts'), --tokend-flag=VALUE (repeat; default: "
                             f"{' '.join(DEFAULT_VARIANTS)})")
    parser.add_argument("--out", default=os.environ.get("OUT") or "latency-ab")
    args = parser.parse_args(argv)
    try:
        variants = [parse_variant(v) for v in (args.variants or DEFAULT_VARIANTS)]
    except ValueError as exc:
        parser.error(str(exc))
    names = [v["name"] for v in variants]
    if len(set(names)) != len(names) or "bare" in names:
        parser.error(f"variant names must be distinct and not 'bare': {names}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    run(args.gpu, args.backend or ("torch" if args.gpu == "real" else "driver"), args.shapes, args.rounds,
        args.bursts, variants, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
