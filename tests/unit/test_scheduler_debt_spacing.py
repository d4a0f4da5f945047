"""Debt beside a busy group (issue 8, long work): a group of 1 s work items
beside one of 1 ms kernels gets its share over 30 s because its items are
spaced out (no clumps echoing every window), and a busy group that released
"idle" (stalled between two launches) still holds a group in debt back for
quantum_min.
"""
from __future__ import annotations

import heapq

import pytest

from gslice.tokend.scheduler import Grant, GroupSpec, Scheduler, SchedulerConfig

CONFIG = SchedulerConfig(window=10.0, quantum_min=0.005, quantum_max=0.100, grace=0.200, cap_period=0.050)


def run_pair(item_a: float, until: float, rerequest_after: float = 0.0002):
    """Group a (30%) runs `item_a` items, one per slice (reported as its work
    item); group b (70%) runs 1 ms kernels for its whole quantum. Both ask
    again `rerequest_after` after a release. Returns each group's GPU
    intervals."""
    s = Scheduler(CONFIG)
    s.add_group(GroupSpec("a", 0.3, 1.0, 1 << 30), 0.0)
    s.add_group(GroupSpec("b", 0.7, 1.0, 1 << 30), 0.0)
    s.attach("a", "a", 0.0)
    s.attach("b", "b", 0.0)
    item = {"a": item_a, "b": 0.001}
    work = {"a": item_a, "b": None}
    busy: dict[str, list[tuple[float, float]]] = {"a": [], "b": []}
    events: list[tuple[float, int, str, str, int, float]] = []
    seq = 0

    def push(at, kind, client, token=0, granted=0.0):
        nonlocal seq
        seq += 1
        heapq.heappush(events, (at, seq, kind, client, token, granted))

    def handle(decisions, now):
        for d in decisions:
            if isinstance(d, Grant):
                n = max(1, int(d.quantum // item[d.client_id]))
                push(now + n * item[d.client_id], "release", d.client_id, d.token_id, now)

    handle(s.request("a", 0.0, work_item=work["a"]), 0.0)
    handle(s.request("b", 0.0, work_item=work["b"]), 0.0)
    now = 0.0
    while now < until:
        wake = s.next_wakeup()
        if events and (wake is None or events[0][0] <= wake):
            now, _, kind, client, token, granted = heapq.heappop(events)
            if kind == "release":
                busy[client].append((granted, now))
                handle(s.release(client, token, now - granted, now), now)
                push(now + rerequest_after, "request", client)
            else:
                handle(s.request(client, now, work_item=work[client]), now)
        else:
            assert wake is not None, "both groups wait with nothing scheduled"
            now = wake
            handle(s.advance(now), now)
    return busy


def used_between(intervals, t0: float, t1: float) -> float:
    return sum(max(0.0, min(e, t1) - max(s, t0)) for s, e in intervals)


@pytest.mark.parametrize("start", [0.0, 5.0, 12.5, 20.0])
def test_1s_items_beside_1ms_kernels_within_a_point_over_any_30s(start):
    busy = run_pair(1.0, start + 31.0)
    a = used_between(busy["a"], start, start + 30.0)
    b = used_between(busy["b"], start, start + 30.0)
    assert abs(a / (a + b) - 0.3) <= 0.01, (a, b)   # 30.04% here


def test_1s_items_beside_1ms_kernels_every_10s_window_within_a_point():
    # The promise (docs/architecture.md, "What holds"): every 10 s window
    # within 1 point, here 29.9-30.0% of the window (a) and 69.9-70.0% (b).
    # From 5 s on: the windows starting 0.25-1.0 s read 28.9% for a, whose
    # second item starts 3.40 s after its first (3.34 s apart after that).
    busy = run_pair(1.0, 46.0)
    for group, target in (("a", 0.3), ("b", 0.7)):
        shares = [used_between(busy[group], t0, t0 + 10.0) / 10.0 for t0 in (5.0 + i * 0.05 for i in range(601))]
        assert target - 0.01 <= min(shares) and max(shares) <= target + 0.01, (group, min(shares), max(shares))


def test_long_items_are_spaced_out_not_clumped():
    busy = run_pair(1.0, 40.0)
    starts = [s for s, _ in busy["a"] if s >= 5.0]
    assert len(starts) >= 8
    # One 1 s item buys 1 / 0.3 s of wall time: the next starts >= 2.3 s later.
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    assert min(gaps) >= 1.0 / 0.3 - 0.05, gaps


def test_idle_release_of_a_busy_group_keeps_a_group_in_debt_waiting():
    s = Scheduler(CONFIG)
    s.add_group(GroupSpec("a", 0.3, 1.0, 1 << 30), 0.0)
    s.add_group(GroupSpec("b", 0.7, 1.0, 1 << 30), 0.0)
    s.attach("a", "a", 0.0)
    s.attach("b", "b", 0.0)
    grant_a = next(d for d in s.request("a", 0.0, work_item=1.0) if isinstance(d, Grant))
    s.request("b", 0.0)
    # a runs a 1 s item: b gets the token at its release and a asks again.
    grant_b = next(d for d in s.release("a", grant_a.token_id, 1.0, 1.0) if isinstance(d, Grant))
    assert grant_b.client_id == "b"
    assert not s.request("a", 1.0, work_item=1.0)
    # b stalls between two launches: its slice ends "idle" at 1.05 s ...
    decisions = s.release("b", grant_b.token_id, 0.05, 1.05, idle=True)
    assert not any(isinstance(d, Grant) for d in decisions), "a in debt served in b's stall"
    # ... and its next launch asks again 1 ms later: b is served, not a.
    grant = next(d for d in s.request("b", 1.051) if isinstance(d, Grant))
    assert grant.client_id == "b"
