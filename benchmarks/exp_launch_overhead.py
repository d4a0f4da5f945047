"""Fast-path overhead: ns added per kernel launch by the shim while it holds
a valid token, against the same program without the shim, in one run.

hook/bench/launch_overhead.c times batches of cuLaunchKernel; the minimum
batch is the steady fast path (a new slice's first launch takes the slow
path and lands in the median). Runs with and without the shim alternate, so
both see the same machine. Two drivers: a stub libcuda whose launch returns
at once (only the shim's own cost remains: the figure held to the 10 ns
target) and the simulated GPU (whose queueing costs far more than the shim)."""
from __future__ import annotations

import os
import statistics
import subprocess

import gslice.simgpu as simgpu
from gslice.experiment import SharingExperiment

import native_build
from results_io import Result


def _run(program, env: dict, batches: int, batch: int) -> dict:
    out = subprocess.run([str(program), str(batches), str(batch)], env=env, capture_output=True, text=True,
                         timeout=600, check=True).stdout
    return {k: float(v) for k, v in (line.split("=", 1) for line in out.split())}


def launch_overhead(launches: int = 4_000_000, repeats: int = 5, batch: int = 20_000) -> Result:
    result = Result("launch_overhead", device="simulated GPU and a stub driver")
    program = native_build.launch_overhead(simgpu.lib_dir())
    stub_dir = native_build.stub_libcuda()
    batches = max(1, launches // batch)
    details: dict = {}
    with SharingExperiment(gpu="sim") as exp:
        exp.add_group("bench", request=0.5, memory="1GiB")
        shim_env = exp.process_env("bench")
        bare_env = {k: v for k, v in shim_env.items() if k != "LD_PRELOAD"}
        for driver, lib_dir, sim_batch in (("stub", stub_dir, batch), ("sim", None, batch // 10)):
            runs = {"bare": [], "shim": []}
            for _ in range(repeats):
                for name, base in (("bare", bare_env), ("shim", shim_env)):
                    env = dict(base, GSLICE_SIM_KERNEL_US="0")
                    if lib_dir is not None:
                        env["LD_LIBRARY_PATH"] = f"{lib_dir}:{env.get('LD_LIBRARY_PATH', '')}"
                    runs[name].append(_run(program, env, batches if driver == "stub" else max(1, batches // 10),
                                           sim_batch))
            bare = min(r["min_ns"] for r in runs["bare"])
            shim = min(r["min_ns"] for r in runs["shim"])
            details[driver] = {
                "bare_min_ns": [r["min_ns"] for r in runs["bare"]], "shim_min_ns": [r["min_ns"] for r in runs["shim"]],
                "bare_median_ns": statistics.median(r["median_ns"] for r in runs["bare"]),
                "shim_median_ns": statistics.median(r["median_ns"] for r in runs["shim"])}
            target = "<= 10" if driver == "stub" else ""
            result.add(f"{driver}/added_ns_per_launch", shim - bare, "ns", target)
            result.add(f"{driver}/ratio_shim_over_bare", shim / bare, "x")
            result.add(f"{driver}/bare_ns_per_launch", bare, "ns")
    details["cpu_count"] = os.cpu_count()
    result.details = details
    return result
