"""Section g: graph capture and replay beside a busy group, in each capture mode.

A valid capture (warm-up on a side stream, no other thread touching CUDA
while it captures) of 1000 matmul+relu steps with sleeps inside, so it
spans several of the shim's slices, while another group keeps the GPU busy.
The same capture bare first (it must work without gslice, else the failure
is the workload's). Tokens are counted only around the replays: the attach
(and a lease at start) happened before.

Then a GLOBAL capture while another thread of the same process launches
matmuls on its own stream without synchronising (legal in CUDA: that thread
makes no potentially unsafe call), so that thread's gate asks for tokens
during the capture: the shim's own calls on it must not invalidate the
capture (they did now and then until 2026-11-28, test_capture.py)."""
from __future__ import annotations

from gslice.experiment import SharingExperiment

from harness import Context, Worker, verdict, wait_ready

MODES = ("global", "thread_local", "relaxed")


def run(ctx: Context) -> None:
    rec = ctx.record
    kernels = ctx.count(1000, 200)
    replays = ctx.count(20, 5)
    with SharingExperiment(ctx.work_dir / "exp", gpu=ctx.gpu) as exp:
        exp.add_group("busy", request="25%", limit="100%", memory="4GiB")
        busy = Worker(exp, "busy", ctx.backend, "busy", ctx.work_dir)
        workers = {}
        for mode in MODES:
            exp.add_group(f"g-{mode}", request="25%", limit="100%", memory="8GiB")
            workers[mode] = (Worker(exp, f"g-{mode}", ctx.backend, f"bare-{mode}", ctx.work_dir, shim=False),
                             Worker(exp, f"g-{mode}", ctx.backend, f"shim-{mode}", ctx.work_dir))
        try:
            wait_ready([busy] + [w for pair in workers.values() for w in pair], min(150.0, ctx.left()))
            busy.call("neighbour_start", 30, unit="mm4096h", sync_every=4)
            for mode, (bare, shim) in workers.items():
                result = {"what": f"torch.cuda.graph-style capture of {kernels} steps in {mode} mode beside a busy "
                                  f"group, {replays} replays"}
                try:
                    result["bare"] = {**bare.call("capture", 120, mode=mode, kernels=kernels, sleep_every=100),
                                      **bare.call("replay", 120, count=1)}
                except Exception as exc:
                    result["skipped"] = f"the capture fails bare too (the workload's failure, not gslice's): {exc}"
                    rec.set(f"capture_{mode}", result)
                    continue
                try:
                    result["shim"] = shim.call("capture", 120, mode=mode, kernels=kernels, sleep_every=100)
                    before = exp.admin.status().group(f"g-{mode}").tokens_granted
                    result["shim"].update(shim.call("replay", 300, count=replays))
                    after = exp.admin.status().group(f"g-{mode}").tokens_granted
                    result["tokens_around_replays"] = after - before
                    result["replay_output_finite"] = bool(result["shim"].get("finite"))
                    result["target"] = verdict(after - before, low=1)
                except Exception as exc:
                    result["error"] = f"{type(exc).__name__}: {exc}"
                rec.set(f"capture_{mode}", result)
            bare, shim = workers["global"]
            result = {"what": f"GLOBAL capture of {kernels} steps while another thread of the process launches "
                              f"matmuls on its own stream, beside a busy group"}
            try:
                result["bare"] = bare.call("capture_beside_own_launches", 180, mode="global", kernels=kernels,
                                           sleep_every=100)
            except Exception as exc:
                result["skipped"] = f"the capture fails bare too (the workload's failure, not gslice's): {exc}"
            if "skipped" not in result:
                try:
                    result["shim"] = shim.call("capture_beside_own_launches", 180, mode="global", kernels=kernels,
                                               sleep_every=100)
                except Exception as exc:
                    result["error"] = f"{type(exc).__name__}: {exc}"
                result["target"] = verdict(int("shim" in result), low=1)
            rec.set("capture_global_beside_own_launches", result)
            busy.call("neighbour_stop", 120)
        finally:
            busy.close()
            for pair in workers.values():
                for w in pair:
                    w.close()
