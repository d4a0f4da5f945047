"""Scale and start-up on one GPU.

scale: 64 saturating clients in 8 groups for 60 s: workload errors and bad
requests (must be 0), tokend's CPU use, its resident memory after all
attached and at the end (must not grow), decisions per second.
startup: 100 processes make their first launch at the same instant: time
until the last of them held its first token (its first launch returned)."""
from __future__ import annotations

import json
import time
from pathlib import Path

from gslice.experiment import SharingExperiment

from results_io import Result, at_most


def _proc_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    import os
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


SMALL_CONTEXT_RESERVE = {"GSLICE_CONTEXT_RESERVE_MIB": "16"}


def _proc_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def scale(clients: int = 64, groups: int = 8, seconds: float = 60.0) -> Result:
    result = Result("scale", device="simulated GPU")
    # Many processes per group: each context's reserve is cut to 16 MiB (as in
    # the soak), so the quotas measure tokend's scale, not the default 512 MiB.
    with SharingExperiment(gpu="sim", shim_env=SMALL_CONTEXT_RESERVE) as exp:
        names = [f"team{i}" for i in range(groups)]
        for name in names:
            exp.add_group(name, request=round(1.0 / groups, 6), memory="1GiB")
        logs = exp.base_dir / "workload-logs"
        logs.mkdir(exist_ok=True)
        for i in range(clients):
            exp.spawn_workload(names[i % groups], ["spin", "--kernel-us", "1000", "--seconds", str(seconds + 15)],
                               stderr=open(logs / f"client{i}.log", "w"))
        deadline = time.monotonic() + 60
        while len(exp.admin.status().clients) < clients:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {len(exp.admin.status().clients)} of {clients} clients attached in 60 s")
            time.sleep(0.5)
        pid = exp.tokend.pid
        rss_start = _proc_rss_mib(pid)
        cpu_start, t_start, dec_start = _proc_cpu_seconds(pid), time.monotonic(), exp.admin.status().decisions
        time.sleep(seconds)
        cpu_end, t_end, status = _proc_cpu_seconds(pid), time.monotonic(), exp.admin.status()
        rss_end = _proc_rss_mib(pid)
        bad = _bad_requests(exp.tokend.metrics_text())
        codes = exp.wait_all(timeout=120)
        failed = [i for i, c in enumerate(c for cs in codes.values() for c in cs) if c != 0]
        failures = {}
        for log in sorted(logs.glob("*.log")):
            text = log.read_text(errors="replace").strip()
            if text:
                failures[log.stem] = text.splitlines()[-3:]
    result.add("failed_workloads", len(failed), "count", at_most(0))
    result.add("bad_requests", sum(bad.values()), "count", at_most(0))
    result.add("tokend_cpu", (cpu_end - cpu_start) / (t_end - t_start) * 100, "% of one core")
    result.add("tokend_rss_start", rss_start, "MiB")
    result.add("tokend_rss_end", rss_end, "MiB")
    result.add("tokend_rss_growth", rss_end - rss_start, "MiB", at_most(5))
    result.add("decisions_per_s", (status.decisions - dec_start) / (t_end - t_start), "1/s")
    result.details = {"clients": clients, "groups": groups, "seconds": seconds, "bad_requests": bad,
                      "workload_stderr": failures}
    return result


def _bad_requests(metrics_text: str) -> dict[str, float]:
    """tokend's error replies, by method and status (all series summed per label set)."""
    from prometheus_client.parser import text_string_to_metric_families
    counts = {}
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            if sample.name == "gslice_bad_requests_total" and sample.value:
                counts[f"{sample.labels.get('method')}/{sample.labels.get('code')}"] = sample.value
    return counts


def startup(processes: int = 100) -> Result:
    result = Result("startup", device="simulated GPU")
    with SharingExperiment(gpu="sim", shim_env=SMALL_CONTEXT_RESERVE) as exp:
        exp.add_group("crowd", request=0.5, memory="4GiB")
        start_at = time.time() + 5.0 + 0.08 * processes   # all booted and initialised by then
        procs = [exp.spawn_workload("crowd", ["spin", "--kernel-us", "50", "--seconds", "0",
                                              "--start-at", f"{start_at:.3f}"]) for _ in range(processes)]
        firsts = []
        for proc in procs:
            out, _ = proc.communicate(timeout=300)
            if proc.returncode != 0:
                raise RuntimeError(f"start-up worker failed with {proc.returncode}")
            firsts.append(json.loads(out.strip().splitlines()[-1])["first_launch_at"])
    if max(firsts) < start_at:
        raise RuntimeError("workers started before the common start time")
    result.add("all_hold_first_token_after", (max(firsts) - start_at) * 1e3, "ms")
    result.add("median_first_token_after", (sorted(firsts)[len(firsts) // 2] - start_at) * 1e3, "ms")
    result.details = {"processes": processes}
    return result
