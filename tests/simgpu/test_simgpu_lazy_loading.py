"""Lazy module loading on the simulated GPU (GSLICE_SIM_MODULE_LOAD_MEMORY):
a context grows at each distinct kernel's first launch, after any
allocation call, as a real driver's does (CUDA_MODULE_LOADING=LAZY), and
both cuMemGetInfo and NVML's per-process used memory see it."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gslice import simgpu

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = Path(__file__).resolve().parent / "programs"

MiB = 1 << 20


@pytest.fixture(scope="module")
def lazy_load_check(tmp_path_factory, sim_libs):
    out = tmp_path_factory.mktemp("lazy-load") / "lazy_load_check"
    subprocess.run(["gcc", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{ROOT / 'include'}", f"-I{ROOT / 'simgpu'}",
                    str(PROGRAMS / "lazy_load_check.c"), "-o", str(out), "-L", str(sim_libs), "-lcuda",
                    "-lnvidia-ml"], check=True)
    return out


def test_first_launch_of_each_function_grows_its_context(lazy_load_check, processes, sim_name, parse):
    environ = simgpu.env(sim_name, memory="1GiB")
    environ["GSLICE_SIM_MODULE_LOAD_MEMORY"] = "16MiB"
    v = parse(processes.run([lazy_load_check], environ).stdout)
    assert v["after_first_launch"] == str(16 * MiB)
    assert v["after_second_launch"] == str(16 * MiB)     # loaded once per context
    assert v["after_other_function"] == str(32 * MiB)
    assert v["nvml_growth"] == str(32 * MiB)             # NVML's per-process figure sees it
    assert v["created_context_load"] == str(16 * MiB)    # each context loads its own copy
    assert v["after_destroy"] == str(32 * MiB)           # the destroyed context's code went with it
    assert v["launch_when_full"] == "2"                  # CUDA_ERROR_OUT_OF_MEMORY


def test_without_the_setting_launches_take_no_memory(lazy_load_check, processes, sim_name, parse):
    v = parse(processes.run([lazy_load_check], simgpu.env(sim_name, memory="1GiB")).stdout)
    assert v["after_other_function"] == "0"
    assert v["launch_when_full"] == "0"
