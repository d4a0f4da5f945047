"""Compute shares on the simulated GPU through the real shim and tokend.

GPU time per process is what the simulated engine ran for it (recorded per
process by the simulator), over one wall-clock interval. These are
multi-second experiments (one shape each); the full matrix of kernel
shapes belongs to benchmarks/."""
from __future__ import annotations

import time

import pytest

from shim_harness import GATE_CUT, group_env, wait_for_line

SECONDS = 8
WARMUP_TICK = 3   # shares are measured from second ~3 on (the 2 s window has filled)
MEASURE_SECONDS = 3.5


@pytest.fixture
def tokend(tmp_path, sim_lib_dir):
    """tokend with a 2 s share window, so an 8 s run reaches steady state."""
    from gslice.testing import TokendProcess

    t = TokendProcess(tmp_path, gpu="fake", window=2.0)
    t.start()
    yield t
    t.close()


def run_loops(runner, envs: dict[str, dict], kernel_ns: int, sync_every: int) -> tuple[dict[str, int], float]:
    """Engine time each group's process used over one common steady-state
    interval, once all run and the 2 s window has filled (the simulator
    records it per process, labelled with GSLICE_GROUP), and the interval's
    length in seconds. One interval for all: processes start at different
    moments, and each one's own clock would misalign."""
    import gslice.simgpu as simgpu

    procs = [runner.start("loop", "driver", SECONDS, kernel_ns, sync_every, **env) for env in envs.values()]
    for p in procs:
        wait_for_line(p, "ready=", timeout=30)
    time.sleep(WARMUP_TICK - 0.5)
    with simgpu.SimGpu(runner.base_env["GSLICE_SIM_NAME"]) as sim:
        before, t0 = sim.busy_ns_by_label(), time.monotonic()
        time.sleep(MEASURE_SECONDS)
        after, t1 = sim.busy_ns_by_label(), time.monotonic()
    for p in procs:
        wait_for_line(p, "launched=", timeout=SECONDS + 60, collect=True)
        p.wait(timeout=30)
        assert p.returncode == 0, p.stderr.read()
    return {name: after.get(name, 0) - before.get(name, 0) for name in envs}, t1 - t0


def run_pair(runner, tokend, kernel_ns: int, sync_every: int, requests=(0.3, 0.7)) -> list[int]:
    """Engine time (ns) of groups a and b, asking `requests`, both always wanting the GPU."""
    admin = tokend.admin()
    envs = {}
    for name, request in zip("ab", requests):
        created = admin.create_group(name, request=request, limit=1.0, memory="1GiB")
        envs[name] = group_env(tokend, name, created.secret)
    busy, _ = run_loops(runner, envs, kernel_ns, sync_every)
    return [busy["a"], busy["b"]]


@pytest.mark.timing
@pytest.mark.slow
@pytest.mark.parametrize("kernel_ns,sync_every,shim_build", [(200_000, 0, "normal"), (200_000, 0, GATE_CUT)],
                         indirect=["shim_build"])
def test_30_70_share_with_kernels_that_never_synchronise(runner, tokend, kernel_ns, sync_every, shim_build):
    busy = run_pair(runner, tokend, kernel_ns=kernel_ns, sync_every=sync_every)
    share_a = busy[0] / sum(busy)
    print(f"shim {shim_build.cut or 'normal'}: group a got {share_a:.3f} of the GPU time (busy ns {busy})")
    with shim_build.expect_feature():
        assert abs(share_a - 0.3) <= 0.04, f"group a got {share_a:.3f} of the GPU time (busy ns {busy})"


