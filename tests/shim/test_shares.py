"""Compute shares on the simulated GPU through the real shim and tokend.

GPU time per process is exact here: the probe launches gslice_sim_sleep
kernels of a known length, so busy = launched x kernel length. These are
multi-second experiments (one shape each); the full matrix of kernel
shapes belongs to benchmarks/."""
from __future__ import annotations

import time

import pytest

from shim_harness import group_env, parse_kv, wait_for_line

SECONDS = 8
WARMUP_TICK = 3   # shares are measured from second 3 on (the 2 s window has filled)


@pytest.fixture
def tokend(tmp_path, sim_lib_dir):
    """tokend with a 2 s share window, so an 8 s run reaches steady state."""
    from gslice.testing import TokendProcess

    t = TokendProcess(tmp_path, gpu="fake", window=2.0)
    t.start()
    yield t
    t.close()


def run_pair(runner, tokend, kernel_ns: int, sync_every: int, requests=(0.3, 0.7)):
    """GPU ns each group's process got after the warm-up, and in total."""
    admin = tokend.admin()
    envs = []
    for name, request in zip("ab", requests):
        created = admin.create_group(name, request=request, limit=1.0, memory="1GiB")
        envs.append(group_env(tokend, name, created.secret))
    procs = [runner.start("loop", "driver", SECONDS, kernel_ns, sync_every, **env) for env in envs]
    for p in procs:
        wait_for_line(p, "ready=", timeout=30)
    busy = []
    for p in procs:
        kv = parse_kv(wait_for_line(p, "launched=", timeout=SECONDS + 60, collect=True))
        ticks = sorted((int(k[4:]), int(v)) for k, v in kv.items() if k.startswith("tick"))
        assert len(ticks) >= WARMUP_TICK + 2, f"too few ticks: {ticks}"
        steady = ticks[-1][1] - dict(ticks)[WARMUP_TICK]
        busy.append(steady * kernel_ns)
        p.wait(timeout=30)
        assert p.returncode == 0, p.stderr.read()
    return busy


@pytest.mark.slow
@pytest.mark.parametrize("kernel_ns,sync_every", [(200_000, 0)])
def test_30_70_share_with_kernels_that_never_synchronise(runner, tokend, kernel_ns, sync_every):
    busy = run_pair(runner, tokend, kernel_ns=kernel_ns, sync_every=sync_every)
    share_a = busy[0] / sum(busy)
    assert abs(share_a - 0.3) <= 0.04, f"group a got {share_a:.3f} of the GPU time (busy ns {busy})"


@pytest.mark.slow
def test_limit_caps_a_group_alone(runner, tokend):
    admin = tokend.admin()
    created = admin.create_group("capped", request=0.3, limit=0.3, memory="1GiB")
    p = runner.start("loop", "driver", SECONDS, 1_000_000, 0, **group_env(tokend, "capped", created.secret))
    wait_for_line(p, "ready=", timeout=30)
    t0 = time.monotonic()
    kv = parse_kv(wait_for_line(p, "launched=", timeout=SECONDS + 60, collect=True))
    elapsed = time.monotonic() - t0
    p.wait(timeout=30)
    fraction = int(kv["launched"]) * 1e6 / (elapsed * 1e9)
    assert 0.15 <= fraction <= 0.36, f"limit 0.3 alone used {fraction:.3f} of the GPU"
