"""Exact shares and smooth caps for work of any length, and no idle GPU at
handoffs (issue 8), on the simulated GPU's engine time with the real shim
and the real tokend.

- long_work: 30/70 where group A launches 1 s kernels and B 1 ms kernels,
  with A uncapped and with A's request = limit = 30% (its guarantee beside
  short kernels); limit 30% alone with 1 s kernels and with 50 ms graphs
  (50 x 1 ms); limit 30% alone with 12.5 ms kernels each waited for: its
  GPU time, and tokend's charge minus it. Every share is two-sided (issue 24: within 1 point over the
  run); each group's per-second shares are reported (no target: with 1 s
  kernels the others' 1 s windows dip by design, docs/architecture.md).
- smooth_cap: limit 30% alone with 1 ms kernels: the group's share over
  the run (30 +- 1) and in every 1 s window (30 +- 3), and the longest gap
  without any of its GPU work (sampled every 10 ms), with a per-second
  timeline plot; and request = limit = 30% with 1 ms kernels beside a 70%
  group with 1 s kernels (30 +- 1 over the run).
- busy: GPU busy with two groups of four processes, and with four groups
  10/20/30/40 of one process with 4 streams each, and 30/70 with 1 ms
  kernels (the demo's setting); in each, the handoff gap (GPU idle between
  two processes' work, p50 and p99, from the simulator's handoff records)
  and handoffs per second; and the older estimate GPU idle time / tokens
  granted.
"""
from __future__ import annotations

import time

from gslice.experiment import SharingExperiment, busy_fraction_between, shares_between

from handoff_gaps import GAP_ADDED_P50_US, HandoffWatch, add_metrics as add_handoff_metrics
from results_io import Result, at_least, at_most, within


def _run(groups: list[tuple[str, float, float, list[list[str]]]], seconds: float, warmup: float,
         sample_every: float = 0.25, shim_env: dict | None = None) -> dict:
    """groups: (name, request, limit, [workload args per process]); shim_env:
    more environment for the workloads' shims."""
    with SharingExperiment(gpu="sim") as exp:
        exp.sim_env.update(shim_env or {})
        for name, request, limit, processes in groups:
            # Each process's context is charged GSLICE_CONTEXT_RESERVE_MIB
            # (512 MiB by default): a quota of 1 GiB would refuse the third.
            exp.add_group(name, request=request, limit=limit, memory=f"{512 * (len(processes) + 1)}MiB")
        for name, _, _, processes in groups:
            for args in processes:
                exp.spawn_workload(name, ["spin", *args, "--seconds", str(warmup + seconds + 5)])
        time.sleep(warmup)
        status = exp.admin.status().groups
        granted_before = {g.group.name: g.tokens_granted for g in status}
        charged_before = {g.group.name: g.charged_seconds for g in status}
        handoffs = HandoffWatch(exp.sim_name)
        samples = [exp.sample()]
        end = samples[0].at + seconds
        while time.monotonic() < end:
            time.sleep(max(0.0, min(sample_every, end - time.monotonic())))
            samples.append(exp.sample())
        handoff_figures = handoffs.stop()
        status = exp.admin.status().groups
        granted = {g.group.name: g.tokens_granted - granted_before.get(g.group.name, 0) for g in status}
        wall = samples[-1].at - samples[0].at
        charged = {g.group.name: (g.charged_seconds - charged_before.get(g.group.name, 0.0)) / wall for g in status}
    return {"samples": samples, "shares": shares_between(samples[0], samples[-1]), "charged_fraction": charged,
            "busy_fraction": busy_fraction_between(samples[0], samples[-1]), "tokens_granted": granted,
            "handoffs": handoff_figures}


def per_second_shares(samples: list, name: str) -> list[float]:
    """The group's share of the GPU in each whole second from the first
    sample on (consecutive 1 s windows, each from the first sample at or
    after its start to the first at or after its end)."""
    shares, start = [], 0
    for i in range(1, len(samples)):
        if samples[i].at - samples[start].at >= 1.0:
            used = samples[i].busy_ns[name] - samples[start].busy_ns[name]
            shares.append(used / ((samples[i].at - samples[start].at) * 1e9))
            start = i
    return shares


