"""The preemption doorbell with the real shim and the real tokend: a waiting
client of a higher class stops the holder's submissions before its Revoke
arrives, and a ring that no Revoke follows costs the holder one bounded
pause (hook/preempt_doorbell.h)."""
from __future__ import annotations

import ctypes
import platform
import re
import struct
import time

import pytest

from shim_harness import group_env, parse_kv, wait_for_line
from gslice.tokend import preempt_doorbell

MS = 1_000_000  # ns
_SYS_FUTEX = {"x86_64": 202, "aarch64": 98}.get(platform.machine())
_FUTEX_WAKE = 1


def _groups(tokend):
    admin = tokend.admin()
    low = admin.create_group("low", request=0.3, limit=1.0, memory="1GiB", priority="low")
    high = admin.create_group("high", request=0.3, limit=1.0, memory="1GiB", priority="high")
    return admin, low, high


def _holder_loop(runner, tokend, low, seconds):
    """A low-priority process saturating the GPU with 2 ms kernels, logging
    its gate's decisions (debug lines carry CLOCK_MONOTONIC)."""
    holder = runner.start("loop", "driver", seconds, 2 * MS, 0,
                          **group_env(tokend, "low", low.secret, GSLICE_LOG_LEVEL="debug"))
    wait_for_line(holder, "ready=1")
    return holder


def test_a_higher_class_stops_the_holder_before_its_revoke(runner, tokend):
    admin, low, high = _groups(tokend)
    holder = _holder_loop(runner, tokend, low, 4)
    time.sleep(0.5)
    rings = 0
    for _ in range(4):  # each run attaches anew and asks for a token while "low" holds it
        rc, out, err = runner.run("launch", "driver", 4, MS // 2, **group_env(tokend, "high", high.secret))
        assert rc == 0, err
        rings += int(out["shim_doorbell_rings"])
        time.sleep(0.1)
    out_text, err_text = holder.communicate(timeout=30)
    assert holder.returncode == 0, err_text
    stats = parse_kv(out_text)
    assert rings >= 1
    assert int(stats["shim_doorbell_pauses"]) >= 1, err_text
    # The pause came before the Revoke of the same token: the holder had
    # stopped submitting by the time tokend's Revoke reached it.
    paused = {int(t) for t in re.findall(r"token (\d+): preemption doorbell rang, submissions paused", err_text)}
    revoked = re.findall(r"token (\d+) revoked by tokend", err_text)
    assert paused & {int(t) for t in revoked}, err_text
    for token in paused & {int(t) for t in revoked}:
        assert err_text.index(f"token {token}: preemption doorbell rang") < \
            err_text.index(f"token {token} revoked by tokend")
    assert admin.status().group("low").preemptions >= 1


def _ring_as(page_path, slot: int, priority: int) -> None:
    """Ring the way a shim does: slot + 1, class, time, then bump and wake."""
    with open(page_path, "r+b") as f:
        import mmap
        page = mmap.mmap(f.fileno(), preempt_doorbell.SIZE)
        struct.pack_into("<I", page, 20, slot)
        struct.pack_into("<I", page, 36, priority)
        struct.pack_into("<Q", page, 24, time.clock_gettime_ns(time.CLOCK_MONOTONIC))
        seq = struct.unpack_from("<I", page, 16)[0]
        struct.pack_into("<I", page, 16, (seq + 1) & 0xFFFFFFFF)
        address = ctypes.addressof(ctypes.c_char.from_buffer(page, 16))
        ctypes.CDLL(None, use_errno=True).syscall(_SYS_FUTEX, ctypes.c_void_p(address), _FUTEX_WAKE, 1 << 30,
                                                  None, None, 0)
        del address
        page.close()


@pytest.mark.skipif(_SYS_FUTEX is None, reason=f"futex syscall number unknown on {platform.machine()}")
def test_rings_no_revoke_follows_cost_one_bounded_pause_each_quiet_period(runner, tokend):
    admin, low, high = _groups(tokend)
    # A client of "high" is attached (so tokend flags the group) but never
    # asks: every ring below is one tokend does not follow with a Revoke.
    idle_high = tokend.shim_client("high", high.secret)
    holder = _holder_loop(runner, tokend, low, 3)
    page_path = tokend.client_socket.parent / preempt_doorbell.FILE_NAME
    slot = idle_high.attach_reply.doorbell_slot
    assert slot != 0
    deadline = time.monotonic() + 1.5
    rings = 0
    while time.monotonic() < deadline:
        _ring_as(page_path, slot, priority=2)
        rings += 1
        time.sleep(0.01)
    out_text, err_text = holder.communicate(timeout=30)
    assert holder.returncode == 0, err_text
    stats = parse_kv(out_text)
    pauses, unanswered = int(stats["shim_doorbell_pauses"]), int(stats["shim_doorbell_unanswered"])
    assert int(stats["shim_revokes"]) == 0
    assert pauses >= 1, err_text
    # A pause ends with the gate reopening (unanswered) or, when the queued
    # kernel drains first, with an idle release that keeps the token as a
    # lease (nobody waits): the next launch resumes it without a round trip.
    assert 1 <= unanswered <= pauses
    # 100 ms of quiet after each unanswered pause: about 15 pauses in 1.5 s,
    # not one per ring (about 150).
    assert pauses <= 1.5 / 0.1 + 2 < rings
    assert int(stats["launched"]) > 0
