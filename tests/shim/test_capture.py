"""Graph capture under the shim, on the strict simulated GPU, with two
groups and the real tokend: a ~1000-launch capture that spans many of the
process's own slices (a second thread keeps its gate, checkpoints and
keeper busy) succeeds in every capture mode while another group saturates
the GPU; the captured launches are neither gated nor run; the replays are
gated (tokens) and charged (the slice time covers their GPU time)."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from shim_harness import GATE_CUT, PROGRAMS, ROOT, group_env, parse_kv, wait_for_line

LAUNCHES = 1000
KERNEL_NS = 100_000      # 1000 x 0.1 ms = 100 ms of GPU time per replay
REPLAYS = 3


@pytest.fixture(scope="module")
def capture_probe(tmp_path_factory, sim_lib_dir) -> Path:
    out = tmp_path_factory.mktemp("capture") / "capture_probe"
    subprocess.run(["gcc", "-O2", "-Wall", f"-I{ROOT / 'include'}", str(PROGRAMS / "capture_probe.c"),
                    f"-L{sim_lib_dir}", "-l:libcuda.so.1", "-ldl", "-lpthread", "-o", str(out)], check=True)
    return out


def capture_beside_a_busy_group(runner, tokend, capture_probe, *args) -> tuple[subprocess.CompletedProcess, dict]:
    """capture_probe ARGS in group a while group b saturates the GPU
    (both 50%); the probe's result and its key=value lines."""
    admin = tokend.admin()
    a = admin.create_group("a", request=0.5, limit=1.0, memory="1GiB")
    b = admin.create_group("b", request=0.5, limit=1.0, memory="1GiB")
    busy = runner.start("loop", "driver", 30, 200_000, 0, **group_env(tokend, "b", b.secret))
    wait_for_line(busy, "ready=", timeout=30)
    env = runner.env(**group_env(tokend, "a", a.secret))
    result = subprocess.run([str(capture_probe), *map(str, args)], env=env, capture_output=True, text=True,
                            timeout=120)
    busy.kill()
    return result, parse_kv(result.stdout)


@pytest.mark.parametrize("mode,shim_build", [("global", "normal"), ("local", "normal"), ("relaxed", "normal"),
                                             ("global", GATE_CUT)], indirect=["shim_build"])
def test_capture_beside_a_busy_group_succeeds_and_replays_are_gated_and_charged(runner, tokend, capture_probe,
                                                                                 mode, shim_build):
    import gslice.simgpu as simgpu

    result, out = capture_beside_a_busy_group(runner, tokend, capture_probe, mode, LAUNCHES, KERNEL_NS, REPLAYS)
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert out["launch_rc"] == "0" and out["end_rc"] == "0"
    assert int(out["background_launches"]) > 0
    assert out["nodes"] == str(LAUNCHES)
    assert out["stats_found"] == "1"
    with shim_build.expect_feature():
        # Replays waited for tokens while group b held the GPU ...
        assert int(out["replay_tokens"]) >= 1
        # ... and the slices charged at least the replays' GPU time.
        assert int(out["replay_used_us"]) >= REPLAYS * LAUNCHES * KERNEL_NS // 1000 * 0.95
    with simgpu.SimGpu(runner.base_env["GSLICE_SIM_NAME"]) as sim:
        mine = [p for p in sim.processes() if p.label == "a"]
        assert len(mine) == 1
        # Captured launches did not run; each replay ran all of them.
        assert mine[0].kernels_completed == int(out["background_launches"]) + REPLAYS * LAUNCHES


def test_many_global_captures_beside_the_shims_own_calls_on_another_thread(runner, tokend, capture_probe):
    """The shim's driver calls on an application thread (checkpoints,
    pacing waits) must not invalidate a GLOBAL capture that another thread
    begins at any moment, including between the shim's decision and its call."""
    result, out = capture_beside_a_busy_group(runner, tokend, capture_probe, "global", 4, KERNEL_NS, 1, 3000)
    assert int(out["background_launches"]) > 0
    assert out["captures_failed"] == "0", (result.stdout, result.stderr)
    assert result.returncode == 0, (result.stdout, result.stderr)


@pytest.mark.parametrize("think_us", [pytest.param(0, id="asks_with_checkpoints_pending"),
                                      pytest.param(10_000, id="bursts_ended_at_their_synchronisation")])
def test_a_held_global_capture_survives_the_gate_of_another_thread(runner, tokend, capture_probe, think_us):
    """The shim's own event queries on an application thread run in RELAXED
    mode wherever they happen: when its gate asks for a token with
    checkpoints still pending (the lengths taken in for the ask), and when a
    bursty holder's synchronisation checks for queued work (gate_burst_end.c).
    A GLOBAL capture held open on another thread, with nothing in it, must
    not be invalidated by them. Beside a busy group, the launching thread
    asks for tokens again and again while the capture is open."""
    result, out = capture_beside_a_busy_group(runner, tokend, capture_probe, "held", 1500, think_us)
    assert out["stats_found"] == "1"
    assert int(out["held_tokens"]) >= 3, (result.stdout, result.stderr)
    assert out["end_rc"] == "0", (result.stdout, result.stderr)
    assert result.returncode == 0, (result.stdout, result.stderr)