def add_per_second(result: Result, label: str, run: dict, targets: dict | None = None) -> None:
    """Each group's lowest and highest per-second share (targets: name ->
    Target for both, where the 1 s goal applies: kernels of 10 ms or less)."""
    for name in run["shares"]:
        seconds = per_second_shares(run["samples"], name)
        if not seconds:
            continue
        target = (targets or {}).get(name)
        result.add(f"{label}/{name}/min_1s", min(seconds) * 100, "%", target)
        result.add(f"{label}/{name}/max_1s", max(seconds) * 100, "%", target)
        result.details.setdefault(label, {})[f"{name}_per_second"] = [round(x, 4) for x in seconds]


# A process's first kernel runs before its length is known: under a short
# first slice, tokend's expiry lets the next holder's work share the GPU
# with it, and a 1 s kernel may run (and be charged) up to twice as long.
# The scheduler pays that back within its window (10 s); the figures are
# steady state, measured from one window after the start (docs/architecture.md,
# "Kernels longer than a slice").
LONG_KERNEL_WARMUP = 10.0


def long_work(seconds: float = 30.0, warmup: float = LONG_KERNEL_WARMUP, long_kernel_us: int = 1_000_000) -> Result:
    result = Result("long_work", device="simulated GPU")
    long = ["--kernel-us", str(long_kernel_us)]
    short = ["--kernel-us", "1000"]
    for label, limit_a in (("30-70_1s_vs_1ms", 1.0), ("30-70_capped_1s_vs_1ms", 0.3)):
        # limit_a 0.3: request = limit, so the 1 s kernels' 30% is a
        # guarantee and a cap at once (it got 14.8% on another simulator).
        mixed = _run([("a-1s", 0.3, limit_a, [long]), ("b-1ms", 0.7, 1.0, [short])], seconds, warmup)
        result.add(f"{label}/a-1s/share", mixed["shares"]["a-1s"] * 100, "%", within(30, 1))
        result.add(f"{label}/b-1ms/share", mixed["shares"]["b-1ms"] * 100, "%", within(70, 1))
        add_per_second(result, label, mixed)
        result.details.setdefault(label, {}).update({k: mixed[k] for k in ("shares", "busy_fraction")})
    capped = _run([("capped", 0.3, 0.3, [long])], seconds, warmup)
    result.add("limit30_alone_1s_kernels/busy", capped["busy_fraction"] * 100, "%", within(30, 1))
    # 12.5 ms kernels, each waited for (a 16384 bf16 matmul on an H100, synced
    # each time: 23.7% of GPU time there, charged 29.7%): the GPU time, and
    # tokend's charge against it (charged for what the GPU did for it).
    synced = _run([("capped", 0.3, 0.3, [["--kernel-us", "12500", "--sync-every", "1"]])], seconds, warmup)
    synced_busy = synced["busy_fraction"] * 100
    result.add("limit30_alone_12ms_synced/busy", synced_busy, "%", within(30, 1))
    result.add("limit30_alone_12ms_synced/charged_minus_busy",
               synced["charged_fraction"]["capped"] * 100 - synced_busy, "points", within(0, 1))
    graph = _run([("capped", 0.3, 0.3, [["--kernel-us", "1000", "--graph-kernels", "50"]])], seconds, warmup)
    result.add("limit30_alone_50ms_graphs/busy", graph["busy_fraction"] * 100, "%", within(30, 1))
    add_per_second(result, "limit30_alone_50ms_graphs", graph)
    result.details.update({"limit30_alone_12ms_synced": {k: synced[k] for k in ("busy_fraction", "charged_fraction",
                                                                              "tokens_granted")},
                           "limit30_alone_1s_kernels": capped["busy_fraction"],
                           "limit30_alone_50ms_graphs_busy": graph["busy_fraction"], "long_kernel_us": long_kernel_us})
    return result


