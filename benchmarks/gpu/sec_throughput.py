"""Sections a and b: a lone tenant's throughput (also with its launching
thread stalling, which the queue it keeps must ride out) and the per-launch
overhead.

Three warm processes: bare A, bare B (no shim) and S under the shim in a
group with request 100%. Each round runs them one after another (order
rotated), so shim/bare pairs are interleaved and bare B / bare A is the
noise of the same run."""
from __future__ import annotations

from gslice.experiment import SharingExperiment

from harness import Context, Worker, ratio_summary, verdict, wait_ready


def _rounds(ctx: Context, workers, op: str, timeout: float, key, rounds: int, **args) -> list[dict]:
    a, b, s = workers
    out = []
    for r in range(rounds):
        order = [(a, s, b), (s, b, a), (b, a, s)][r % 3]
        row = {}
        for w in order:
            row[w.label] = key(w.call(op, timeout, **args))
        out.append(row)
    return out


def _matmul_throughput(ctx: Context, workers, rounds: int, seconds: float, shape: str, **loop) -> dict:
    """A lone 4096 fp16 matmul loop (`loop`: the served throughput op's
    sync and stall arguments), bare A / shim / bare B interleaved;
    iterations per second, shim over bare A beside bare B over bare A."""
    rows = _rounds(ctx, workers, "throughput", seconds + 60, lambda r: r["iterations"] / r["seconds"],
                   rounds, unit="mm4096h", seconds=seconds, **loop)
    shim = ratio_summary([row["shim"] / row["bare-a"] for row in rows])
    noise = ratio_summary([row["bare-b"] / row["bare-a"] for row in rows])
    return {"what": f"4096x4096 fp16 matmul loop, {shape}, {seconds} s per run, {rounds} rounds of "
                    "bare A / shim / bare B (order rotated); iterations per second",
            "rounds": rows, "shim_over_bare": shim, "bare_b_over_bare_a": noise,
            "target": verdict(shim.get("median"), low=0.99)}


def run(ctx: Context) -> None:
    rec = ctx.record
    with SharingExperiment(ctx.work_dir / "exp", gpu=ctx.gpu) as exp:
        exp.add_group("lone", request="100%", limit="100%", memory="8GiB")
        workers = [Worker(exp, "lone", ctx.backend, "bare-a", ctx.work_dir, shim=False),
                   Worker(exp, "lone", ctx.backend, "bare-b", ctx.work_dir, shim=False),
                   Worker(exp, "lone", ctx.backend, "shim", ctx.work_dir, shim=True)]
        try:
            wait_ready(workers, min(120.0, ctx.left()))
            rec.set("setup_s", {w.label: w.ready["setup_s"] for w in workers})

            # a. lone-tenant throughput: 4096 fp16 matmuls, 4 per sync.
            seconds = ctx.seconds(1.5, 0.3)
            rec.set("lone_throughput", _matmul_throughput(
                ctx, workers, ctx.count(5, 2), seconds, "4 per sync", sync_every=4))
            # a2. the same alone, its launching thread stalling 3 ms after every
            # 48 matmuls (~10 ms of GPU work), synchronising every 96: bare,
            # the driver's queue rides the stalls out; so must the shim's
            # (hook/queue_bound.c: a holder alone keeps ~8 ms queued, where
            # a shared one keeps ~2 ms).
            rec.set("lone_throughput_host_stalls", _matmul_throughput(
                ctx, workers, ctx.count(4, 2), seconds, "a 3 ms host stall after every 48, sync every 96",
                sync_every=96, stall_every=48, stall_ms=3.0))

            # b. per-launch overhead: x.add_ on 1024 floats, sync every 2000.
            launches = ctx.count(50000, 2000)
            rounds = ctx.count(7, 2)
            rows = _rounds(ctx, workers, "launch", 120, lambda r: r["ns_per_launch"], rounds,
                           launches=launches, sync_every=2000)
            shim = ratio_summary([row["shim"] / row["bare-a"] for row in rows])
            noise = ratio_summary([row["bare-b"] / row["bare-a"] for row in rows])
            added = ratio_summary([row["shim"] - row["bare-a"] for row in rows])
            noise_ns = ratio_summary([row["bare-b"] - row["bare-a"] for row in rows])
            rec.set("launch_overhead", {
                "what": f"launch-bound loop (add_ on 1024 floats, sync every 2000), {launches} launches per run, "
                        f"{rounds} rounds of bare A / shim / bare B; ns per launch",
                "rounds": rows, "shim_over_bare": shim, "bare_b_over_bare_a": noise,
                "added_ns": added, "bare_b_minus_bare_a_ns": noise_ns,
                "target": verdict(shim.get("median"), high=1.01)})
        finally:
            for w in workers:
                w.close()
