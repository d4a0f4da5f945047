"""Round trips from the C shim's RPC client (hook/rpc_client.c) to a real
tokend over its unix socket, uncontended: AcquireToken + ReleaseToken and
ReserveMemory + ReleaseMemory, each pair and each call."""
from __future__ import annotations

import json
import os
import subprocess

from gslice.experiment import SharingExperiment

import native_build
from results_io import Result, at_most


def rpc_roundtrip(calls: int = 3000) -> Result:
    """The calls as the shim sends them (on client.calls), on the Calls
    stream (GSLICE_CALLS_SOCKET=0, or a daemon without the socket) and unary
    (a daemon older than the stream), against the same daemon in one run."""
    result = Result("rpc_roundtrip", device="none (daemon round trips)")
    program = native_build.rpc_roundtrip()
    runs = {}
    with SharingExperiment(gpu="sim") as exp:
        group = exp.add_group("bench", request=0.5, limit=1.0, memory="4GiB")  # uncapped: RPC cost, not pacing
        for transport, unary, no_socket in (("unary", "1", "1"), ("stream", "0", "1"), ("socket", "0", "0")):
            out = subprocess.run([str(program), str(exp.tokend.client_socket), "bench", group.secret, str(calls)],
                                 capture_output=True, text=True, timeout=600, check=True,
                                 env={**os.environ, "RPC_ROUNDTRIP_UNARY": unary,
                                      "RPC_ROUNDTRIP_NO_CALLS_SOCKET": no_socket}).stdout
            runs[transport] = json.loads(out)
    pairs = {"acquire_release", "reserve_release_memory"}  # the figures with targets
    for name, stats in runs["socket"].items():
        pair = name in pairs
        result.add(f"{name}/p50", stats["p50_us"], "us", at_most(300) if pair else None)
        result.add(f"{name}/p99", stats["p99_us"], "us", at_most(1000) if pair else None)
    for name in sorted(pairs):
        for other in ("stream", "unary"):
            result.add(f"{other}/{name}/p50", runs[other][name]["p50_us"], "us")
            result.add(f"{other}/{name}/p99", runs[other][name]["p99_us"], "us")
        result.add(f"socket_over_stream/{name}/p50", runs["socket"][name]["p50_us"] / runs["stream"][name]["p50_us"],
                   "x")
        result.add(f"stream_over_unary/{name}/p50", runs["stream"][name]["p50_us"] / runs["unary"][name]["p50_us"],
                   "x")
    result.details = runs
    return result
