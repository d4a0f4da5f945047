"""Share accuracy, work conservation and the share timeline, measured on the
simulated GPU's engine time with the real shim and the real tokend.

Each run: groups with the given requests (limit 100%), one saturating
workload process each, a warm-up, then `seconds` of measurement sampled
every 0.25 s. The error of a group is |achieved share - request| in points.
"""
from __future__ import annotations

import time

from gslice.experiment import SharingExperiment, busy_fraction_between, shares_between

from exp_slices import add_per_second
from results_io import Result, at_least, at_most, within

SPLITS = {
    "30-70": [0.30, 0.70],
    "10-20-30-40": [0.10, 0.20, 0.30, 0.40],
    "10-90": [0.10, 0.90],
}
TARGET_POINTS = {"30-70": 2.0, "10-20-30-40": 3.0, "10-90": 1.5}
# name -> workload arguments (python -m gslice.workloads spin ...)
SHAPES = {
    "tiny-20us": ["--kernel-us", "20", "--blocks", "1", "--sync-every", "0"],
    "long-5ms": ["--kernel-us", "5000", "--blocks", "4096", "--sync-every", "0"],
    "sync-every-step": ["--kernel-us", "1000", "--sync-every", "1"],
}
# Four groups 10/20/30/40, each with its own kernel length (all <= 10 ms, so
# the 1 s goal applies: every second within 3 points).
MIXED_LENGTHS = [["--kernel-us", str(us), "--sync-every", "0"] for us in (20, 1000, 5000, 10000)]


def run_split(requests: list[float], shape_args: list, seconds: float, warmup: float,
              limits: list[float] | None = None, sample_every: float = 0.25) -> dict:
    """shape_args: one workload's arguments for every group, or a list of
    them, one per group."""
    names = [f"g{i + 1}-{int(r * 100)}" for i, r in enumerate(requests)]
    limits = limits or [1.0] * len(requests)
    per_group = shape_args if shape_args and isinstance(shape_args[0], list) else [shape_args] * len(names)
    with SharingExperiment(gpu="sim") as exp:
        for name, request, limit in zip(names, requests, limits):
            exp.add_group(name, request=request, limit=limit, memory="1GiB")
        for name, args in zip(names, per_group):
            exp.spawn_workload(name, ["spin", *args, "--seconds", str(warmup + seconds + 5)])
        time.sleep(warmup)
        samples = [exp.sample()]
        end = samples[0].at + seconds
        while time.monotonic() < end:
            time.sleep(max(0.0, min(sample_every, end - time.monotonic())))
            samples.append(exp.sample())
        shares = shares_between(samples[0], samples[-1])
        busy = busy_fraction_between(samples[0], samples[-1])
    timeline = [{"t": s.at - samples[0].at,
                 "shares": shares_between(samples[i - 1], s)} for i, s in enumerate(samples) if i > 0]
    return {"groups": dict(zip(names, requests)), "shares": shares, "busy_fraction": busy, "timeline": timeline,
            "samples": samples}


def share_accuracy(seconds: float = 10.0, warmup: float = 1.5, shapes=None, splits=None) -> Result:
    result = Result("share_accuracy", device="simulated GPU")
    for split_name, requests in (splits or SPLITS).items():
        for shape_name, shape_args in (shapes or SHAPES).items():
            run = run_split(requests, shape_args, seconds, warmup)
            errors = {g: abs(run["shares"][g] - r) * 100 for g, r in run["groups"].items()}
            result.add(f"{split_name}/{shape_name}/max_error_points", max(errors.values()), "points",
                       at_most(TARGET_POINTS[split_name]))
            result.details[f"{split_name}/{shape_name}"] = {
                "requests": run["groups"], "achieved": run["shares"], "error_points": errors,
                "busy_fraction": run["busy_fraction"]}
            if split_name == "10-20-30-40" and shape_name == "long-5ms":
                result.details["timeline"] = run["timeline"]
    # Mixed kernel lengths, one per group: each group within 1 point over the
    # run and 3 points in every second (issue 24).
    requests = SPLITS["10-20-30-40"]
    mixed = run_split(requests, MIXED_LENGTHS, seconds, warmup)
    result.details["10-20-30-40/mixed-20us-1ms-5ms-10ms"] = {
        "requests": mixed["groups"], "achieved": mixed["shares"],
        "error_points": {g: abs(mixed["shares"][g] - r) * 100 for g, r in mixed["groups"].items()},
        "busy_fraction": mixed["busy_fraction"]}
    for name, request in mixed["groups"].items():
        result.add(f"10-20-30-40/mixed-20us-1ms-5ms-10ms/{name}/share", mixed["shares"][name] * 100, "%",
                   within(request * 100, 1))
    add_per_second(result, "10-20-30-40/mixed-20us-1ms-5ms-10ms", mixed,
                   {name: within(request * 100, 3) for name, request in mixed["groups"].items()})
    return result


def work_conservation(seconds: float = 10.0, warmup: float = 1.5) -> Result:
    result = Result("work_conservation", device="simulated GPU")
    four = run_split(SPLITS["10-20-30-40"], SHAPES["long-5ms"], seconds, warmup)
    result.add("four_groups/busy_fraction", four["busy_fraction"] * 100, "%", at_least(97))
    alone = run_split([0.30], SHAPES["long-5ms"], seconds, warmup)
    result.add("alone_request30_limit100/busy_fraction", alone["busy_fraction"] * 100, "%", at_least(97))
    capped = run_split([0.30], SHAPES["long-5ms"], seconds, warmup, limits=[0.30])
    # Two-sided: the smooth cap holds over any interval (to one slice), so
    # over `seconds` too; under it is a failure as much as over.
    result.add("alone_limit30/busy_fraction", capped["busy_fraction"] * 100, "%", within(30, 1))
    result.details = {"four_groups": four["shares"], "alone": alone["shares"], "capped": capped["shares"]}
    add_per_second(result, "alone_limit30", capped, {name: within(30, 3) for name in capped["groups"]})
    return result
