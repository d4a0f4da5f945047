"""2D fills (cuMemsetD2D8/16/32, where cudaMemset2D(Async) lands) and copies
between CUDA arrays and device memory (cuMemcpyAtoA / DtoA / AtoD) run on
the GPU like the 1D fills and device copies: under the shim they take the
launch path (gated, their GPU time in the group's slices). Before, no row
intercepted them and a loop of them used the GPU without a token."""
from __future__ import annotations

from shim_harness import group_env, wait_for_line
from test_memory_routes import run_probe

MiB = 1 << 20


def test_2d_fills_and_array_copies_are_gated_and_charged(runner, tokend, memory_probe):
    """50 x 4 MiB (10 each of cuMemsetD2D32_v2, cuMemsetD2D8Async,
    cuMemcpyAtoA_v2, cuMemcpyDtoA_v2, cuMemcpyAtoD_v2) at 1 GB/s of
    simulated device bandwidth = ~210 ms of engine time, beside a group that
    keeps the GPU busy: they wait for tokens and the slices charge that time."""
    admin = tokend.admin()
    b = admin.create_group("b", request=0.5, limit=1.0, memory="1GiB")
    busy = runner.start("loop", "driver", 30, 200_000, 0, **group_env(tokend, "b", b.secret))
    wait_for_line(busy, "ready=", timeout=30)
    out = run_probe(runner, tokend, memory_probe, "fills_2d", GSLICE_SIM_DEVICE_GBPS="1")
    busy.kill()
    assert int(out["device_copy_slow_entries"]) >= 1
    assert int(out["device_copy_used_us"]) >= 0.9 * 50 * 4 * MiB / 1e3   # bytes / (1 GB/s) in us
