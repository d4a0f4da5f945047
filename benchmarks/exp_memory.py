"""Memory quota under races, and how fast a killed process's memory comes back.

Races: N processes of one group allocate chunks at the same instant (a
shared start time), each trying for the whole quota, and hold what they
got until all are done; the sum of what they hold is compared with the
quota. Reclaim: a process holding memory is killed with SIGKILL; the time
until tokend's ledger shows the group's memory free again."""
from __future__ import annotations

import json
import signal
import subprocess
import time

from gslice.experiment import SharingExperiment

from results_io import Result, at_most

QUOTA_MIB = 256


def race_trial(exp: SharingExperiment, group: str, processes: int, chunk_mib: int) -> int:
    """Bytes held over the quota in one trial (0 when the quota held)."""
    start_at = time.time() + 1.0 + 0.15 * processes
    count = QUOTA_MIB // chunk_mib + 1
    procs = [exp.spawn_workload(group, ["alloc", "--chunk-mib", str(chunk_mib), "--count", str(count),
                                        "--hold-seconds", "1.0", "--start-at", f"{start_at:.3f}"],
                                 stderr=subprocess.DEVNULL)  # each refusal logs a line: expected here
             for _ in range(processes)]
    held = 0
    for proc in procs:
        out, _ = proc.communicate(timeout=120)
        if proc.returncode != 0:
            raise RuntimeError(f"alloc worker failed with {proc.returncode}")
        held += json.loads(out.strip().splitlines()[-1])["allocated_bytes"]
    exp.groups[group].processes.clear()
    return max(0, held - (QUOTA_MIB << 20))


def memory_races(trials: int = 20) -> Result:
    result = Result("memory_races", device="simulated GPU")
    # Races between allocations only: no per-context reserve (the simulated
    # contexts cost nothing here; context charges are tested in tests/shim).
    with SharingExperiment(gpu="sim", shim_env={"GSLICE_CONTEXT_RESERVE_MIB": "0"}) as exp:
        exp.add_group("racers", request=0.5, memory=f"{QUOTA_MIB}MiB")
        for processes in (4, 8):
            for chunk_mib in (64, 1):
                overs = [race_trial(exp, "racers", processes, chunk_mib) for _ in range(trials)]
                result.add(f"{processes}proc/{chunk_mib}MiB/max_bytes_over_quota", max(overs), "bytes", at_most(0))
                result.details[f"{processes}proc/{chunk_mib}MiB"] = {
                    "trials": trials, "trials_over_quota": sum(1 for o in overs if o), "bytes_over": overs}
    return result


def kill_reclaim(trials: int = 5) -> Result:
    result = Result("memory_kill_reclaim", device="simulated GPU")
    times = []
    with SharingExperiment(gpu="sim") as exp:
        exp.add_group("victim", request=0.5, memory="1GiB")
        for _ in range(trials):
            proc = exp.spawn_workload("victim", ["alloc", "--chunk-mib", "128", "--count", "4",
                                                 "--hold-seconds", "600"])
            proc.stdout.readline()  # the JSON line: it holds 512 MiB now
            proc.send_signal(signal.SIGKILL)
            killed = time.monotonic()
            while exp.admin.status().group("victim").memory_used > 0:
                if time.monotonic() - killed > 10:
                    raise RuntimeError("memory of a killed process not back within 10 s")
                time.sleep(0.002)
            times.append(time.monotonic() - killed)
            proc.wait()
            exp.groups["victim"].processes.clear()
    result.add("reclaim_after_kill9_max", max(times) * 1e3, "ms", at_most(1000))
    result.details = {"reclaim_ms": [t * 1e3 for t in times]}
    return result

