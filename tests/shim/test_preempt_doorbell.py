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

from shim_harness import RING_AT_LEASE_CUT, RING_READ_CUT, group_env, parse_kv, wait_for_line
from gslice.tokend import preempt_doorbell

MS = 1_000_000  # ns
_SYS_FUTEX = {"x86_64": 202, "aarch64": 98}.get(platform.machine())
_FUTEX_WAKE = 1
# A ring's pause, whether the listener or a launch read the ring first.
RING_PAUSED = re.compile(r"token (\d+): preemption doorbell rang(?: \(read at a launch\))?, submissions paused")


def _groups(tokend):
    admin = tokend.admin()
    low = admin.create_group("low", request=0.3, limit=1.0, memory="1GiB", priority="low")
    high = admin.create_group("high", request=0.3, limit=1.0, memory="1GiB", priority="high")
    return admin, low, high


def _holder_loop(runner, tokend, low, seconds, kernel_ns=2 * MS, **env):
    """A low-priority process saturating the GPU with 2 ms kernels, logging
    its gate's decisions (debug lines carry CLOCK_MONOTONIC)."""
    holder = runner.start("loop", "driver", seconds, kernel_ns, 0,
                          **group_env(tokend, "low", low.secret, GSLICE_LOG_LEVEL="debug", **env))
    wait_for_line(holder, "ready=1")
    return holder


def _holder_beside_a_high_client(runner, tokend, seconds):
    """A low-priority holder of 2 ms kernels (debug lines) and an attached
    high-priority tokend client that rings and asks as the tests say:
    (admin, high client, holder, doorbell page path, the high group's slot)."""
    admin, low, high = _groups(tokend)
    high_client = tokend.shim_client("high", high.secret)
    holder = _holder_loop(runner, tokend, low, seconds)
    time.sleep(0.3)
    return (admin, high_client, holder, tokend.client_socket.parent / preempt_doorbell.FILE_NAME,
            high_client.attach_reply.doorbell_slot)


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
    paused = {int(t) for t in RING_PAUSED.findall(err_text)}
    revoked = re.findall(r"token (\d+) revoked by tokend", err_text)
    assert paused & {int(t) for t in revoked}, err_text
    for token in paused & {int(t) for t in revoked}:
        assert err_text.index(f"token {token}: preemption doorbell rang") < \
            err_text.index(f"token {token} revoked by tokend")
    assert admin.status().group("low").preemptions >= 1


@pytest.mark.timing
def test_a_preemptor_launches_at_its_ring_not_at_its_grant(runner, tokend):
    """Head start (hook/gate_head_start.c): a client whose ring preempts the
    holder is granted at once when its ask arrives, so it launches right
    away while the keeper carries the ask; without it, its first launch
    waited for the round trip (~0.4-1 ms on a loaded 2-core machine). Each
    run attaches anew (a memory query first, which waits for the attach:
    timed with its first launch, the attach's ~2-3 ms hid the difference,
    3.07 against 3.06 ms in one CI rehearsal) and times its first launch
    while "low" holds the token; compared with GSLICE_HEAD_START=0,
    alternated."""
    admin, low, high = _groups(tokend)
    holder = _holder_loop(runner, tokend, low, 8)
    time.sleep(0.5)
    queued = {"1": [], "0": []}
    head_starts = {"1": 0, "0": 0}
    for _ in range(5):
        for setting in ("1", "0"):
            rc, out, err = runner.run("launch", "driver", 1, MS // 2, PROBE_ATTACH_FIRST="1",
                                      **group_env(tokend, "high", high.secret, GSLICE_HEAD_START=setting))
            assert rc == 0, err
            assert int(out["shim_head_start_refusals"]) == 0, out
            head_starts[setting] += int(out["shim_head_starts"])
            queued[setting].append(float(out["queue_seconds"]))
            time.sleep(0.05)
    holder.communicate(timeout=30)
    assert head_starts["0"] == 0
    assert head_starts["1"] >= 4, head_starts   # (a ring needs the holder's flag: nearly every run)
    with_head_start, without = sorted(queued["1"])[2], sorted(queued["0"])[2]
    print(f"first launch queued in {with_head_start * 1e6:.0f} us with a head start, {without * 1e6:.0f} us without")
    assert with_head_start < without, queued
    assert admin.status().group("low").preemptions >= 5


