"""Soak (issue 9): clients attach, allocate, detach and are killed -9 at
random for a long time while two groups saturate the GPU.

Figures: failed workloads and tokend error replies (must be 0), bytes the
ledger still holds for the churning group once every churner is gone (must
be 0), tokend's resident memory growth from warm-up to the end (must stay
flat), and the saturating groups' split of the GPU against their requests.
The full run is 10 minutes with up to 64 churners alive at once; the test
suite runs a seconds-long form (tests/integration/test_soak_short.py) that
checks the correctness figures only."""
from __future__ import annotations

import random
import signal
import subprocess
import time

from gslice.experiment import SharingExperiment

from exp_scale import SMALL_CONTEXT_RESERVE, _bad_requests, _proc_rss_mib
from results_io import Result, at_most, within

MiB = 1024**2
SATURATORS = {"sat_a": 0.3, "sat_b": 0.6}


def soak(seconds: float = 600.0, clients: int = 64, seed: int = 9, warmup: float = 10.0) -> Result:
    rng = random.Random(seed)
    result = Result("soak", device="simulated GPU")
    # Every churner's context is charged a reserve (16 MiB here, 512 by default) beside
    # its at most 4 x 8 MiB chunks: the churn group's quota fits them all, so a
    # refusal would be a leak, not a full quota.
    with SharingExperiment(gpu="sim", tokend_args=["--attach-rate", "1000", "--attach-burst", "1000"],
                           shim_env=SMALL_CONTEXT_RESERVE) as exp:
        for name, request in SATURATORS.items():
            exp.add_group(name, request=request, limit=1.0, memory="1GiB")
        exp.add_group("churn", request=0.1, limit=1.0, memory=f"{clients * (16 + 32)}MiB")
        saturators = [exp.spawn_workload(name, ["spin", "--kernel-us", "2000", "--seconds", str(seconds + warmup + 5)],
                                         stderr=subprocess.PIPE) for name in SATURATORS]
        pid = exp.tokend.pid
        alive: list[subprocess.Popen] = []
        started = killed = exited = failed = 0
        failures: list[str] = []
        rss_warm = None
        t0 = time.monotonic()
        end = t0 + warmup + seconds
        share_samples: list[tuple[float, float]] = []
        while time.monotonic() < end:
            now = time.monotonic()
            if rss_warm is None and now - t0 >= warmup:
                rss_warm = _proc_rss_mib(pid)
            for proc in list(alive):  # reap the ones that left on their own
                if proc.poll() is not None:
                    alive.remove(proc)
                    exited += 1
                    if proc.returncode != 0:
                        failed += 1
                        failures.append(proc.stderr.read()[-500:])
            action = rng.random()
            if len(alive) < clients and action < 0.6:
                hold = rng.uniform(0.05, 3.0)
                alive.append(exp.spawn_workload("churn", [
                    "alloc", "--chunk-mib", str(rng.randint(1, 8)), "--count", str(rng.randint(1, 4)),
                    "--hold-seconds", f"{hold:.2f}"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
                started += 1
            elif alive and action < 0.8:
                victim = alive.pop(rng.randrange(len(alive)))
                victim.send_signal(signal.SIGKILL)
                victim.wait()
                killed += 1
            if now - t0 >= warmup:
                status = exp.admin.status()
                shares = {g.group.name: g.share for g in status.groups}
                share_samples.append((shares["sat_a"], shares["sat_b"]))
            time.sleep(rng.uniform(0.01, 0.1))
        for proc in alive:
            proc.wait(timeout=60)
            exited += 1
            if proc.returncode != 0:
                failed += 1
                failures.append(proc.stderr.read()[-500:])
        # Every churner is gone: the ledger must hold nothing for them.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            churn = exp.admin.status().group("churn")
            if churn.clients == 0 and churn.memory_used == 0:
                break
            time.sleep(0.1)
        rss_end = _proc_rss_mib(pid)
        bad = _bad_requests(exp.tokend.metrics_text())
        for proc in saturators:
            proc.send_signal(signal.SIGTERM)
        sat_failed = sum(1 for proc in saturators if proc.wait(timeout=60) not in (0, -signal.SIGTERM))
    total_a = sum(a for a, _ in share_samples)
    total_b = sum(b for _, b in share_samples)
    split_a = total_a / (total_a + total_b) if total_a + total_b else 0.0
    target_a = SATURATORS["sat_a"] / sum(SATURATORS.values())
    result.add("failed_workloads", failed + sat_failed, "count", at_most(0))
    result.add("bad_requests", sum(bad.values()), "count", at_most(0))
    result.add("leaked_bytes", churn.memory_used, "bytes", at_most(0))
    result.add("leftover_clients", churn.clients, "count", at_most(0))
    result.add("tokend_rss_growth", rss_end - (rss_warm or rss_end), "MiB", at_most(5))
    result.add("sat_a_split", split_a, "fraction", within(target_a, 0.05))
    result.add("churners_started", started, "count")
    result.add("churners_killed", killed, "count")
    result.details = {"seconds": seconds, "clients": clients, "seed": seed, "bad_requests": bad,
                      "failures": failures[:5], "rss_warm_mib": rss_warm, "rss_end_mib": rss_end,
                      "target_sat_a_split": target_a}
    return result
