"""Caps and guarantees that hold to the point (issue 24), as properties of
the sans-I/O scheduler on a fake clock.

Each simulated client, when granted, starts its work `transit` seconds
later (the grant's message), runs whole work items (at least one, then as
many as fit in its quantum), and its release reaches the scheduler
`transit` after its work ended, reporting the work's length as used (what
the shim measures from the grant's arrival to its last kernel's end). It
asks again at once. Time-driven decisions come `late` seconds after
``next_wakeup()`` (a timer on a busy machine). We record when the GPU really
worked for each group and check its share over 10 s and 1 s windows.
"""
from __future__ import annotations

import heapq
import math

import pytest

from gslice.tokend.scheduler import Expire, Grant, GroupSpec, Revoke, Scheduler, SchedulerConfig

GIB = 1 << 30
CONFIG = SchedulerConfig(window=10.0, quantum_min=0.005, quantum_max=0.100, grace=0.200, cap_period=0.050)


def run(groups: dict[str, tuple[float, float, float]], until: float, transit: float = 0.0002,
        late: float = 0.0, overcharge: float = 0.0) -> dict[str, list[tuple[float, float]]]:
    """groups: name -> (request, limit, work item in s); one busy client
    each, named like its group. Returns each group's GPU busy intervals.
    overcharge: each release reports this fraction more than the work's
    length (a context switch, a neighbour's tail, measured with it)."""
    s = Scheduler(CONFIG)
    for name, (request, limit, _) in groups.items():
        s.add_group(GroupSpec(name, request, limit, GIB), 0.0)
        s.attach(name, name, 0.0)
    busy: dict[str, list[tuple[float, float]]] = {name: [] for name in groups}
    events: list[tuple[float, int, str, int, float]] = []  # (time, seq, client, token, used)
    sequence = 0

    def handle(decisions, now: float) -> None:
        nonlocal sequence
        for decision in decisions:
            assert not isinstance(decision, (Expire, Revoke)), decision
            item = groups[decision.client_id][2]
            count = max(1, math.floor(decision.quantum / item + 1e-9))
            start = now + transit
            work = count * item
            busy[decision.client_id].append((start, start + work))
            sequence += 1
            heapq.heappush(events, (start + work + transit, sequence, decision.client_id, decision.token_id,
                                    work * (1.0 + overcharge)))

    now = 0.0
    for name, (_, _, item) in groups.items():
        handle(s.request(name, now, work_item=item), now)
    while now < until:
        wake = s.next_wakeup()
        if events and (wake is None or events[0][0] <= wake + late):
            now, _, client, token, used = heapq.heappop(events)
            handle(s.release(client, token, used, now), now)
            handle(s.request(client, now, work_item=groups[client][2]), now)
        else:
            assert wake is not None, "clients wait with nothing scheduled"
            now = max(now, wake + late)
            handle(s.advance(now), now)
    return busy


def share(busy: list[tuple[float, float]], t0: float, length: float) -> float:
    return sum(max(0.0, min(end, t0 + length) - max(start, t0)) for start, end in busy) / length


def windows(t0: float, t1: float, step: float) -> list[float]:
    return [t0 + i * step for i in range(int((t1 - t0) / step) + 1)]


def assert_every_10s_window_within_a_point(busy: list[tuple[float, float]], target: float) -> None:
    """The group's share of every 10 s window from 10 s to 45 s (steps of
    0.25 s) is target +- 1 point."""
    shares = [share(busy, t0, 10.0) for t0 in windows(10.0, 35.0, 0.25)]
    assert min(shares) >= target - 0.01 and max(shares) <= target + 0.01, (min(shares), max(shares))


def test_a_lone_30_percent_cap_with_1s_kernels_gets_30_percent_of_every_10s_window():
    # Three 1 s kernels fill a 30% cap's 3 s exactly; each is charged a hair
    # more than 1 s, and asking room for a whole kernel (plus quantum_min)
    # let only two in per window: 20%.
    busy = run({"capped": (0.3, 0.3, 1.0)}, until=45.0)["capped"]
    assert_every_10s_window_within_a_point(busy, 0.30)


def test_a_30_percent_cap_with_1s_kernels_charged_a_little_more_keeps_30_percent():
    # On a shared GPU a 1 s kernel is measured ~1% longer at times (a
    # context switch, the neighbour's tail). With only quantum_min (5 ms) of
    # slack for the window's room, every third one waited for the first to
    # leave the window entirely: 3.4 s / 5.6 s spacing, 23-27%.
    busy = run({"capped": (0.3, 0.3, 1.0)}, until=45.0, overcharge=0.008)["capped"]
    assert_every_10s_window_within_a_point(busy, 0.30)


def test_1s_kernels_in_a_30_percent_group_get_their_guarantee_beside_1ms_kernels():
    # request = limit = 30% with 1 s kernels beside 70% (limit 100%) with 1 ms
    # kernels: each 1 s kernel is admitted on credit and charged whole; b's
    # 1 s windows dip while it runs (docs/architecture.md), its 10 s hold.
    busy = run({"a": (0.3, 0.3, 1.0), "b": (0.7, 1.0, 0.001)}, until=45.0)
    assert_every_10s_window_within_a_point(busy["a"], 0.30)
    assert_every_10s_window_within_a_point(busy["b"], 0.70)


def test_1s_kernels_in_an_uncapped_30_percent_group_get_their_guarantee_beside_1ms_kernels():
    busy = run({"a": (0.3, 1.0, 1.0), "b": (0.7, 1.0, 0.001)}, until=45.0)
    assert_every_10s_window_within_a_point(busy["a"], 0.30)


