"""Busy groups' 1 s windows on a fake clock, with the handoff jitter of a
real machine: each holder releases a little early or late and asks again
after a short, varying delay (a seeded generator: the same run every
time). Issue 24's goal: every 1 s window within 3 points of the request
for work items of 10 ms or less, every 10 s within 1 point.

Paced by window usage, each group's oldest slice leaving the window made
it look behind by up to that slice, and the fair slices chased the echo
(1 s windows 6-15 points off); ordered by pace alone, groups level in
pace took turns in a new order every round (10/20/30/40: 9.5 points)."""
from __future__ import annotations

import random

import pytest

from gslice.tokend.scheduler import Grant, GroupSpec, Scheduler, SchedulerConfig

CONFIG = SchedulerConfig(window=10.0, quantum_min=0.005, quantum_max=0.100, grace=0.200)


def run_jittered(requests, seconds=40.0, seed=7):
    """One busy client per group; returns {group: [(start, end), ...]} held."""
    rng = random.Random(seed)
    s = Scheduler(CONFIG)
    names = [f"g{i}" for i in range(len(requests))]
    for name, request in zip(names, requests):
        s.add_group(GroupSpec(name, request, 1.0, 1 << 30), 0.0)
        s.attach(name, name, 0.0)
    held = {name: [] for name in names}
    asks = []  # (time, client) of pending requests
    grant = None
    now = 0.0
    for name in names:
        for decision in s.request(name, now):
            grant = decision
    while now < seconds:
        assert isinstance(grant, Grant)
        holder, start = grant.client_id, now
        # Used: the quantum give or take 0.3 ms (a kernel ending early, a
        # release late); the next holder's grant then arrives after it.
        used = max(0.0, grant.quantum + rng.uniform(-0.0003, 0.0003))
        now = start + used + rng.uniform(0.0002, 0.0012)
        held[holder].append((start, start + used))
        decisions = s.release(holder, grant.token_id, used, now)
        asks.append((now + rng.uniform(0.0003, 0.0010), holder))
        grant = next((d for d in decisions if isinstance(d, Grant)), None)
        while grant is None:
            asks.sort()
            at, client = asks.pop(0)
            now = max(now, at)
            grant = next((d for d in s.request(client, now) if isinstance(d, Grant)), None)
        # Requests due before the grant's slice starts are made now.
        due = [a for a in asks if a[0] <= now]
        asks = [a for a in asks if a[0] > now]
        for at, client in due:
            assert not [d for d in s.request(client, at) if isinstance(d, Grant)]
    return held


def share_between(intervals, low, high):
    return sum(max(0.0, min(end, high) - max(start, low)) for start, end in intervals) / (high - low)


@pytest.mark.parametrize("requests", [(0.1, 0.2, 0.3, 0.4), (0.3, 0.7), (0.25, 0.25, 0.5)])
def test_every_1s_window_within_3_points_and_every_10s_within_1(requests):
    held = run_jittered(requests)
    # Shares of the GPU time used (the handoffs' idle time excluded).
    worst_1s = worst_10s = 0.0
    for step in range(20, 390):  # windows starting every 0.1 s from 2 s on
        low = step / 10
        used = {name: share_between(intervals, low, low + 1.0) for name, intervals in held.items()}
        total = sum(used.values())
        for (name, share), request in zip(used.items(), requests):
            worst_1s = max(worst_1s, abs(share / total - request) * 100)
        if low + 10.0 <= 40.0:
            used = {name: share_between(intervals, low, low + 10.0) for name, intervals in held.items()}
            total = sum(used.values())
            for (name, share), request in zip(used.items(), requests):
                worst_10s = max(worst_10s, abs(share / total - request) * 100)
    assert worst_1s <= 3.0, f"a 1 s window {worst_1s:.1f} points off its request"
    assert worst_10s <= 1.0, f"a 10 s window {worst_10s:.1f} points off its request"
