"""Section i: the shim's RPC round trips to tokend on this machine (issue 23,
item 4: acquire + release p50 at most 300 us from C). The C client the shim
uses (hook/rpc_client.c and its modules, as `rpc_roundtrip`, built into the bundle by
`bundle.py prepare`) against a tokend of the installed wheel, on client.calls;
beside it, the machine's floor: an echo of a message of the same size over a
unix socket to a server that reads as tokend does, before the daemon's series
(benchmarks/exp_rpc_roundtrip.py is the same measurement on the VM)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from gslice.experiment import SharingExperiment

from harness import Context, verdict

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from exp_rpc_roundtrip import client_round_trips, echo_floor  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent.parent


def _program(name: str) -> Path | None:
    path = Path(os.environ.get("GSLICE_GPU_CHECK_BUNDLE", ROOT / "build" / "gpu-check")) / "bin" / name
    return path if path.exists() else None


def run(ctx: Context) -> None:
    rec = ctx.record
    program, echo = _program("rpc_roundtrip"), _program("socket_echo")
    if program is None:
        rec.set("round_trips", {"error": "no rpc_roundtrip in the bundle's bin/: run `scripts/gpu-check --prepare` "
                                         "on a machine with gcc and libnghttp2-dev"})
        return
    calls = ctx.count(3000, 200)
    if echo is not None:
        rec.set("echo_floor_p50_us", {mode: stats["p50_us"] for mode, stats in echo_floor(calls, echo).items()})
    with SharingExperiment(ctx.work_dir / "exp", gpu=ctx.gpu) as exp:
        group = exp.add_group("rpc", request="50%", limit="100%", memory="4GiB")
        stats = client_round_trips(program, exp, "rpc", group.secret, calls, timeout=max(30.0, ctx.left() - 5))
    rec.set("round_trips", {
        "what": f"{calls} uncontended pairs of each, from the shim's C client on client.calls; us",
        "series": stats,
        "acquire_release_p50": verdict(stats["acquire_release"]["p50_us"], high=300),
        "reserve_release_memory_p50": verdict(stats["reserve_release_memory"]["p50_us"], high=300)})