@pytest.mark.timing
def test_no_head_start_when_tokend_hands_over_at_release(runner, tmp_path, sim_lib_dir):
    """With --preempt-handover at-release the grant waits for the holder's
    release (one tenant submits at a time): the doorbell page says so, and a
    ringer waits for its grant instead of starting at its ring."""
    from gslice.testing import TokendProcess

    at_release = TokendProcess(tmp_path / "at-release", gpu="fake", fake_gpu_memory=16 << 30,
                               extra_args=["--preempt-handover", "at-release"])
    at_release.start()
    try:
        admin, low, high = _groups(at_release)
        holder = _holder_loop(runner, at_release, low, 4)
        time.sleep(0.5)
        rings = head_starts = 0
        for _ in range(3):
            rc, out, err = runner.run("launch", "driver", 1, MS // 2, **group_env(at_release, "high", high.secret))
            assert rc == 0, err
            rings += int(out["shim_doorbell_rings"])
            head_starts += int(out["shim_head_starts"])
            time.sleep(0.05)
        holder.communicate(timeout=30)
    finally:
        at_release.close()
    assert rings >= 1
    assert head_starts == 0


def _bump_and_wake(page, wake: bool = True) -> None:
    """What a shim does after writing a ring or a handback: bump ring_seq
    and wake every listener waiting on it (a head start's ring wakes them
    only once its launch is queued: wake=False is a ring before that)."""
    seq = struct.unpack_from("<I", page, 16)[0]
    struct.pack_into("<I", page, 16, (seq + 1) & 0xFFFFFFFF)
    if not wake:
        return
    address = ctypes.addressof(ctypes.c_char.from_buffer(page, 16))
    ctypes.CDLL(None, use_errno=True).syscall(_SYS_FUTEX, ctypes.c_void_p(address), _FUTEX_WAKE, 1 << 30,
                                              None, None, 0)
    del address


def _ring_as(page_path, slot: int, priority: int, wake: bool = True) -> None:
    """Ring the way a shim does: slot + 1, class, time, then bump and wake."""
    with open(page_path, "r+b") as f:
        import mmap
        page = mmap.mmap(f.fileno(), preempt_doorbell.SIZE)
        struct.pack_into("<I", page, 20, slot)
        struct.pack_into("<I", page, 36, priority)
        struct.pack_into("<Q", page, 24, time.clock_gettime_ns(time.CLOCK_MONOTONIC))
        _bump_and_wake(page, wake)
        page.close()


@pytest.mark.parametrize("shim_build", ["normal", RING_READ_CUT], indirect=True)
def test_the_holders_next_launch_heeds_a_ring_its_listener_has_not_heard(runner, tokend, shim_build):
    """A head start wakes the listeners only once its own launch is queued
    (each wake-up cost that launch 40 us at the median, 110 at p90, on this
    2-core machine), and a listener may wake late on a loaded one; the
    holder's launches read the ring on the page meanwhile. Here rings are
    forged without any wake-up (no Revoke follows either): every one still
    pauses the holder, at its next launch."""
    admin, low, high = _groups(tokend)
    idle_high = tokend.shim_client("high", high.secret)   # attached, so its group is flagged; never asks
    slot = idle_high.attach_reply.doorbell_slot
    assert slot != 0
    holder = _holder_loop(runner, tokend, low, 1.5, kernel_ns=MS)
    page_path = tokend.client_socket.parent / preempt_doorbell.FILE_NAME
    rings = 0
    for _ in range(4):   # 250 ms apart: past each unanswered pause's quiet period (100 ms)
        time.sleep(0.25)
        _ring_as(page_path, slot, priority=2, wake=False)
        rings += 1
    out_text, err_text = holder.communicate(timeout=30)
    assert holder.returncode == 0, err_text
    stats = parse_kv(out_text)
    assert int(stats["shim_revokes"]) == 0
    assert int(stats["launched"]) > 0
    with shim_build.expect_feature():
        assert int(stats["shim_doorbell_pauses"]) == rings, err_text[-3000:]
        assert err_text.count("rang (read at a launch)") == rings


@pytest.mark.timing
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


@pytest.mark.skipif(_SYS_FUTEX is None, reason=f"futex syscall number unknown on {platform.machine()}")
@pytest.mark.parametrize("shim_build", ["normal", RING_AT_LEASE_CUT], indirect=True)
def test_a_ring_heard_while_the_lease_was_idle_pauses_the_lease_s_resume(runner, tokend, shim_build):
    """A ring that comes while the holder keeps its token as an idle lease
    paused nothing (no slice ran); the lessee resuming before tokend's
    Revoke arrives must not feed the GPU in front of the ringer. On an H100
    a low-priority neighbour did, in 107 of 300 bursts beside 8192 matmuls
    (benchmarks/gpu/latency_trace.py, 2026-11-27). Here the ring is forged
    (no Revoke follows), so the pause runs to its bound. The pause must be
    the resume's own: a resume that comes before the listener has heard
    the ring is also stopped by its launch reading the page (the test
    above), and which comes first is a race."""
    admin, low, high = _groups(tokend)
    idle_high = tokend.shim_client("high", high.secret)   # attached, so its group is flagged; never asks
    slot = idle_high.attach_reply.doorbell_slot
    assert slot != 0
    lessee = runner.start("resume", "driver", MS // 2, stdin=True,
                          **group_env(tokend, "low", low.secret, GSLICE_LOG_LEVEL="debug"))
    wait_for_line(lessee, "leased=1")
    _ring_as(tokend.client_socket.parent / preempt_doorbell.FILE_NAME, slot, priority=3)
    lessee.stdin.write("go\n")
    lessee.stdin.flush()
    out_text, err_text = lessee.communicate(timeout=30)
    assert lessee.returncode == 0, err_text
    stats = parse_kv(out_text)
    assert int(stats["shim_lease_resumes"]) == 1, out_text
    with shim_build.expect_feature():
        assert int(stats["shim_doorbell_pauses"]) == 1, out_text
        # The resuming launch waited out the pause (3 ms, GS_GATE_DOORBELL_PAUSE_NS: no Revoke came).
        assert int(stats["resume_launch_us"]) >= 2000, out_text
        assert "preemption doorbell rang while the lease was kept" in err_text, err_text[-2000:]
    assert int(stats["shim_revokes"]) == 0


def _periodic_high_beside_low_holder(runner, tokend, kernel_ns=2 * MS):
    """A high-priority process bursting (8 x 0.5 ms, sync, think 20 ms) for
    2.5 s beside a low-priority holder of 2 ms kernels (kernel_ns). Returns
    the holder's counters and its debug log."""
    admin, low, high = _groups(tokend)
    holder = _holder_loop(runner, tokend, low, 4, kernel_ns)
    time.sleep(0.3)
    rc, out, err = runner.run("bursts", "driver", 2.5, MS // 2, 8, 20, **group_env(tokend, "high", high.secret))
    assert rc == 0, err
    assert int(out["bursts"]) >= 20
    out_text, err_text = holder.communicate(timeout=30)
    assert holder.returncode == 0, err_text
    return parse_kv(out_text), err_text


@pytest.mark.timing
@pytest.mark.parametrize("kernel_ns", [2 * MS, MS // 4], ids=["2ms", "0.25ms"])
def test_a_periodic_higher_class_is_anticipated_by_the_holder(runner, tokend, kernel_ns):
    """Once tokend has seen the bursts' period it publishes when the next is
    expected: the holder starts no kernel that would run into it (an
    anticipation pause: a 2 ms kernel, or a batch of 0.25 ms ones), and the
    ring that follows turns that pause into a ring's, ended by the Revoke of
    the same token."""
    stats, err_text = _periodic_high_beside_low_holder(runner, tokend, kernel_ns)
    assert int(stats["shim_anticipation_pauses"]) >= 1, err_text
    # The holder measured its paced submissions' lag: what it feeds ahead
    # by once preempted (hook/queue_bound.c).
    assert int(stats["shim_paced_launches"]) > 0 and int(stats["shim_submit_lag_margin_us"]) > 0, stats
    # A slice renewed during the pause keeps it under its new token id.
    renewed = {int(a): int(b) for a, b in re.findall(r"token (\d+) renewed as (\d+)", err_text)}
    anticipated = {}
    for token in {int(t) for t in re.findall(r"token (\d+): a preemptor is expected in", err_text)}:
        last = token
        while last in renewed:
            last = renewed[last]
            anticipated.setdefault(last, token)
        anticipated.setdefault(token, token)
    rung = {int(t) for t in re.findall(r"token (\d+): preemption doorbell rang", err_text)}
    revoked = {int(t) for t in re.findall(r"token (\d+) revoked by tokend", err_text)}
    assert set(anticipated) & rung & revoked, err_text
    for token in set(anticipated) & rung:
        assert err_text.index(f"token {anticipated[token]}: a preemptor is expected in") < \
            err_text.index(f"token {token}: preemption doorbell rang")


@pytest.mark.timing
def test_no_anticipation_when_tokend_is_told_not_to(runner, tmp_path, sim_lib_dir):
    from gslice.testing import TokendProcess

    tokend = TokendProcess(tmp_path, gpu="fake", fake_gpu_memory=16 << 30,
                           extra_args=["--anticipate-preemption", "off"])
    tokend.start()
    try:
        stats, err_text = _periodic_high_beside_low_holder(runner, tokend)
    finally:
        tokend.close()
    assert int(stats["shim_anticipation_pauses"]) == 0
    assert int(stats["shim_doorbell_pauses"]) >= 1, err_text  # the rings still stop it


@pytest.mark.timing
def test_a_forged_expected_window_costs_one_bounded_pause_each_quiet_period(runner, tokend):
    """A tenant writes an "expected preemption" window on the page over and
    over (nobody is expected: tokend never wrote one): the holder holds its
    kernels back at most 5 ms, then ignores windows for 100 ms, and keeps
    working."""
    admin, low, high = _groups(tokend)
    holder = _holder_loop(runner, tokend, low, 3)
    writes = _write_windows(tokend.client_socket.parent / preempt_doorbell.FILE_NAME, 1.5, lambda: MS, every_s=0.01)
    out_text, err_text = holder.communicate(timeout=30)
    assert holder.returncode == 0, err_text
    stats = parse_kv(out_text)
    pauses, lapses = int(stats["shim_anticipation_pauses"]), int(stats["shim_anticipation_lapses"])
    assert pauses >= 1, err_text
    assert 1 <= lapses <= pauses
    # One pause per 100 ms while windows were there (1.5 s + the last one's
    # 20 ms), not one per write (about 150).
    assert pauses <= 1.52 / 0.1 + 2 < writes
    assert int(stats["launched"]) > 0


def _write_windows(page_path, seconds: float, opens_in_ns, every_s: float) -> int:
    """Write an expected-preemption window on the doorbell page every
    `every_s` for `seconds`, opening opens_in_ns() from now and closing 20
    ms after (a tenant scribbling, or a stand-in for tokend's windows);
    returns how many were written."""
    import mmap
    writes = 0
    deadline = time.monotonic() + seconds
    with open(page_path, "r+b") as f:
        page = mmap.mmap(f.fileno(), preempt_doorbell.SIZE)
        try:
            while time.monotonic() < deadline:
                now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
                struct.pack_into("<QQ", page, preempt_doorbell._EXPECTED_OFFSET, now + opens_in_ns(), now + 20 * MS)
                writes += 1
                time.sleep(every_s)
        finally:
            page.close()
    return writes


def _pauses_past_the_opening(runner, tokend, overlap_pct: str | None) -> tuple[list[int], str]:
    """A 2 ms-kernel holder beside windows written every 2 ms, each opening
    2-6 ms ahead (at random against its kernels): for each anticipation
    pause it logged, how far (us) the held kernel would have run past the
    window's opening; and its stderr."""
    import random

    admin, low, high = _groups(tokend)
    env = {} if overlap_pct is None else {"GSLICE_ANTICIPATION_LONG_OVERLAP_PCT": overlap_pct}
    holder = _holder_loop(runner, tokend, low, 3, **env)
    rng = random.Random(23)
    writes = _write_windows(tokend.client_socket.parent / preempt_doorbell.FILE_NAME, 2.2,
                            lambda: rng.randrange(2 * MS, 6 * MS), every_s=0.002)
    out_text, err_text = holder.communicate(timeout=30)
    assert holder.returncode == 0, err_text
    pauses = [(int(expected), int(ending)) for expected, ending in
              re.findall(r"a preemptor is expected in (-?\d+) us; the next kernel \(ending in (-?\d+) us\) waits",
                         err_text)]
    # One pause per 100 ms quiet period while windows were written.
    assert 8 <= len(pauses) < writes, (len(pauses), err_text[-3000:])
    return sorted(ending - expected for expected, ending in pauses), err_text


HALF_KERNEL_US = 1000   # half the holder's 2 ms kernel


@pytest.mark.timing
@pytest.mark.parametrize("overlap_pct", [None, "0", "150"], ids=["default", "0", "malformed"])
def test_an_expected_window_holds_a_long_kernel_only_when_most_of_it_would_run_there(runner, tokend, overlap_pct):
    """By default (GSLICE_ANTICIPATION_LONG_OVERLAP_PCT 50) each pause is
    for a kernel that would have run more than half its length (1 ms) past
    the window's opening: held, it idles the GPU until the arrival;
    started, the arrival waits for its rest, and at half a kernel neither
    exceeds half a kernel. At 0 (any kernel reaching the window waits),
    6 and 10 of 22 pauses in two runs were for kernels that would have run
    0.01-0.98 ms there. A malformed value is named in a warning and the
    default holds."""
    past_the_opening, err_text = _pauses_past_the_opening(runner, tokend, overlap_pct)
    if overlap_pct == "0":
        assert past_the_opening[0] < HALF_KERNEL_US * 0.95, past_the_opening
    else:
        assert past_the_opening[0] > HALF_KERNEL_US * 0.95, past_the_opening
    if overlap_pct == "150":
        assert "GSLICE_ANTICIPATION_LONG_OVERLAP_PCT=150 is not a percentage in 0..100 (using 50)" in err_text


@pytest.mark.timing
@pytest.mark.skipif(_SYS_FUTEX is None, reason=f"futex syscall number unknown on {platform.machine()}")
def test_a_revoke_slower_than_the_pause_still_answers_its_ring(runner, tokend):
    """A ring whose Revoke comes only after the pause's 3 ms bound (a slow
    round trip on a loaded machine) was right all the same: the holder must
    not ignore the next rings for 100 ms, or it keeps feeding the GPU in
    front of the next preemptors (issue 23)."""
    admin, high_client, holder, page_path, slot = _holder_beside_a_high_client(runner, tokend, 2)
    started = time.monotonic()
    _ring_as(page_path, slot, priority=2)
    time.sleep(0.006)                      # the pause runs out unanswered ...
    token = high_client.acquire(timeout_ms=10000)   # ... and the Revoke comes after it
    high_client.release(token, used_us=100)
    deadline = time.monotonic() + 1
    while admin.status().holder_client_id in ("", high_client.public_id) and time.monotonic() < deadline:
        time.sleep(0.002)
    time.sleep(0.01)
    assert time.monotonic() - started < 0.08, "too slow to ring again within the 100 ms quiet period"
    _ring_as(page_path, slot, priority=2)  # within 100 ms of the first pause
    out_text, err_text = holder.communicate(timeout=30)
    high_client.close()
    assert holder.returncode == 0, err_text
    paused = RING_PAUSED.findall(err_text)
    assert len(paused) >= 2, err_text[-3000:]


def test_a_renewal_during_a_ring_s_pause_does_not_end_it(runner, tokend_factory):
    """A head-starting ringer asks from its keeper once its launch is
    queued: on an H200 its ask reached tokend 0.5-1.1 ms after its ring, and
    tokend renewed the holder's slice in that gap. The holder must stay
    paused until the Revoke or the pause's bound (3 ms) all the same; it
    resumed at the renewal, and fed a 1.8 ms kernel in front of the burst
    (issue 23). Here the holder's slices are short (--quantum-max-ms 5: it
    renews about every 4 ms), so renewals fall inside the pauses."""
    tokend = tokend_factory(extra_args=["--quantum-max-ms", "5"])
    admin, high_client, holder, page_path, slot = _holder_beside_a_high_client(runner, tokend, 3)
    for _ in range(10):
        _ring_as(page_path, slot, priority=2)
        time.sleep(0.001)                   # the ask after the ring, as a head start's keeper sends it
        token = high_client.acquire(timeout_ms=10000)
        high_client.release(token, used_us=100)
        time.sleep(0.15)
    out_text, err_text = holder.communicate(timeout=30)
    high_client.close()
    assert holder.returncode == 0, err_text
    # Each ring's pause, from its line to the Revoke (or the next pause):
    # a renewal in it, and a resume before the pause's bound, are counted.
    line = re.compile(r"debug (\d+\.\d+): (.*)")
    renewed_in_pause, early_resumes, paused_at = 0, [], None
    for stamp, text in ((float(m.group(1)), m.group(2)) for m in line.finditer(err_text)):
        if RING_PAUSED.match(text):
            paused_at = stamp
        elif paused_at is None:
            continue
        elif "revoked by tokend" in text:
            paused_at = None
        elif "renewed as" in text:
            renewed_in_pause += 1
        elif "submitting again" in text and stamp - paused_at < 0.0029:
            early_resumes.append(f"{(stamp - paused_at) * 1e3:.2f} ms after the ring: {text}")
    assert renewed_in_pause >= 1, "no renewal fell inside a pause: the test proves nothing\n" + err_text[-3000:]
    assert not early_resumes, early_resumes


def _bursts_beside(runner, tokend, neighbour_priority: str) -> dict:
    """A high-priority process bursting (8 x 0.5 ms, sync, think 20 ms)
    beside a holder of 2 ms kernels of the given class: its counters."""
    admin = tokend.admin()
    neighbour = admin.create_group("neighbour", request=0.3, limit=1.0, memory="1GiB",
                                   priority=neighbour_priority)
    high = admin.create_group("high", request=0.3, limit=1.0, memory="1GiB", priority="high")
    holder = runner.start("loop", "driver", 3, 2 * MS, 0, **group_env(tokend, "neighbour", neighbour.secret))
    wait_for_line(holder, "ready=1")
    time.sleep(0.3)
    rc, out, err = runner.run("bursts", "driver", 1.5, MS // 2, 8, 20, **group_env(tokend, "high", high.secret))
    assert rc == 0, err
    holder.communicate(timeout=30)
    assert int(out["bursts"]) >= 20
    return out


@pytest.mark.timing
def test_a_holder_that_outranks_every_waiter_does_not_pace_its_launches(runner, tokend):
    """Beside a low-priority waiter the bursts' launches go straight to the
    GPU: tokend's page says the holder outranks every waiter (none of them
    can preempt it, so its queue delays nobody it would not delay anyway).
    Paced one by one, a burst beside low-priority work came out at 2x its
    p99 on the simulated GPU (benchmarks/exp_latency.py)."""
    out = _bursts_beside(runner, tokend, "low")
    assert int(out["shim_paced_launches"]) <= int(out["bursts"]) // 4, out


@pytest.mark.timing
def test_a_holder_beside_an_equal_class_waiter_still_paces(runner, tokend):
    """Beside a waiter of its own class (served at its slice's end) the
    queue bound holds as before: the same bursts' 0.5 ms launches are paced."""
    out = _bursts_beside(runner, tokend, "high")
    assert int(out["shim_paced_launches"]) >= int(out["bursts"]), out


def _time_beside_each_other(runs_a, runs_b) -> int:
    """ns during which a kernel of each process was on the GPU at once."""
    def merged(runs):
        spans = []
        for run in sorted(runs, key=lambda r: r.start_ns):
            if spans and run.start_ns <= spans[-1][1]:
                spans[-1][1] = max(spans[-1][1], run.end_ns)
            else:
                spans.append([run.start_ns, run.end_ns])
        return spans
    a, b = merged(runs_a), merged(runs_b)
    shared, i, j = 0, 0, 0
    while i < len(a) and j < len(b):
        shared += max(0, min(a[i][1], b[j][1]) - max(a[i][0], b[j][0]))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return shared


@pytest.mark.timing
@pytest.mark.skipif(_SYS_FUTEX is None, reason=f"futex syscall number unknown on {platform.machine()}")
def test_forged_handbacks_cost_one_bounded_start_per_wait(runner, tokend, tmp_path):
    """A tenant writes a handback from the holder on the page every 2 ms
    (the holder's slot, fresh times): the waiter tokend names starts before
    its grant, no grant follows within the 2 ms bound, its launches wait
    for the grant from then on, and it ignores handbacks for 100 ms. So two
    saturating groups share the GPU for about one bound per wait for a
    grant, not for as long as the forger writes (with the bound cut: 14%
    of the run, and no lapse)."""
    from gslice.simgpu import kernel_trace

    admin = tokend.admin()
    procs = []
    for name in ("a", "b"):
        secret = admin.create_group(name, request=0.4, limit=1.0, memory="1GiB").secret
        proc = runner.start("loop", "driver", 2.5, MS, 0,
                            **group_env(tokend, name, secret, **{kernel_trace.ENV_KERNEL_TRACE: str(tmp_path)}))
        wait_for_line(proc, "ready=1")
        procs.append(proc)
    time.sleep(0.3)
    page_path = tokend.client_socket.parent / preempt_doorbell.FILE_NAME
    writes, started = 0, time.monotonic()
    with open(page_path, "r+b") as f:
        import mmap
        page = mmap.mmap(f.fileno(), preempt_doorbell.SIZE)
        try:
            while time.monotonic() - started < 1.5:
                holder_slot = struct.unpack_from("<I", page, preempt_doorbell._HOLDER_SLOT_OFFSET)[0]
                now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
                struct.pack_into("<IQQ", page, preempt_doorbell.HANDBACK_OFFSET + 4, holder_slot, now, now)
                _bump_and_wake(page)
                writes += 1
                time.sleep(0.002)
        finally:
            page.close()
    forged_for = time.monotonic() - started
    stats = []
    for proc in procs:
        out_text, err_text = proc.communicate(timeout=30)
        assert proc.returncode == 0, err_text
        stats.append(parse_kv(out_text))
    lapses = [int(s["shim_handback_lapses"]) for s in stats]
    runs = [kernel_trace.read(tmp_path, proc.pid) for proc in procs]
    span = max(r.end_ns for rs in runs for r in rs) - min(r.start_ns for rs in runs for r in rs)
    shared = _time_beside_each_other(*runs) / span
    print(f"{writes} forged handbacks in {forged_for:.2f} s: lapsed starts {lapses}; "
          f"the two shared the GPU {shared:.1%} of {span / 1e9:.2f} s")
    assert sum(lapses) >= 1, stats  # the forgery was heard
    # One lapse per wait, at most one per 100 ms, not one per write (~700).
    assert all(n <= forged_for / 0.1 + 2 for n in lapses), lapses
    # Each lapse shares the GPU for the 2 ms bound and the kernel then
    # running: about 3% of the time per process.
    assert shared <= 0.08, shared
    assert all(int(s["launched"]) > 0 for s in stats)