def run_capped_alone(runner, tokend, mode: str, kernel_ns: int, sync_every: int) -> tuple[float, float]:
    """A group alone with request and limit 0.3 runs cuda_probe `mode`
    wanting all of the GPU. Returns, over one steady-state interval, the
    fraction of the engine's time its process used (the simulator's record)
    and the fraction tokend charged it (exclusive slice time: grant received
    to its work finished)."""
    import gslice.simgpu as simgpu

    admin = tokend.admin()
    created = admin.create_group("capped", request=0.3, limit=0.3, memory="1GiB")
    p = runner.start(mode, "driver", SECONDS, kernel_ns, sync_every, **group_env(tokend, "capped", created.secret))
    wait_for_line(p, "ready=", timeout=30)
    time.sleep(WARMUP_TICK - 0.5)
    with simgpu.SimGpu(runner.base_env["GSLICE_SIM_NAME"]) as sim:
        busy0, charged0, t0 = sim.busy_ns_by_label().get("capped", 0), admin.status().group("capped").charged_seconds, \
            time.monotonic()
        time.sleep(MEASURE_SECONDS + 0.5)
        busy1, charged1, t1 = sim.busy_ns_by_label().get("capped", 0), admin.status().group("capped").charged_seconds, \
            time.monotonic()
    wait_for_line(p, "launched=", timeout=SECONDS + 60, collect=True)
    p.wait(timeout=30)
    assert p.returncode == 0, p.stderr.read()
    return (busy1 - busy0) / 1e9 / (t1 - t0), (charged1 - charged0) / (t1 - t0)


# A loaded host idles part of each slice: the process is not running when
# its grant arrives or its last kernel ends. That time is charged (nobody
# else may use the GPU meanwhile), so the engine time comes out under the
# charge: 0.262-0.29 for 0.300 on this 2-core VM, 0.24 with four busy loops
# beside it, 0.21 once in CI. The cap is tokend's charge; the engine's
# record shows the work ran inside it and never past it.
HOST_IDLE_MAX = 0.4   # the most of a charged slice a loaded host may idle


@pytest.mark.slow
@pytest.mark.parametrize("shim_build", ["normal", GATE_CUT], indirect=True)
def test_limit_caps_a_group_alone(runner, tokend, shim_build):
    """A group alone, wanting all of the GPU (unsynced 1 ms kernels), with
    limit 0.3: tokend charges it 30% +- 3 points of the wall time, and the
    engine ran it for no more than that (gate cut: ~100%, charged ~0)."""
    gpu, charged = run_capped_alone(runner, tokend, "loop", 1_000_000, 0)
    print(f"shim {shim_build.cut or 'normal'}: limit 0.3 alone used {gpu:.3f} of the GPU, charged {charged:.3f}")
    with shim_build.expect_feature():
        assert abs(charged - 0.3) <= 0.03, f"limit 0.3 alone was charged {charged:.3f} (GPU {gpu:.3f})"
        assert gpu <= charged + 0.01, f"limit 0.3 alone used {gpu:.3f} of the GPU, charged {charged:.3f}"
        assert gpu >= (1 - HOST_IDLE_MAX) * charged, (
            f"limit 0.3 alone used {gpu:.3f} of the GPU for a charge of {charged:.3f}")


@pytest.mark.timing
@pytest.mark.slow
def test_limit_caps_long_synced_kernels_by_gpu_time_and_charges_it(runner, tokend):
    """A group alone with limit 0.3 whose program waits for each 12.5 ms
    kernel (a 0 ns kernel of the same function before every other one: the
    real-GPU check's probe) is charged 30% of the wall time, and nothing the
    engine ran for it goes uncharged (issue 24). The short kernel grows the
    launch countdown, so a long kernel may pass the gate with no fit check
    and no checkpoint; a slice ended at its quantum then released at once
    and that kernel ran uncharged in the group's own pause: 41.4% of the GPU,
    charged 30.0%. Fixed (the slice waits for its work when nobody else
    wants the GPU): 29.2-29.3%, charged 29.9-30.0% on a loaded 2-core
    machine (28.1% for 30.0% once in CI: the host's gaps between a kernel's
    end and the next launch are charged)."""
    gpu, charged = run_capped_alone(runner, tokend, "synced", 12_500_000, 2)
    print(f"limit 0.3 alone, 12.5 ms synced kernels: {gpu:.4f} of the GPU, charged {charged:.4f}")
    assert abs(charged - 0.3) <= 0.02, f"limit 0.3 alone was charged {charged:.4f} (GPU {gpu:.4f})"
    assert gpu <= charged + 0.015, f"the engine ran {gpu:.4f} of the wall time for a charge of {charged:.4f}"
    assert gpu >= (1 - HOST_IDLE_MAX) * charged, f"used {gpu:.4f} of the GPU for a charge of {charged:.4f}"
