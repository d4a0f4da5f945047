"""Round trips from the C shim's RPC client (hook/rpc_client.c) to a real
tokend over its unix socket, uncontended: AcquireToken + ReleaseToken and
ReserveMemory + ReleaseMemory, each pair and each call."""
from __future__ import annotations

import json
import subprocess

from gslice.experiment import SharingExperiment

import native_build
from results_io import Result, at_most


def rpc_roundtrip(calls: int = 3000) -> Result:
    result = Result("rpc_roundtrip", device="none (daemon round trips)")
    program = native_build.rpc_roundtrip()
    with SharingExperiment(gpu="sim") as exp:
        group = exp.add_group("bench", request=0.5, limit=1.0, memory="4GiB")  # uncapped: RPC cost, not pacing
        out = subprocess.run([str(program), str(exp.tokend.client_socket), "bench", group.secret, str(calls)],
                             capture_output=True, text=True, timeout=600, check=True).stdout
    series = json.loads(out)
    pairs = {"acquire_release", "reserve_release_memory"}  # the figures with targets
    for name, stats in series.items():
        pair = name in pairs
        result.add(f"{name}/p50", stats["p50_us"], "us", at_most(300) if pair else None)
        result.add(f"{name}/p99", stats["p99_us"], "us", at_most(1000) if pair else None)
    result.details = series
    return result
