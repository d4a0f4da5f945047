"""Scheduler.expected_preemption: when a group that would preempt the
holder asks at regular periods, the window in which its next request is
expected (published on the preemption doorbell, so the holder starts no
long kernel that would run into it). On a fake clock: a high-priority
group bursting every PERIOD beside two saturating low groups, as the
latency benchmark runs it."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gslice.tokend import scheduler as scheduler_module
from gslice.tokend.scheduler import Grant, GroupSpec, Priority, Revoke, Scheduler, SchedulerConfig

GIB = 1 << 30
CONFIG = SchedulerConfig(window=1.0, quantum_min=0.005, quantum_max=0.1, grace=2.0, cap_period=0.0)
LOW, NORMAL, HIGH = Priority.LOW, Priority.NORMAL, Priority.HIGH
PERIOD = 0.024
BURST = 0.004
ARRIVALS = scheduler_module._ARRIVALS
SLACK = scheduler_module._EXPECTED_SLACK


def sharing(periodic_class=HIGH) -> Scheduler:
    """Two saturating low groups (l1 holds, l2 waits) and an idle group "hi"
    of `periodic_class` with one client, h1. (h1's first request is not an
    arrival that counts: it did not follow an idle release of its own.)"""
    s = Scheduler(CONFIG)
    for name, priority, client in (("lo-a", LOW, "l1"), ("lo-b", LOW, "l2"), ("hi", periodic_class, "h1")):
        s.add_group(GroupSpec(name, 0.3, 1.0, GIB, priority), 0.0)
        s.attach(client, name, 0.0)
    s.request("l1", 0.0)
    s.request("l2", 0.0)
    return s


def burst(s: Scheduler, at: float, length: float = BURST, idle: bool = True) -> None:
    """h1 asks at `at` (preempting the low holder, which gives the token
    back 1 ms later and asks again), runs `length` and releases (idle)."""
    decisions = s.request("h1", at)
    revoked = [d for d in decisions if isinstance(d, Revoke)]
    granted = [d for d in decisions if isinstance(d, Grant) and d.client_id == "h1"]
    if revoked:
        s.release(revoked[0].client_id, revoked[0].token_id, 0.001, at + 0.001)
        s.request(revoked[0].client_id, at + 0.001)
    assert granted or s.holder()[0] == "h1", decisions
    s.release("h1", s.holder()[1], length, at + length, idle=idle)
    assert s.holder() is not None and s.holder()[0] in ("l1", "l2")


def periodic() -> tuple[Scheduler, list[float]]:
    """sharing() after ARRIVALS bursts of h1 exactly PERIOD apart (after a
    first one that does not count); returns them."""
    s = sharing()
    burst(s, 0.05)
    arrivals = [0.1 + k * PERIOD for k in range(ARRIVALS)]
    for at in arrivals:
        burst(s, at)
    return s, arrivals


def test_a_periodic_preemptor_is_expected_one_shortest_period_after_its_last_arrival():
    s = sharing()
    burst(s, 0.05)
    arrivals = [0.1 + k * PERIOD for k in range(ARRIVALS)]
    for at in arrivals:
        assert s.expected_preemption(at - 0.001) is None  # not yet ARRIVALS arrivals
        burst(s, at)
    now = arrivals[-1] + 0.010
    start, end = s.expected_preemption(now)
    assert start == pytest.approx(arrivals[-1] + PERIOD)
    assert end == pytest.approx(arrivals[-1] + PERIOD + SLACK)
    assert s.preemptors(now) == {"hi"}
    assert s.expected_preemption(now, s.preemptors(now)) == (start, end)  # the coordinator's call


def test_the_window_spans_the_shortest_to_the_longest_period_opening_half_their_spread_early():
    s = sharing()
    burst(s, 0.05)
    at = 0.1
    for period in (0.0240, 0.0250, 0.0235, 0.0245, 0.0240):
        burst(s, at)
        at += period
    # The last period (0.024) is not known until h1 asks again: four of them are.
    last = at - 0.0240
    start, end = s.expected_preemption(last + 0.010)
    # The next period is the shortest of five one time in five: the window
    # opens half the spread (1.5 ms) before the shortest.
    assert start == pytest.approx(last + 0.0235 - 0.00075)
    assert end == pytest.approx(last + 0.0250 + SLACK)


def test_a_closed_loop_preemptor_is_expected_one_think_after_its_idle_release():
    """A server that thinks a fixed time after each burst, whatever the
    burst took: its periods carry the bursts' latency (here 2-9 ms, as
    beside 8192 matmuls on an H100), its think gaps do not."""
    think = 0.010
    lengths = [0.002, 0.009, 0.004, 0.007, 0.003, 0.008]
    s = sharing()
    burst(s, 0.05)
    at = 0.1
    for length in lengths:
        burst(s, at, length)
        released = at + length
        at = released + think
    periods_spread = max(lengths[-ARRIVALS + 1:]) - min(lengths[-ARRIVALS + 1:])
    assert periods_spread > scheduler_module._PERIODIC_SPREAD  # periods alone would expect nothing
    start, end = s.expected_preemption(released + 0.005)
    assert start == pytest.approx(released + think)
    assert end == pytest.approx(released + think + SLACK)


def test_a_closed_loop_window_opens_half_its_gaps_spread_early():
    """Think gaps that vary a little (a sleep's overshoot, the release's
    round trip): the window opens half their spread before the shortest."""
    thinks = [0.0100, 0.0104, 0.0102, 0.0100, 0.0103]
    s = sharing()
    burst(s, 0.05)
    at = 0.1
    for k, think in enumerate(thinks):
        length = 0.002 + 0.003 * (k % 2)   # periods spread 3 ms: only the gaps are regular
        burst(s, at, length)
        released = at + length
        at = released + think
    gaps = thinks[-ARRIVALS:-1]            # the last think is not known until the next arrival
    start, end = s.expected_preemption(released + 0.005)
    assert start == pytest.approx(released + min(gaps) - (max(gaps) - min(gaps)) / 2)
    assert end == pytest.approx(released + max(gaps) + SLACK)


def test_of_two_regular_shapes_the_tighter_window_is_published():
    """Bursts of one length at a fixed rate are regular both ways: the
    periods and the gaps give the same window. With lengths varying a
    little (within the spread), both are regular; the gaps' window, whose
    spread is the smaller, is the one published."""
    s = sharing()
    burst(s, 0.05)
    at = 0.1
    think = 0.015
    for length in (0.004, 0.005, 0.004, 0.006, 0.005):
        burst(s, at, length)
        released = at + length
        at = released + think
    start, end = s.expected_preemption(released + 0.005)
    assert (start, end) == (pytest.approx(released + think), pytest.approx(released + think + SLACK))


def test_irregular_arrivals_expect_nothing():
    s = sharing()
    burst(s, 0.05)
    at = 0.1
    for period in (0.024, 0.030, 0.024, 0.024, 0.024):  # spread 6 ms, in the periods and the think gaps
        burst(s, at)
        at += period
    assert s.expected_preemption(at - 0.010) is None
    # Regular again for ARRIVALS arrivals in a row: expected again.
    for _ in range(ARRIVALS - 1):
        burst(s, at)
        at += PERIOD
    assert s.expected_preemption(at - 0.010) is not None


def test_nothing_is_expected_once_the_window_has_passed():
    s, arrivals = periodic()
    end = arrivals[-1] + PERIOD + SLACK
    assert s.expected_preemption(end - 1e-4) is not None
    assert s.expected_preemption(end + 1e-4) is None


def test_nothing_is_expected_while_the_periodic_group_waits_or_holds():
    s, arrivals = periodic()
    asked = arrivals[-1] + PERIOD
    s.request("h1", asked)  # preempts: it holds now
    assert s.holder()[0] == "h1"
    assert s.expected_preemption(asked + 0.0005) is None


def test_a_group_of_the_holders_class_is_not_expected():
    # Periodic, but asking would not preempt a low holder: nothing to make room for.
    s = sharing(periodic_class=LOW)
    at = 0.1
    for _ in range(ARRIVALS):
        s.request("h1", at)
        if s.holder()[0] == "h1":
            s.release("h1", s.holder()[1], BURST, at + BURST, idle=True)
        else:
            s.cancel("h1", at + BURST)
        at += PERIOD
    assert s.preemptors(at - 0.010) == frozenset()
    assert s.expected_preemption(at - 0.010) is None


def test_a_return_from_a_busy_spell_restarts_the_count():
    """An arrival not preceded by an idle release (the group's client was
    preempted, expired or released busy) says nothing about a period."""
    s = sharing()
    burst(s, 0.05)
    at = 0.1
    for _ in range(ARRIVALS):
        burst(s, at)
        at += PERIOD
    assert s.expected_preemption(at - PERIOD + 0.010) is not None
    burst(s, at, length=0.1, idle=False)  # busy: released at the end of its quantum
    at += 0.1 + PERIOD
    burst(s, at)  # an arrival after a busy release: the history starts over
    at += PERIOD
    for _ in range(ARRIVALS - 1):
        burst(s, at)
        at += PERIOD
    assert s.expected_preemption(at - PERIOD + 0.010) is None  # ARRIVALS - 1 arrivals since
    burst(s, at)
    assert s.expected_preemption(at + 0.010) is not None


def test_the_earliest_of_two_periodic_preemptors_is_published():
    s = sharing()
    s.add_group(GroupSpec("hi-2", 0.1, 1.0, GIB, HIGH), 0.0)
    s.attach("h2", "hi-2", 0.0)
    burst(s, 0.05)
    s.request("h2", 0.06)
    s.release("h2", s.holder()[1], 0.002, 0.062, idle=True)
    at = 0.1
    for _ in range(ARRIVALS):
        burst(s, at)
        # h2 asks 8 ms after h1, every period too.
        decisions = s.request("h2", at + 0.008)
        revoked = [d for d in decisions if isinstance(d, Revoke)]
        if revoked:
            s.release(revoked[0].client_id, revoked[0].token_id, 0.001, at + 0.009)
            s.request(revoked[0].client_id, at + 0.009)
        s.release("h2", s.holder()[1], 0.002, at + 0.010, idle=True)
        at += PERIOD
    now = at - PERIOD + 0.012
    assert s.preemptors(now) == {"hi", "hi-2"}
    start, _ = s.expected_preemption(now)
    assert start == pytest.approx(at)  # h1's, 8 ms before h2's


@settings(max_examples=200, deadline=None)
@given(periods=st.lists(st.floats(0.010, 0.060), min_size=ARRIVALS - 1, max_size=3 * ARRIVALS),
       offset=st.floats(0.005, 0.009))
def test_the_window_follows_the_last_periods_whatever_they_are(periods, offset):
    """After any sequence of bursts, the window is there exactly when the
    last ARRIVALS - 1 periods agree within the spread allowed; then it runs
    from the shortest to the longest period (plus slack) after the last
    arrival, opening half their spread early. Asked at any moment between
    the last burst's release and the window's end; the scheduler decides
    nothing when asked."""
    s = sharing()
    burst(s, 0.05)
    at = 0.1
    arrivals = []
    for period in [*periods, 0.0]:
        burst(s, at)
        arrivals.append(at)
        at += period
    last = arrivals[-1]
    recent = [b - a for a, b in zip(arrivals[-ARRIVALS:], arrivals[-ARRIVALS + 1:])]
    now = last + offset
    holder = s.holder()
    window = s.expected_preemption(now)
    assert s.holder() == holder and s.expected_preemption(now) == window
    if max(recent) - min(recent) > scheduler_module._PERIODIC_SPREAD + 1e-12:
        assert window is None
    elif max(recent) - min(recent) < scheduler_module._PERIODIC_SPREAD - 1e-12:
        spread = max(recent) - min(recent)
        assert window == pytest.approx((last + min(recent) - spread / 2, last + max(recent) + SLACK))
        assert "hi" in s.preemptors(now)