def test_a_30_percent_cap_with_1ms_kernels_keeps_its_30_percent_beside_1s_kernels():
    # Each 1 s kernel of b makes the capped group's grant late by up to 1 s;
    # the smooth cap's tolerance (how late it was served) lets it catch up
    # on back-to-back slices after, instead of losing that time: it got 2%.
    busy = run({"capped": (0.3, 0.3, 0.001), "b": (0.7, 1.0, 1.0)}, until=45.0)
    assert_every_10s_window_within_a_point(busy["capped"], 0.30)
    assert_every_10s_window_within_a_point(busy["b"], 0.70)


def test_a_capped_group_catching_up_after_1s_kernels_is_not_cut_into_many_handoffs():
    # After each 1 s kernel of b the capped group catches up on back-to-back
    # slices; each grant and release idles the GPU for their messages
    # (0.5 ms each way on a loaded machine), uncharged but lost to it. Its
    # catch-up comes as one slice (up to quantum_max), not 21 ms ones: 28.6%.
    busy = run({"capped": (0.3, 0.3, 0.001), "b": (0.7, 1.0, 1.0)}, until=45.0, transit=0.0005)
    capped = share(busy["capped"], 10.0, 30.0)
    assert 0.29 <= capped <= 0.31, capped


def test_a_30_percent_cap_beside_1ms_kernels_holds_10s_within_1_point_and_1s_within_3():
    # Its pause often ends while b holds a slice (up to quantum_max): served
    # late, it catches up after (27.5-28.9% over 20 s when that time was
    # lost). The catch-up once made its 1 s windows swing 26.4-32.5%, past
    # the 3 points; now they read 28.9-30.1% here (10 s windows
    # 29.6-30.0%), so the promise itself is asserted
    # (docs/architecture.md, "What holds").
    for transit, late in ((0.0002, 0.0), (0.0004, 0.0005)):
        busy = run({"capped": (0.3, 0.3, 0.001), "b": (0.7, 1.0, 0.001)}, until=45.0, transit=transit, late=late)
        assert_every_10s_window_within_a_point(busy["capped"], 0.30)
        one_second = [share(busy["capped"], t0, 1.0) for t0 in windows(5.0, 44.0, 0.1)]
        assert min(one_second) >= 0.27 and max(one_second) <= 0.33, (min(one_second), max(one_second))


@pytest.mark.parametrize("item", [0.00022, 0.001, 0.0125])
def test_a_30_percent_cap_holds_to_half_a_point_despite_transit_and_late_timers(item):
    # 0.4 ms each way and timers 0.5 ms late, as on a loaded 2-core machine:
    # charging the time held (transit included) and pacing from late grants
    # gave a 30% cap ~28.5% of the GPU.
    busy = run({"capped": (0.3, 0.3, item)}, until=26.0, transit=0.0004, late=0.0005)["capped"]
    assert share(busy, 5.0, 20.0) == pytest.approx(0.30, abs=0.005)
    one_second = [share(busy, t0, 1.0) for t0 in windows(5.0, 24.0, 0.1)]
    assert min(one_second) >= 0.27 and max(one_second) <= 0.33, (min(one_second), max(one_second))


def test_four_groups_with_mixed_kernel_lengths_get_their_requests():
    groups = {"g10": (0.1, 1.0, 0.00002), "g20": (0.2, 1.0, 0.001), "g30": (0.3, 1.0, 0.010),
              "g40": (0.4, 1.0, 0.100)}
    busy = run(groups, until=45.0)
    for name, (request, _, _) in groups.items():
        # g40 (100 ms items) reads 39.0% in its lowest windows: at the edge.
        assert_every_10s_window_within_a_point(busy[name], request)


def test_charged_seconds_add_up_every_charge_and_the_holders_slice_so_far():
    s = Scheduler(CONFIG)
    s.add_group(GroupSpec("a", 0.5, 1.0, GIB), 0.0)
    s.attach("a1", "a", 0.0)
    [grant] = s.request("a1", 0.0)
    assert s.charged_seconds("a", 0.04) == pytest.approx(0.04)  # accruing
    s.release("a1", grant.token_id, 0.05, 0.05)
    [grant] = s.request("a1", 20.0)  # the first slice has left the window, not the total
    assert s.usage("a", 20.0) == 0.0
    assert s.charged_seconds("a", 20.03) == pytest.approx(0.08)
    assert s.charged_total == {"a": pytest.approx(0.05)}


def test_a_long_item_is_not_renewed_past_a_capped_waiters_short_pause():
    # b (1 s items) holds while a 30% cap waits out its smooth-cap pause
    # (50 ms). Renewed, b's next item would keep the capped group off the
    # GPU for a whole second past its pause, in 2 s clumps that swing both
    # groups' 10 s windows; refused, b hands over when its item ends.
    s = Scheduler(CONFIG)
    s.add_group(GroupSpec("capped", 0.3, 0.3, GIB), 0.0)
    s.add_group(GroupSpec("b", 0.7, 1.0, GIB), 0.0)
    s.attach("capped", "capped", 0.0)
    s.attach("b", "b", 0.0)
    [first] = s.request("capped", 0.0, work_item=0.001)
    slice_ = 0.0214
    assert s.release("capped", first.token_id, slice_, slice_) == []
    assert s.request("capped", slice_, work_item=0.001) == []     # in its pause until ~0.071
    [grant] = s.request("b", slice_, work_item=1.0)
    assert grant.client_id == "b"
    # It asks ahead of its item's end (the shim renews at a lead), inside the pause.
    assert s.renew("b", grant.token_id, 0.03 - slice_, 0.03, work_item=1.0) == []
    assert s.holder() == ("b", grant.token_id)
