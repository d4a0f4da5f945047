"""Lease at start, with the real shim and the real tokend: a process that
attaches while nobody holds or waits for the token gets it as a lease
(AcquireToken lease_if_free), so its first burst, like its later ones,
starts without a round trip; a process that finds the token taken asks as
usual; an idle lessee gives the lease back as soon as someone asks."""
from __future__ import annotations

import time

from shim_harness import group_env, wait_for_line

MS = 1_000_000  # ns
MiB = 1 << 20


def _bursts(runner, tokend, group: str, secret: str, seconds: float = 1.0) -> dict:
    rc, out, err = runner.run("bursts", "driver", seconds, MS // 2, 8, 20, **group_env(tokend, group, secret))
    assert rc == 0, err
    return out


def _asked_as_usual(out: dict) -> None:
    """No lease at start: the first burst asked with AcquireToken."""
    assert int(out["shim_leases_at_start"]) == 0
    assert int(out["shim_tokens_acquired"]) >= 1


def test_a_lone_process_runs_every_burst_on_its_lease_at_start(runner, tokend):
    admin = tokend.admin()
    spec = admin.create_group("a", request=0.3, limit=1.0, memory="1GiB")
    out = _bursts(runner, tokend, "a", spec.secret)
    assert int(out["shim_leases_at_start"]) == 1
    assert int(out["shim_tokens_acquired"]) == 0                       # not one AcquireToken that waited
    assert int(out["shim_lease_resumes"]) >= int(out["bursts"]) >= 20  # each burst resumed it locally


def test_with_lease_at_start_off_the_first_burst_asks(runner, tmp_path):
    from gslice.testing import TokendProcess

    tokend = TokendProcess(tmp_path, gpu="fake", fake_gpu_memory=16 << 30, extra_args=["--lease-at-start", "off"])
    tokend.start()
    try:
        spec = tokend.admin().create_group("a", request=0.3, limit=1.0, memory="1GiB")
        out = _bursts(runner, tokend, "a", spec.secret)
    finally:
        tokend.close()
    _asked_as_usual(out)


def test_a_process_that_finds_the_token_held_gets_no_lease(runner, tokend):
    admin = tokend.admin()
    busy = admin.create_group("busy", request=0.5, limit=1.0, memory="1GiB")
    late = admin.create_group("late", request=0.5, limit=1.0, memory="1GiB")
    holder = runner.start("loop", "driver", 3.0, 2 * MS, 0, **group_env(tokend, "busy", busy.secret))
    wait_for_line(holder, "ready=1")
    # "ready" comes before the loop's first launch: wait until the busy group
    # really holds the token, or the late process may find it free.
    def busy_holds() -> bool:
        return any(c.holding and c.group == "busy" for c in admin.status().clients)

    deadline = time.monotonic() + 10
    while not busy_holds() and time.monotonic() < deadline:
        time.sleep(0.005)
    assert busy_holds(), admin.status()
    out = _bursts(runner, tokend, "late", late.secret)
    holder.wait(timeout=30)
    _asked_as_usual(out)


def test_an_idle_lessee_gives_the_lease_back_when_someone_asks(runner, tokend):
    admin = tokend.admin()
    idle = admin.create_group("idle", request=0.5, limit=1.0, memory="1GiB")
    other = admin.create_group("other", request=0.5, limit=1.0, memory="1GiB")
    # Attaches (its first allocation), takes the free token as a lease, never launches.
    lessee = runner.start("alloc", "driver", MiB, 1, "wait", stdin=True, **group_env(tokend, "idle", idle.secret))
    wait_for_line(lessee, "allocated=1")
    deadline = time.monotonic() + 10
    while not admin.status().holder_client_id and time.monotonic() < deadline:
        time.sleep(0.02)
    status = admin.status()
    assert status.holder_client_id and status.group("idle").clients, status
    with tokend.shim_client("other", other.secret) as client:
        t0 = time.monotonic()
        token = client.acquire(timeout_ms=10000)
        waited = time.monotonic() - t0
        assert admin.status().holder_client_id == client.public_id
        client.release(token, used_us=100)
    lessee.stdin.close()
    assert lessee.wait(timeout=30) == 0
    # One Revoke and one ReleaseToken through the lessee: well under grace (200 ms).
    assert waited < 0.2 * 0.9, f"the other client waited {waited * 1e3:.0f} ms for a lease nobody used"