def smooth_cap(seconds: float = 25.0, warmup: float = 1.0, long_kernel_us: int = 1_000_000,
               long_warmup: float = LONG_KERNEL_WARMUP) -> Result:
    result = Result("smooth_cap", device="simulated GPU")
    run = _run([("capped", 0.3, 0.3, [["--kernel-us", "1000"]])], seconds, warmup, sample_every=0.01)
    samples = run["samples"]
    # Every 1 s window (stepped by the sample period) and the longest gap.
    windows, gap, longest, start = [], 0.0, 0.0, 0
    for i in range(1, len(samples)):
        if samples[i].busy_ns["capped"] == samples[i - 1].busy_ns["capped"]:
            gap += samples[i].at - samples[i - 1].at
            longest = max(longest, gap)
        else:
            gap = 0.0
        while samples[i].at - samples[start].at > 1.0:
            start += 1
        if samples[i].at - samples[start].at >= 0.99 and samples[start].at - samples[0].at >= 0:
            used = samples[i].busy_ns["capped"] - samples[start].busy_ns["capped"]
            windows.append(used / ((samples[i].at - samples[start].at) * 1e9))
    timeline = []
    for i in range(0, len(samples) - 1, 100):  # per-second points for the plot
        j = min(i + 100, len(samples) - 1)
        used = samples[j].busy_ns["capped"] - samples[i].busy_ns["capped"]
        timeline.append({"t": samples[j].at - samples[0].at, "shares": {"capped": used / ((samples[j].at - samples[i].at) * 1e9)}})
    result.add("limit30_1ms/min_1s_window", min(windows) * 100, "%", within(30, 3))
    result.add("limit30_1ms/max_1s_window", max(windows) * 100, "%", within(30, 3))
    result.add("limit30_1ms/overall", run["busy_fraction"] * 100, "%", within(30, 1))
    result.add("limit30_1ms/longest_gap", longest * 1e3, "ms", at_most(100))
    result.details = {"timeline": timeline, "windows": len(windows), "sample_every_s": 0.01}
    # The cap beside long kernels: request = limit = 30% with 1 ms kernels,
    # beside 70% (limit 100%) with 1 s kernels (its 1 s windows dip while
    # one runs: reported, no 1 s target).
    beside = _run([("capped-1ms", 0.3, 0.3, [["--kernel-us", "1000"]]),
                   ("b-1s", 0.7, 1.0, [["--kernel-us", str(long_kernel_us)]])], seconds, long_warmup)
    result.add("limit30_1ms_beside_1s/capped-1ms/share", beside["shares"]["capped-1ms"] * 100, "%", within(30, 1))
    result.add("limit30_1ms_beside_1s/b-1s/share", beside["shares"]["b-1s"] * 100, "%", within(70, 1))
    add_per_second(result, "limit30_1ms_beside_1s", beside)
    return result


def busy(seconds: float = 10.0, warmup: float = 1.5) -> Result:
    result = Result("busy", device="simulated GPU")
    two_by_four = _run([("g1", 0.5, 1.0, [["--kernel-us", "500"]] * 4),
                        ("g2", 0.5, 1.0, [["--kernel-us", "500"]] * 4)], seconds, warmup)
    result.add("two_groups_of_four/busy", two_by_four["busy_fraction"] * 100, "%", at_least(97))
    add_handoff_metrics(result, "two_groups_of_four", two_by_four["handoffs"])
    four = _run([(f"g{i}", r, 1.0, [["--kernel-us", "500", "--streams", "4"]])
                 for i, r in enumerate([0.1, 0.2, 0.3, 0.4])], seconds, warmup)
    result.add("four_groups_4_streams/busy", four["busy_fraction"] * 100, "%", at_least(97))
    add_handoff_metrics(result, "four_groups_4_streams", four["handoffs"])
    pair = _run([("a", 0.3, 1.0, [["--kernel-us", "1000"]]), ("b", 0.7, 1.0, [["--kernel-us", "1000"]])],
                seconds, warmup)
    result.add("30-70_1ms/busy", pair["busy_fraction"] * 100, "%", at_least(97))
    error = max(abs(pair["shares"]["a"] - 0.3), abs(pair["shares"]["b"] - 0.7)) * 100
    result.add("30-70_1ms/max_error_points", error, "points", at_most(2))
    add_handoff_metrics(result, "30-70_1ms", pair["handoffs"])
    # The older estimate: GPU idle time / tokens granted to the two groups in
    # turn. As for the handoff gap, the simulated GPU's context switch at
    # each handoff comes on top of what gslice may add (GAP_ADDED_P50_US):
    # no scheduler removes it (its target was 300 us flat, from before the
    # switch was calibrated, and missed by the switch alone).
    handoffs = max(1, sum(pair["tokens_granted"].values()))
    result.add("30-70_1ms/mean_idle_per_grant", (1 - pair["busy_fraction"]) * seconds / handoffs * 1e6, "us",
               at_most(pair["handoffs"].get("context_switch_us", 0.0) + GAP_ADDED_P50_US))
    result.details = {name: {k: run[k] for k in ("shares", "busy_fraction", "tokens_granted", "handoffs")}
                      for name, run in (("two_by_four", two_by_four), ("four_4_streams", four), ("30-70_1ms", pair))}
    return result
