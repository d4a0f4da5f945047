"""Fast-path overhead: ns added per kernel launch by the shim while it holds
a valid token, against the same program without the shim, in one run.

hook/bench/launch_overhead.c times batches of cuLaunchKernel; the minimum
batch is the steady fast path (a new slice's first launch takes the slow
path and lands in the median). Runs bare, with the shim and bare again
alternate, so all see the same machine; bare again against bare is the
comparison's noise floor. Two drivers: a stub libcuda whose launch returns
at once (only the shim's own cost remains: the figure held to the 10 ns
target) and the simulated GPU (whose queueing costs far more than the shim)."""
from __future__ import annotations

import os
import statistics
import subprocess

import gslice.simgpu as simgpu
from gslice.experiment import SharingExperiment

import native_build
from results_io import Result, at_most

SERIES = ("bare", "shim", "bare_again")


def _run(program, env: dict, batches: int, batch: int) -> dict:
    proc = subprocess.run([str(program), str(batches), str(batch)], env=env, capture_output=True, text=True,
                          timeout=600)
    if proc.returncode != 0:  # e.g. a launch the driver or the shim refused: no figure from a failed run
        raise RuntimeError(f"{program} {batches} {batch} (LD_PRELOAD={env.get('LD_PRELOAD', '')!r}) exited "
                           f"{proc.returncode}: {proc.stderr.strip()[-2000:]}")
    return {k: float(v) for k, v in (line.split("=", 1) for line in proc.stdout.split())}


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
            runs = {name: [] for name in SERIES}
            for _ in range(repeats):
                for name in SERIES:
                    env = dict(shim_env if name == "shim" else bare_env, GSLICE_SIM_KERNEL_US="0")
                    if lib_dir is not None:
                        env["LD_LIBRARY_PATH"] = f"{lib_dir}:{env.get('LD_LIBRARY_PATH', '')}"
                    runs[name].append(_run(program, env, batches if driver == "stub" else max(1, batches // 10),
                                           sim_batch))
            bare, shim, bare_again = (min(r["min_ns"] for r in runs[name]) for name in SERIES)
            details[driver] = {name: {"min_ns": [r["min_ns"] for r in runs[name]],
                                      "median_ns": statistics.median(r["median_ns"] for r in runs[name])}
                               for name in SERIES}
            target = at_most(10) if driver == "stub" else None
            result.add(f"{driver}/added_ns_per_launch", shim - bare, "ns", target,
                       noise=f"{driver}/bare_again_added_ns_per_launch")
            result.add(f"{driver}/bare_again_added_ns_per_launch", bare_again - bare, "ns")
            result.add(f"{driver}/ratio_shim_over_bare", shim / bare, "x", noise=f"{driver}/ratio_bare_again_over_bare")
            result.add(f"{driver}/ratio_bare_again_over_bare", bare_again / bare, "x")
            result.add(f"{driver}/bare_ns_per_launch", bare, "ns")
    details["cpu_count"] = os.cpu_count()
    result.details = details
    return result
