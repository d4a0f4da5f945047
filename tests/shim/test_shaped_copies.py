"""2D, 3D, peer and batch copies under the shim on the strict simulated GPU
with the real tokend: the device-to-device ones are gated and their engine
time is charged to the group, like cuMemcpyDtoD; a 2D copy with a host side
runs on the copy engines and takes no token."""
from __future__ import annotations

import subprocess

from shim_harness import group_env, parse_kv, wait_for_line

MiB = 1 << 20


def test_2d_3d_peer_and_batch_device_copies_are_gated_and_charged(runner, tokend, memory_probe):
    """40 x 4 MiB device-side copies (10 each of cuMemcpy2D, cuMemcpy3D,
    cuMemcpyPeerAsync, cuMemcpyBatchAsync_v2) at 1 GB/s of simulated device
    bandwidth = ~170 ms of engine time, beside a group that keeps the GPU
    busy: they wait for tokens and the slices charge that time. 2D copies
    from host memory do not take tokens."""
    admin = tokend.admin()
    b = admin.create_group("b", request=0.5, limit=1.0, memory="1GiB")
    busy = runner.start("loop", "driver", 30, 200_000, 0, **group_env(tokend, "b", b.secret))
    try:
        wait_for_line(busy, "ready=", timeout=30)
        g = admin.create_group("g", request=0.5, memory="2GiB")
        env = runner.env(**group_env(tokend, "g", g.secret), GSLICE_SIM_DEVICE_GBPS="1", GSLICE_SIM_COPY_GBPS="100")
        r = subprocess.run([str(memory_probe), "shaped_copies"], env=env, capture_output=True, text=True, timeout=60)
    finally:
        busy.kill()
    assert r.returncode == 0, (r.stdout, r.stderr)
    out = parse_kv(r.stdout)
    assert int(out["device_copy_slow_entries"]) >= 1
    assert int(out["device_copy_used_us"]) >= 0.9 * 40 * 4 * MiB / 1e3   # bytes / (1 GB/s) in us
    assert out["host_copy_slow_entries"] == "0"
