"""Process lifecycle under the shim: kill -9, fork, daemon restart and a
daemon that is not there."""
from __future__ import annotations

import os
import re
import select
import signal
import time

import pytest

from shim_harness import GATE_CUT, assert_charged_for, group_env, parse_kv, sim_busy_seconds, wait_for_line

MiB = 1 << 20


def read_stderr_until(proc, needle: str, timeout: float) -> str:
    """Reads proc's stderr (raw fd) until needle appears."""
    fd = proc.stderr.fileno()
    text = ""
    deadline = time.monotonic() + timeout
    while needle not in text:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"{needle!r} not in stderr within {timeout} s: {text!r}")
        ready, _, _ = select.select([fd], [], [], min(left, 0.2))
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                raise AssertionError(f"stderr closed before {needle!r}: {text!r}")
            text += chunk.decode(errors="replace")
    return text


@pytest.fixture
def long_grace_tokend(tmp_path):
    """A tokend whose grace after a Revoke is 60 s: only noticing the holder's
    death can free its token within a test."""
    from gslice.testing import TokendProcess

    t = TokendProcess(tmp_path, gpu="fake", fake_gpu_memory=16 << 30, extra_args=["--grace-ms", "60000"])
    t.start()
    yield t
    t.close()


def test_kill_9_of_the_holder_frees_token_and_memory(runner, long_grace_tokend):
    tokend = long_grace_tokend
    admin = tokend.admin()
    a = admin.create_group("a", request=0.5, limit=1.0, memory="1GiB")
    b = admin.create_group("b", request=0.5, limit=1.0, memory="1GiB")
    holder = runner.start("hold", "driver", 256 * MiB, **group_env(tokend, "a", a.secret))
    wait_for_line(holder, "ready=", timeout=30)
    assert admin.status().group("a").memory_used == 256 * MiB
    with tokend.shim_client("b", b.secret) as other:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=10)
        t0 = time.monotonic()
        token = other.acquire(timeout_ms=10000)
        waited = time.monotonic() - t0
        other.release(token, used_us=100)
    # At once (a dropped connection frees the token), not after a revoke and
    # the 60 s grace (1.0 s: a wide margin on a loaded machine).
    assert waited < 1.0, f"the other group waited {waited:.2f} s for the token after kill -9"
    deadline = time.monotonic() + 3.0
    while admin.status().group("a").memory_used and time.monotonic() < deadline:
        time.sleep(0.05)
    assert admin.status().group("a").memory_used == 0


@pytest.mark.parametrize("shim_build", ["normal", GATE_CUT], indirect=True)
def test_forked_child_is_metered_as_its_own_client(runner, tokend, shim_build):
    created = tokend.admin().create_group("g", request=0.5, memory="1GiB")
    launches, kernel_ns = 200, 20000
    rc, out, err = runner.run("fork", launches, kernel_ns, GSLICE_LOG_LEVEL="info",
                              **group_env(tokend, "g", created.secret))
    assert rc == 0, err
    assert out["child_status"] == "0", err
    attached = re.findall(r"gslice\[(\d+)\]: info: attached to tokend", err)
    assert len(attached) == len(set(attached)), err   # no process attached twice
    # Parent and child each attached: the child's launches wait for its own
    # token. (With the gate cut they do not, and the child may run its 4 ms
    # of launches and exit before its Attach is answered on a loaded machine.)
    assert len(set(attached)) == 2 or (shim_build.cut and len(set(attached)) == 1), err
    with shim_build.expect_feature():
        assert_charged_for(tokend.admin(), "g", launches * kernel_ns / 1e9)   # the child's launches


def test_daemon_restart_mid_run_does_not_break_the_app(runner, tokend):
    created = tokend.admin().create_group("g", request=0.5, limit=1.0, memory="1GiB")
    p = runner.start("loop", "driver", 6, 200_000, 0, GSLICE_LOG_LEVEL="info",
                     **group_env(tokend, "g", created.secret))
    wait_for_line(p, "ready=", timeout=30)
    time.sleep(1.5)
    tokend.restart()
    admin = tokend.admin()
    deadline = time.monotonic() + 30
    while admin.status().group("g").clients != 1 and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    # GPU time from the re-attach on (the new daemon grants every slice of it).
    busy_from = sim_busy_seconds(runner.base_env["GSLICE_SIM_NAME"], "g")
    kv = parse_kv(wait_for_line(p, "launched=", timeout=60, collect=True))
    p.wait(timeout=30)
    err = p.stderr.read()
    assert p.returncode == 0, err
    assert int(kv["launched"]) > 0
    assert "re-attached to tokend" in err
    busy = sim_busy_seconds(runner.base_env["GSLICE_SIM_NAME"], "g") - busy_from
    assert busy > 0, "the loop ran nothing after the re-attach"
    # Metering resumed against the new daemon: it charged the group for that work.
    assert_charged_for(admin, "g", busy)


def test_unreachable_daemon_with_wait_blocks_launches_until_it_appears(runner, tokend, tmp_path):
    created = tokend.admin().create_group("g", request=0.5, limit=1.0, memory="1GiB")
    link = tmp_path / "late.sock"
    env = group_env(tokend, "g", created.secret)
    env["GSLICE_SOCKET"] = str(link)
    p = runner.start("launch", "driver", 50, 10000, **env)
    read_stderr_until(p, "launches wait until it is back", timeout=20)
    assert p.poll() is None   # blocked, not crashed
    os.symlink(tokend.client_socket, link)
    kv = parse_kv(wait_for_line(p, "seconds=", timeout=30, collect=True))
    p.wait(timeout=30)
    assert p.returncode == 0
    assert kv["launched"] == "50"
    assert "is back" in p.stderr.read()


def test_unreachable_daemon_fails_allocations_after_the_wait(runner, tmp_path):
    env = {"GSLICE_SOCKET": str(tmp_path / "none.sock"), "GSLICE_GROUP": "g", "GSLICE_DAEMON_WAIT_MS": "500"}
    t0 = time.monotonic()
    rc, out, err = runner.run("alloc", "driver", MiB, 1, timeout=60, **env)
    assert rc == 0, err
    assert out["allocated"] == "0"
    assert out["last_result"] == "2"
    assert "fails with CUDA_ERROR_OUT_OF_MEMORY" in err
    assert time.monotonic() - t0 < 20


def test_bind_now(runner, tokend):
    created = tokend.admin().create_group("g", request=0.5, memory="1GiB")
    rc, out, err = runner.run("launch", "runtime", 100, 10000, "ptsz", LD_BIND_NOW=1,
                              **group_env(tokend, "g", created.secret))
    assert rc == 0, err
    assert out["launched"] == "100"
