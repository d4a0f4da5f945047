"""Round trips from the C shim's RPC client (hook/rpc_client.c) to a real
tokend over its unix socket, uncontended: AcquireToken + ReleaseToken and
ReserveMemory + ReleaseMemory, each pair and each call; beside them the
floor of this machine in the same run: an asyncio echo of a message of the
same size over a unix socket (hook/bench/socket_echo.c against
socket_echo_server.py), read by the calling thread and through a reader
thread as the shim's client reads, before and after the daemon's series."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from gslice.experiment import SharingExperiment

import native_build
from results_io import Result, at_most


ECHO_SERVER = Path(__file__).resolve().parent / "socket_echo_server.py"


def echo_floor(calls: int, program: Path | None = None) -> dict:
    """socket_echo's two modes against a fresh echo server: {mode: stats}."""
    program = program or native_build.socket_echo()
    with tempfile.TemporaryDirectory(prefix="gs-echo-", dir="/tmp") as folder:
        path = str(Path(folder) / "echo.sock")
        server = subprocess.Popen([sys.executable, str(ECHO_SERVER), path], stdout=subprocess.PIPE, text=True)
        try:
            if server.stdout.readline().strip() != "ready":
                raise RuntimeError(f"the echo server did not start (exit {server.poll()})")
            return {mode: json.loads(subprocess.run([str(program), path, str(calls), mode], capture_output=True,
                                                    text=True, timeout=600, check=True).stdout)
                    for mode in ("direct", "reader-thread")}
        finally:
            server.kill()
            server.wait()


TRANSPORTS = {"unary": ("1", "1"), "stream": ("0", "1"), "socket": ("0", "0")}   # the program's two switches


def client_round_trips(program: Path, exp, group: str, secret: str, calls: int, transport: str = "socket",
                       timeout: float = 600) -> dict:
    """The C client's series against exp's tokend (hook/bench/rpc_roundtrip.c's JSON)."""
    unary, no_socket = TRANSPORTS[transport]
    out = subprocess.run([str(program), str(exp.tokend.client_socket), group, secret, str(calls)],
                         capture_output=True, text=True, timeout=timeout, check=True,
                         env={**os.environ, "RPC_ROUNDTRIP_UNARY": unary, "RPC_ROUNDTRIP_NO_CALLS_SOCKET": no_socket})
    return json.loads(out.stdout)


def rpc_roundtrip(calls: int = 3000) -> Result:
    """The calls as the shim sends them (on client.calls), on the Calls
    stream (GSLICE_CALLS_SOCKET=0, or a daemon without the socket) and unary
    (a daemon older than the stream), against the same daemon in one run."""
    result = Result("rpc_roundtrip", device="none (daemon round trips)")
    program = native_build.rpc_roundtrip()
    runs = {}
    floors = [echo_floor(calls)]
    with SharingExperiment(gpu="sim") as exp:
        group = exp.add_group("bench", request=0.5, limit=1.0, memory="4GiB")  # uncapped: RPC cost, not pacing
        for transport in TRANSPORTS:
            runs[transport] = client_round_trips(program, exp, "bench", group.secret, calls, transport)
    floors.append(echo_floor(calls))
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
    # The floor: two echoes per pair; the reader thread's hop is the shim
    # client's (its I/O thread reads client.calls and wakes the caller).
    for i, floor in enumerate(floors):
        label = "echo" if i == 0 else "echo_again"
        for mode, stats in floor.items():
            result.add(f"floor/{label}_{mode.replace('-', '_')}/p50", stats["p50_us"], "us")
    pair_floor = 2 * min(f["reader-thread"]["p50_us"] for f in floors)
    for name in sorted(pairs):
        result.add(f"{name}/p50_beyond_two_echoes", runs["socket"][name]["p50_us"] - pair_floor, "us")
    result.details = {**runs, "echo_floor": floors}
    return result
