"""Deterministic tests of every scheduling rule, on a fake clock (plain floats)."""
from __future__ import annotations

import math

import pytest

from gslice.tokend.errors import (
    AlreadyExists,
    FailedPrecondition,
    GsliceError,
    InvalidArgument,
    NotFound,
    RequestSumExceeded,
)
from gslice.tokend.scheduler import (
    Expire,
    Grant,
    GroupAccounting,
    GroupSpec,
    Priority,
    Revoke,
    Scheduler,
    SchedulerConfig,
)

GIB = 1 << 30
CONFIG = SchedulerConfig(window=10.0, quantum_min=0.005, quantum_max=0.100, grace=0.200)
# Smooth caps off: the limit holds over the sliding window only (the rule
# these tests pin down; tests/unit/test_scheduler_debt_and_caps.py covers smoothing).
WINDOW_CAP_ONLY = SchedulerConfig(window=10.0, quantum_min=0.005, quantum_max=0.100, grace=0.200, cap_period=0.0)


def spec(name, request=0.5, limit=1.0, priority=Priority.NORMAL, quota=GIB):
    return GroupSpec(name, request, limit, quota, priority)


def snapshot(s: Scheduler, now: float):
    """Everything observable, to prove a refused call changed nothing."""
    return {
        "groups": s.groups(),
        "clients": {c: (s.client_group(c), s.client_quantum(c)) for c in s.clients()},
        "holder": s.holder(),
        "waiting": s.waiting(),
        "usage": {g.name: s.usage(g.name, now) for g in s.groups()},
        "wakeup": s.next_wakeup(),
        "decisions": s.decisions,
        "granted": dict(s.tokens_granted),
        "preemptions": dict(s.preemptions),
        "expiries": dict(s.expiries),
    }


@pytest.fixture
def two_groups():
    s = Scheduler(CONFIG)
    s.add_group(spec("a", 0.3), 0.0)
    s.add_group(spec("b", 0.7), 0.0)
    s.attach("a1", "a", 0.0)
    s.attach("a2", "a", 0.0)
    s.attach("b1", "b", 0.0)
    return s


# ------------------------------------------------------------------- errors

def test_error_codes_map_to_grpc_status_names():
    assert InvalidArgument("x").code == "invalid_argument"
    assert NotFound("x").code == "not_found"
    assert AlreadyExists("x").code == "already_exists"
    assert FailedPrecondition("x").code == "failed_precondition"
    assert RequestSumExceeded("x").code == "failed_precondition"
    assert issubclass(RequestSumExceeded, FailedPrecondition)
    assert all(issubclass(e, GsliceError) for e in (InvalidArgument, NotFound, AlreadyExists, FailedPrecondition))


@pytest.mark.parametrize("bad, message", [
    (GroupSpec("", 0.5, 1.0, GIB), "group name ''"),
    (GroupSpec("-x", 0.5, 1.0, GIB), "group name '-x'"),
    (GroupSpec("a" * 64, 0.5, 1.0, GIB), "expected 1 to 63"),
    (GroupSpec("a b", 0.5, 1.0, GIB), "group name 'a b'"),
    (GroupSpec("a", 1.2, 1.0, GIB), "request 1.2 for group 'a' is out of range: expected 0 < request <= 1"),
    (GroupSpec("a", 0.0, 1.0, GIB), "request 0.0"),
    (GroupSpec("a", float("nan"), 1.0, GIB), "request nan"),
    (GroupSpec("a", 0.5, 0.4, GIB), "limit 0.4 for group 'a' is out of range: expected request (0.5) <= limit <= 1"),
    (GroupSpec("a", 0.5, 1.5, GIB), "limit 1.5"),
    (GroupSpec("a", 0.5, 1.0, 0), "memory quota 0"),
    (GroupSpec("a", 0.5, 1.0, 1.5), "memory quota 1.5"),
    (GroupSpec("a", 0.5, 1.0, GIB, 7), "priority 7 for group 'a' is invalid: expected LOW (1), NORMAL (2) or HIGH (3)"),
])
def test_group_spec_validation_names_the_bad_value(bad, message):
    with pytest.raises(InvalidArgument, match=message.replace("(", r"\(").replace(")", r"\)")):
        bad.validate()


def test_valid_names_are_accepted():
    for name in ("a", "A9", "team.ml-train_2", "9" * 63):
        GroupSpec(name, 0.5, 1.0, GIB).validate()


@pytest.mark.parametrize("config", [
    SchedulerConfig(window=0),
    SchedulerConfig(quantum_min=0),
    SchedulerConfig(quantum_min=0.2, quantum_max=0.1),
    SchedulerConfig(quantum_max=20.0),
    SchedulerConfig(grace=-1),
    SchedulerConfig(window=math.inf),
])
def test_bad_config_is_refused(config):
    with pytest.raises(InvalidArgument):
        Scheduler(config)


def test_request_sum_over_one_is_refused_naming_groups_and_total(two_groups):
    s = two_groups
    before = snapshot(s, 1.0)
    with pytest.raises(RequestSumExceeded, match=r"requests would sum to 1\.10 > 1\.0 \(a=0\.30, b=0\.70, c=0\.10\)"):
        s.add_group(spec("c", 0.1), 1.0)
    with pytest.raises(RequestSumExceeded, match=r"a=0\.40, b=0\.70"):
        s.update_group(spec("a", 0.4), 1.0)
    assert snapshot(s, 1.0) == before


def test_requests_summing_to_exactly_one_are_accepted_despite_round_off():
    s = Scheduler(CONFIG)
    for i in range(10):
        s.add_group(spec(f"g{i}", 0.1), 0.0)  # 0.1 * 10 sums to 0.9999999999999999
    s2 = Scheduler(CONFIG)
    for i, r in enumerate((0.1, 0.2, 0.3, 0.4)):
        s2.add_group(spec(f"g{i}", r), 0.0)  # sums to 1.0000000000000002 in floats
    assert len(s2.groups()) == 4


def test_limit_below_one_minimal_quantum_per_window_is_refused():
    s = Scheduler(CONFIG)
    with pytest.raises(InvalidArgument, match=r"expected limit >= 0\.0005"):
        s.add_group(spec("tiny", 0.0001, 0.0001), 0.0)
    s.add_group(spec("small", 0.0005, 0.0005), 0.0)
    assert s.min_limit() == 0.0005  # what a stored group is raised to when the flags change (load_groups)
    s.add_group(spec("at_the_minimum", 0.0001, s.min_limit()), 0.0)


def test_group_errors_leave_state_untouched(two_groups):
    s = two_groups
    s.request("a1", 0.0)
    before = snapshot(s, 0.05)
    with pytest.raises(AlreadyExists, match="group 'a' already exists"):
        s.add_group(spec("a", 0.1), 0.05)
    with pytest.raises(NotFound, match="group 'zz' does not exist"):
        s.update_group(spec("zz", 0.1), 0.05)
    with pytest.raises(NotFound):
        s.remove_group("zz", 0.05)
    with pytest.raises(FailedPrecondition, match="group 'a' still has 2 attached client") as refused:
        s.remove_group("a", 0.05)
    assert "a1" not in str(refused.value)  # a client id is its bearer credential: counted, never named
    with pytest.raises(InvalidArgument):
        s.update_group(spec("a", 0.3, 0.2), 0.05)
    with pytest.raises(NotFound):
        s.group("zz")
    assert snapshot(s, 0.05) == before


def test_client_errors_leave_state_untouched(two_groups):
    s = two_groups
    [grant] = s.request("a1", 0.0)
    s.request("b1", 0.0)
    before = snapshot(s, 0.05)
    with pytest.raises(NotFound, match="group 'nope'"):
        s.attach("x", "nope", 0.05)
    with pytest.raises(AlreadyExists, match="client 'a1' is already attached"):
        s.attach("a1", "b", 0.05)
    with pytest.raises(NotFound, match="client 'ghost' is not attached"):
        s.request("ghost", 0.05)
    with pytest.raises(NotFound):
        s.detach("ghost", 0.05)
    with pytest.raises(NotFound):
        s.client_group("ghost")
    with pytest.raises(FailedPrecondition, match=f"this client already holds token {grant.token_id}"):
        s.request("a1", 0.05)
    with pytest.raises(FailedPrecondition, match="this client does not hold token 99 .it holds token 1."):
        s.release("a1", 99, 0.01, 0.05)
    with pytest.raises(FailedPrecondition, match="this client does not hold token 1 .it holds no token."):
        s.release("b1", grant.token_id, 0.01, 0.05)
    for bad_used in (-0.1, math.nan, math.inf, "1"):
        with pytest.raises(InvalidArgument, match="used time"):
            s.release("a1", grant.token_id, bad_used, 0.05)
    with pytest.raises(InvalidArgument, match="time nan"):
        s.advance(math.nan)
    assert snapshot(s, 0.05) == before


def test_remove_group_after_clients_left():
    s = Scheduler(CONFIG)
    s.add_group(spec("a"), 0.0)
    s.attach("a1", "a", 0.0)
    s.detach("a1", 1.0)
    s.remove_group("a", 1.0)
    assert s.groups() == [] and "a" not in s.tokens_granted
    s.add_group(spec("a", 1.0), 2.0)  # its request no longer counts


# ------------------------------------------------------------------ basics

def test_first_request_is_granted_a_maximal_quantum(two_groups):
    s = two_groups
    assert s.request("a1", 1.0) == [Grant("a1", 1, 0.100)]
    assert s.holder() == ("a1", 1)
    assert s.next_wakeup() == pytest.approx(1.0 + 0.100 + 0.200)
    assert s.tokens_granted == {"a": 1, "b": 0}
    assert s.decisions == 1


def test_request_is_idempotent_and_cancel_stops_waiting(two_groups):
    s = two_groups
    s.request("a1", 0.0)
    assert s.request("b1", 0.0) == []
    assert s.request("b1", 0.01) == []
    assert s.waiting() == ["b1"]
    assert s.cancel("b1", 0.02) == []
    assert s.cancel("b1", 0.02) == []  # not waiting: no-op
    assert s.waiting() == []
    assert s.release("a1", 1, 0.05, 0.05) == []  # nobody waits: token stays free
    assert s.holder() is None and s.next_wakeup() is None


def test_release_hands_token_to_next_waiter_at_once(two_groups):
    s = two_groups
    s.request("a1", 0.0)
    s.request("b1", 0.01)
    assert s.release("a1", 1, 0.1, 0.1) == [Grant("b1", 2, 0.100)]


def test_release_charges_what_was_used_but_at_least_the_time_held_less_transit(two_groups):
    s = two_groups
    allowance = CONFIG.transit_allowance
    assert allowance > 0
    s.request("a1", 0.0)
    s.release("a1", 1, 0.02, 0.05)  # used far less than held: held - transit allowance
    assert s.usage("a", 0.05) == pytest.approx(0.05 - allowance)
    s.request("a1", 0.5)
    s.release("a1", 2, 0.0495, 0.55)  # used within the allowance of the time held: what it used
    assert s.usage("a", 0.55) == pytest.approx(0.05 - allowance + 0.0495)
    s.request("a1", 0.9)
    s.release("a1", 3, 0.0, 0.95)
    assert s.usage("a", 0.95) == pytest.approx(0.05 - allowance + 0.0495 + 0.05 - allowance)
    before = s.usage("a", 1.0)
    s.request("a1", 1.0)
    s.release("a1", 4, 0.25, 1.1)  # used 0.25 > elapsed 0.1: reaches back before the grant
    assert s.usage("a", 1.1) == pytest.approx(before + 0.25)
    # The 0.25 charge ending at 1.1 leaves the window at 11.1 at the latest (the first slice is out by 10.1).
    assert s.usage("a", 10.1) == pytest.approx(before - (0.05 - allowance) + 0.25, abs=1e-9)
    assert s.usage("a", 11.1 + 1e-9) == pytest.approx(0.0, abs=1e-9)


def test_usage_counts_holder_time_as_it_accrues_and_slides_out(two_groups):
    s = two_groups
    s.request("a1", 0.0)
    assert s.usage("a", 0.04) == pytest.approx(0.04)
    assert s.share("a", 0.04) == pytest.approx(0.004)
    s.release("a1", 1, 0.1, 0.1)
    assert s.usage("a", 5.0) == pytest.approx(0.1)
    assert s.usage("a", 10.05) == pytest.approx(0.05)  # half the interval left the window
    assert s.usage("a", 10.1) == pytest.approx(0.0, abs=1e-12)
    assert s.usage("b", 10.1) == 0.0


def test_old_intervals_are_pruned_so_memory_does_not_grow():
    s = Scheduler(CONFIG)
    s.add_group(spec("a", 0.3), 0.0)
    s.add_group(spec("b", 0.3), 0.0)
    s.attach("a1", "a", 0.0)
    s.attach("b1", "b", 0.0)
    now = 0.0
    for i in range(20000):
        client = "a1" if i % 2 == 0 else "b1"
        [grant] = [d for d in s.request(client, now) if isinstance(d, Grant)]
        now += 0.01
        s.release(client, grant.token_id, 0.003, now)
        now += 0.04  # idle gaps: intervals cannot be merged
    group = s._groups["a"]
    # 50 ms per cycle, every other cycle for 'a': ~100 intervals in a 10 s window.
    assert len(group.intervals) <= 10.0 / 0.1 + 2
    assert s.usage("a", now) == pytest.approx(sum(e - max(st, now - 10.0) + p for st, e, p in group.intervals))


def test_time_never_goes_backwards_it_is_clamped(two_groups):
    s = two_groups
    s.request("a1", 5.0)
    s.request("b1", 4.0)  # earlier than 5.0: treated as 5.0
    assert s.release("a1", 1, 0.0, 3.0) == [Grant("b1", 2, 0.100)]
    assert s.holder_since() == 5.0
    assert s.usage("a", 1.0) == 0.0  # nothing was charged: no time passed


def test_detach_of_holder_charges_until_now_and_grants_next(two_groups):
    s = two_groups
    s.request("a1", 0.0)
    s.request("b1", 0.0)
    assert s.detach("a1", 0.03) == [Grant("b1", 2, 0.100)]
    assert s.usage("a", 0.03) == pytest.approx(0.03)
    assert "a1" not in s.clients()
    with pytest.raises(NotFound):
        s.release("a1", 1, 0.0, 0.04)


def test_detach_of_waiter_removes_its_wait(two_groups):
    s = two_groups
    s.request("a1", 0.0)
    s.request("b1", 0.0)
    s.detach("b1", 0.01)
    assert s.waiting() == []
    assert s.release("a1", 1, 0.01, 0.02) == []


# ------------------------------------------------------------------ choice

def _a_charged_then_both_wait(s, used: float) -> str:
    """a's holder is charged `used` while a1, then b1, wait: who is next."""
    s.attach("holder", "a", 0.0)
    s.request("holder", 0.0)
    s.request("a1", 0.001)
    s.request("b1", 0.002)
    return s.release("holder", 1, used, used)[0].client_id


def test_group_furthest_below_request_goes_first(two_groups):
    # a: request 0.3, b: request 0.7; a was charged 20 ms, b nothing.
    assert _a_charged_then_both_wait(two_groups, 0.020) == "b1"


def test_groups_level_in_pace_take_turns_in_arrival_order(two_groups):
    # a is ahead by 3 ms of its request's time, less than quantum_min: a
    # tie (busy groups differ by handoff jitter), so the longest waiter goes
    # first; ordered by pace alone, busy groups took turns in a new order
    # every round and their 1 s shares swung by a slice.
    assert _a_charged_then_both_wait(two_groups, 0.003) == "a1"


def test_tier_zero_beats_priority_and_priority_orders_within_tier():
    s = Scheduler(CONFIG)
    s.add_group(spec("low", 0.2, priority=Priority.LOW), 0.0)
    s.add_group(spec("high", 0.2, priority=Priority.HIGH), 0.0)
    s.add_group(spec("norm", 0.2, priority=Priority.NORMAL), 0.0)
    for name in ("low", "high", "norm", "x"):
        if name == "x":
            s.add_group(spec("x", 0.1), 0.0)
        s.attach(name + "1", name, 0.0)
    # Put 'high' and 'norm' above their requests (2.0 s = 20% of the window).
    for name in ("high", "norm"):
        t0 = 0.0 if name == "high" else 3.0
        s.request(name + "1", t0)
        s.release(name + "1", s.holder()[1], 2.5, t0 + 2.5)
    s.request("x1", 6.0)  # holds while the others queue
    s.request("norm1", 6.01)
    s.request("high1", 6.02)
    s.request("low1", 6.03)
    # low is below its request (tier 0); then among tier 1, HIGH before NORMAL.
    assert s.waiting() == ["low1", "high1", "norm1"]


def test_within_a_group_waiters_are_served_fifo(two_groups):
    s = two_groups
    s.attach("a3", "a", 0.0)
    s.request("b1", 0.0)
    s.request("a3", 0.01)
    s.request("a1", 0.02)
    s.request("a2", 0.03)
    assert s.waiting() == ["a3", "a1", "a2"]
    order = []
    token = 1
    now = 0.1
    while s.holder() is not None:
        client, token = s.holder()
        order.append(client)
        s.release(client, token, 0.0, now)
        now += 0.001
    assert order == ["b1", "a3", "a1", "a2"]


def test_among_groups_above_request_least_share_goes_first():
    s = Scheduler(CONFIG)
    s.add_group(spec("a", 0.1), 0.0)
    s.add_group(spec("b", 0.1), 0.0)
    s.add_group(spec("c", 0.1), 0.0)
    for g in "abc":
        s.attach(g + "1", g, 0.0)
    s.request("a1", 0.0)
    s.request("b1", 0.0)
    # a and b take turns, both busy: a 0.6 s a slice, b 0.5 s.
    now, token = 0.0, 1
    for holder, other, used in (("a1", "b1", 0.6), ("b1", "a1", 0.5), ("a1", "b1", 0.6)):
        now += used
        assert s.release(holder, token, used, now)[0].client_id == other
        s.request(holder, now)
        token += 1
    s.request("c1", now)
    now += 0.5
    assert s.release("b1", token, 0.5, now)[0].client_id == "c1"  # tier 0 first
    s.request("b1", now)
    # a 1.2 s, b 1.0 s: both at or above their 1 s request; b is behind.
    assert s.waiting() == ["b1", "a1"]


def test_a_group_back_from_idle_has_no_claim_on_its_idle_time(two_groups):
    # a ran alone for 4 s (40% of the window, its request is 30%); b comes
    # back: they split 30/70 from then on. Compared by window usage, a got
    # minimal slices (5% of the GPU, under its guarantee) until b caught up.
    s = two_groups
    s.request("a1", 0.0)
    s.release("a1", 1, 4.0, 4.0)
    s.request("b1", 4.0)
    s.request("a1", 4.0)
    [grant] = s.release("b1", 2, 0.1, 4.1)
    # Its fair slice (0.1 s x 30/70) plus its part of b's 0.1 s since b
    # came back (a was charged nothing since): level again after it.
    assert grant == Grant("a1", 3, pytest.approx(2 * 0.1 * 0.3 / 0.7))


# ------------------------------------------------------------------- limit

def test_capped_group_waits_for_room_while_gpu_idles():
    s = Scheduler(WINDOW_CAP_ONLY)
    s.add_group(spec("capped", 0.1, 0.1), 0.0)  # 1 s per 10 s window
    s.attach("c1", "capped", 0.0)
    s.request("c1", 0.0)
    s.release("c1", 1, 0.0, 1.0)  # used the whole cap at once
    assert s.request("c1", 1.0) == []
    assert s.holder() is None and s.waiting() == ["c1"]
    wakeup = s.next_wakeup()
    # Room for one 0.1 s quantum once 0.1 s of the [0, 1] interval slid out.
    assert wakeup == pytest.approx(10.1)
    assert s.advance(wakeup - 0.01) == []
    [grant] = s.advance(wakeup)
    assert grant.client_id == "c1" and grant.quantum == pytest.approx(0.1)


def test_quantum_never_exceeds_room_under_limit():
    s = Scheduler(WINDOW_CAP_ONLY)
    s.add_group(spec("capped", 0.0006, 0.0006), 0.0)  # 6 ms per window, less than a 100 ms quantum
    s.attach("c1", "capped", 0.0)
    [grant] = s.request("c1", 0.0)
    assert grant.quantum == pytest.approx(0.006)
    s.release("c1", 1, 0.004, 0.004)
    assert s.request("c1", 0.004) == []  # room 2 ms < cap 6 ms: wait
    [grant] = s.advance(s.next_wakeup())
    assert grant.quantum <= 0.006 + 1e-9


def test_limit_raise_by_update_grants_at_once():
    s = Scheduler(WINDOW_CAP_ONLY)
    s.add_group(spec("g", 0.1, 0.1), 0.0)
    s.attach("g1", "g", 0.0)
    s.request("g1", 0.0)
    s.release("g1", 1, 0.0, 1.0)
    assert s.request("g1", 1.0) == []
    [grant] = s.update_group(spec("g", 0.1, 0.5), 1.5)
    assert grant == Grant("g1", 2, 0.1)
    assert s.group("g").limit == 0.5


def test_work_conserving_other_group_uses_gpu_while_capped_waits():
    s = Scheduler(CONFIG)
    s.add_group(spec("capped", 0.1, 0.1), 0.0)
    s.add_group(spec("free", 0.1), 0.0)
    s.attach("c1", "capped", 0.0)
    s.attach("f1", "free", 0.0)
    s.request("c1", 0.0)
    s.release("c1", 1, 0.0, 1.0)
    s.request("c1", 1.0)
    assert s.request("f1", 1.0) == [Grant("f1", 2, 0.1)]


# ------------------------------------------------------------------ quantum

def test_quantum_adapts_to_idle_and_full_use(two_groups):
    s = two_groups
    now = 0.0

    def cycle(used, idle):
        nonlocal now
        [grant] = s.request("a1", now)
        now += used
        s.release("a1", grant.token_id, used, now, idle=idle)
        now += 1.0
        return grant.quantum

    assert cycle(0.01, True) == pytest.approx(0.1)
    assert s.client_quantum("a1") == pytest.approx(0.06)  # half way to twice what it used
    assert cycle(0.01, True) == pytest.approx(0.06)
    for _ in range(20):
        cycle(0.001, True)
    assert s.client_quantum("a1") == pytest.approx(CONFIG.quantum_min)  # clamped
    q = s.client_quantum("a1")
    cycle(q, False)  # used it all: doubles
    assert s.client_quantum("a1") == pytest.approx(2 * q)
    for _ in range(10):
        cycle(s.client_quantum("a1"), False)
    assert s.client_quantum("a1") == pytest.approx(CONFIG.quantum_max)
    cycle(0.03, False)  # early, not idle (synchronised): unchanged
    assert s.client_quantum("a1") == pytest.approx(CONFIG.quantum_max)


def test_group_ahead_of_pace_gets_minimal_quantum_while_others_are_active(two_groups):
    s = two_groups  # a 0.3, b 0.7
    s.request("a1", 0.0)
    s.request("b1", 0.0)
    s.release("a1", 1, 0.4, 0.4)  # both busy: a got 0.4 s
    s.request("a1", 0.4)
    [grant] = s.release("b1", 2, 0.1, 0.5)  # b got 0.1 s
    assert grant == Grant("a1", 3, CONFIG.quantum_min)  # far ahead of b's pace
    # Nobody else active lately: the normal quantum.
    s.release("a1", 3, 0.005, 0.505)
    [grant] = s.request("a2", 1.5)
    assert grant.quantum == pytest.approx(CONFIG.quantum_max)


def test_slices_are_proportional_to_requests_while_groups_alternate(two_groups):
    s = two_groups  # a 0.3, b 0.7; one busy client each, re-requesting 1 ms after each release
    [grant] = s.request("b1", 0.0)
    s.request("a1", 0.0)
    now, slices = 0.0, {"a1": [], "b1": []}
    for _ in range(41):  # ends after one of b's slices: a is then exactly on pace
        holder = grant.client_id
        slices[holder].append(grant.quantum)
        now += grant.quantum
        [grant] = s.release(holder, grant.token_id, grant.quantum, now)
        assert grant.client_id != holder  # the other one was waiting: the token alternates
        s.request(holder, now + 0.001)
    # After a catch-up slice, a's slice is its stride: quantum_max x 0.3 / 0.7.
    assert slices["a1"][0] > slices["a1"][-1] == pytest.approx(0.1 * 0.3 / 0.7, rel=0.05)
    assert all(q == pytest.approx(0.1) for q in slices["b1"])
    assert s.usage("a", now) / (s.usage("a", now) + s.usage("b", now)) == pytest.approx(0.3, abs=0.01)


# -------------------------------------------------------------- preemption

REVOKE_THEN_GRANT = SchedulerConfig(window=10.0, quantum_min=0.005, quantum_max=0.100, grace=0.200,
                                    preempt_handover=False)


def _preemption_setup(config=CONFIG, high_clients=("h1",)):
    """lo (LOW, 50%) holds the token through l1; hi (HIGH, 30%) has clients."""
    s = Scheduler(config)
    s.add_group(spec("lo", 0.5, priority=Priority.LOW), 0.0)
    s.add_group(spec("hi", 0.3, priority=Priority.HIGH), 0.0)
    s.attach("l1", "lo", 0.0)
    for client in high_clients:
        s.attach(client, "hi", 0.0)
    s.request("l1", 0.0)
    return s


def test_higher_class_preempts_lower_once_per_token():
    s = _preemption_setup(REVOKE_THEN_GRANT, high_clients=("h1", "h2"))
    [revoke] = s.request("h1", 0.01)
    assert isinstance(revoke, Revoke) and revoke.client_id == "l1" and revoke.token_id == 1
    assert "'hi'" in revoke.reason and "HIGH > LOW" in revoke.reason
    assert s.request("h2", 0.02) == []  # once per token
    assert s.advance(0.03) == []
    assert s.holder() == ("l1", 1)  # still held until released
    assert s.preemptions == {"lo": 1, "hi": 0}
    # hi's fair slice: 0.1 x 0.3/0.5, plus what it is behind lo's pace (lo charged its 0.035 s held less
    # the transit allowance, over lo's 5 s request).
    lo_charged = 0.035 - REVOKE_THEN_GRANT.transit_allowance
    assert s.release("l1", 1, 0.03, 0.035) == [Grant("h1", 2, pytest.approx(0.1 * 0.3 / 0.5 + lo_charged / 5 * 3))]
    assert s.client_quantum("l1") == pytest.approx(0.1)  # preempted release: unchanged


def test_preemption_hands_the_token_over_at_once():
    s = _preemption_setup()
    revoke, grant = s.request("h1", 0.01)
    assert isinstance(revoke, Revoke) and (revoke.client_id, revoke.token_id) == ("l1", 1)
    assert "'hi'" in revoke.reason and "HIGH > LOW" in revoke.reason
    assert isinstance(grant, Grant) and grant.client_id == "h1" and not grant.renewed
    assert s.holder() == ("h1", grant.token_id)
    assert s.preemptions == {"lo": 1, "hi": 0}
    assert s.usage("lo", 0.01) == pytest.approx(0.01)  # charged up to the handover
    # Its release comes later and charges what it measured beyond (its last
    # kernel drained after the handover); it decides nothing.
    assert s.release("l1", 1, 0.014, 0.011) == []
    assert s.usage("lo", 0.02) == pytest.approx(0.014)
    assert s.holder() == ("h1", grant.token_id)
    assert s.client_quantum("l1") == pytest.approx(0.1)  # preempted: unchanged
    with pytest.raises(FailedPrecondition):
        s.release("l1", 1, 0.014, 0.012)  # accepted once


def test_handed_over_token_not_released_within_grace_is_charged_and_reported():
    s = _preemption_setup()
    _revoke, grant = s.request("h1", 0.01)
    s.release("h1", grant.token_id, 0.005, 0.015)
    wakeup = s.next_wakeup()
    assert wakeup == pytest.approx(0.21)  # the Revoke + grace
    [expire] = s.advance(wakeup)
    assert expire == Expire("l1", 1, pytest.approx(0.2), after_revoke=True)
    assert s.usage("lo", 0.21) == pytest.approx(0.21)
    assert s.expiries["lo"] == 1
    assert s.advance(0.5) == []  # reported once
    assert s.release("l1", 1, 0.3, 0.6) == []  # a late release still charges the rest
    assert s.usage("lo", 0.6) == pytest.approx(0.3)


def test_equal_classes_never_preempt(two_groups):
    s = two_groups
    s.request("a1", 0.0)
    assert s.request("b1", 0.01) == []
    assert s.advance(0.2) == []
    assert s.preemptions == {"a": 0, "b": 0}


def test_priority_raise_by_update_preempts():
    s = Scheduler(CONFIG)
    s.add_group(spec("x", 0.5), 0.0)
    s.add_group(spec("y", 0.5), 0.0)
    s.attach("x1", "x", 0.0)
    s.attach("y1", "y", 0.0)
    s.request("x1", 0.0)
    s.request("y1", 0.0)
    revoke, grant = s.update_group(spec("y", 0.5, priority=Priority.HIGH), 0.01)
    assert revoke == Revoke("x1", 1, revoke.reason)
    assert grant.client_id == "y1"


def test_higher_class_above_request_does_not_preempt_holder_within_its_guarantee():
    s = Scheduler(CONFIG)
    s.add_group(spec("lo", 0.5, priority=Priority.LOW), 0.0)
    s.add_group(spec("hi", 0.1, priority=Priority.HIGH), 0.0)
    s.attach("l1", "lo", 0.0)
    s.attach("h1", "hi", 0.0)
    s.request("h1", 0.0)
    s.release("h1", 1, 0.0, 2.0)  # hi at 20% > its 10%
    s.request("l1", 2.0)  # lo at 0% < 50%: tier 0
    assert s.request("h1", 2.01) == []
    # lo stays below its request all through this token and hi stays above
    # its own until 12 s: nothing to decide before the expiry at 2.3.
    wakeup = s.next_wakeup()
    assert wakeup == pytest.approx(2.3)
    decisions = s.advance(wakeup)
    assert [type(d) for d in decisions] == [Expire, Grant]
    assert s.preemptions == {"lo": 0, "hi": 0}


def test_higher_class_preempts_when_holders_group_rises_past_its_request():
    s = Scheduler(SchedulerConfig(window=1.0, quantum_min=0.005, quantum_max=0.1, grace=0.2))
    s.add_group(spec("lo", 0.05, priority=Priority.LOW), 0.0)
    s.add_group(spec("hi", 0.1, priority=Priority.HIGH), 0.0)
    s.attach("l1", "lo", 0.0)
    s.attach("h1", "hi", 0.0)
    s.request("h1", 0.0)
    s.release("h1", 1, 0.0, 0.2)  # hi at 20% of a 1 s window > its 10%
    s.request("l1", 0.2)  # lo: 0% < 5%, tier 0
    assert s.request("h1", 0.2) == []  # hi is tier 1, lo tier 0: no preemption yet
    # lo reaches its 0.05 s request at 0.25; the wakeups must find it.
    decisions, now = [], 0.2
    while not decisions:
        now = s.next_wakeup()
        decisions = s.advance(now)
    assert isinstance(decisions[0], Revoke) and decisions[0].client_id == "l1"
    assert now == pytest.approx(0.25, abs=0.005)


# ------------------------------------------------------------------- renew

def _holder_and_waiter(holder_priority, waiter_priority, holder_request=0.3, waiter_request=0.35):
    s = Scheduler(CONFIG)
    s.add_group(spec("h", holder_request, priority=holder_priority), 0.0)
    s.add_group(spec("w", waiter_request, priority=waiter_priority), 0.0)
    s.attach("h1", "h", 0.0)
    s.attach("w1", "w", 0.0)
    return s


def test_renew_when_nobody_waits():
    s = _holder_and_waiter(Priority.NORMAL, Priority.NORMAL)
    [grant] = s.request("h1", 0.0)
    [renewed] = s.renew("h1", grant.token_id, 0.09, 0.09)
    assert renewed.renewed and renewed.client_id == "h1" and renewed.token_id == grant.token_id + 1


def test_a_renewal_measured_past_now_starts_where_the_queued_work_ends():
    # A holder with 1 s kernels renews while its queued kernel still runs:
    # it measures the slice to that kernel's end (0.9 s from now). The new
    # slice starts there, so its quantum covers the next kernel too; counted
    # from now, it expired while that kernel ran and the GPU went to the
    # next holder under it (both charged for the overlap).
    s = _holder_and_waiter(Priority.NORMAL, Priority.NORMAL)
    [grant] = s.request("h1", 0.0, work_item=1.0)
    [renewed] = s.renew("h1", grant.token_id, 1.0, 0.1, work_item=1.0)
    assert renewed.renewed and renewed.quantum >= 1.0 + CONFIG.quantum_min - 1e-9, renewed   # item + quantum_min
    # Its charge so far is the measured second, not more (the new slice
    # accrues from 1.0 on).
    assert s.usage("h", 0.5) == pytest.approx(1.0)
    assert s.usage("h", 1.5) == pytest.approx(1.5)
    # Not expired where a slice counted from the renewal (0.1 + quantum +
    # grace) would have ended, only past 1.0 + quantum + grace.
    assert s.advance(0.1 + renewed.quantum + CONFIG.grace + 0.01) == []
    assert s.holder() == ("h1", renewed.token_id)
    assert any(isinstance(d, Expire) for d in s.advance(1.0 + renewed.quantum + CONFIG.grace + 0.001))


def test_a_renewal_reaches_ahead_at_most_one_work_item():
    s = _holder_and_waiter(Priority.NORMAL, Priority.NORMAL)
    [grant] = s.request("h1", 0.0, work_item=0.2)
    [renewed] = s.renew("h1", grant.token_id, 5.0, 0.1, work_item=0.2)   # claims 4.9 s ahead
    assert s.usage("h", 0.2) == pytest.approx(5.0)
    expiry = s.advance(0.1 + 0.2 + renewed.quantum + CONFIG.grace + 0.001)
    assert any(isinstance(d, Expire) for d in expiry)


def test_no_renew_while_an_equal_class_waits():
    s = _holder_and_waiter(Priority.NORMAL, Priority.NORMAL)
    [grant] = s.request("h1", 0.0)
    s.request("w1", 0.01)
    assert s.renew("h1", grant.token_id, 0.09, 0.09) == []
    assert s.holder() == ("h1", grant.token_id)


def test_renew_while_only_outranked_clients_wait():
    # A high-priority holder below its request would be served before (and
    # would preempt) the low waiter: its burst goes on instead of being cut
    # into two slices around a handoff.
    s = _holder_and_waiter(Priority.HIGH, Priority.LOW)
    [grant] = s.request("h1", 0.0)
    s.request("w1", 0.001)
    [renewed] = s.renew("h1", grant.token_id, 0.004, 0.004)
    assert renewed.renewed and renewed.client_id == "h1"
    assert s.waiting() == ["w1"] and s.preemptions == {"h": 0, "w": 0}


def test_no_renew_for_a_higher_class_past_its_request_beside_a_guaranteed_waiter():
    # Guarantees come before classes: hi above its request (tier 1) is not
    # renewed over a lower class below its own (tier 0).
    s = _holder_and_waiter(Priority.HIGH, Priority.LOW, holder_request=0.1, waiter_request=0.5)
    [grant] = s.request("h1", 0.0)
    s.release("h1", grant.token_id, 0.0, 2.0)  # hi at 20% of the 10 s window > its 10%
    [grant] = s.request("h1", 2.0)
    s.request("w1", 2.001)
    assert s.renew("h1", grant.token_id, 0.004, 2.004) == []


# ------------------------------------------------------------------ expiry

def test_token_not_released_in_time_expires_and_passes_on(two_groups):
    s = two_groups
    s.request("a1", 0.0)
    s.request("b1", 0.05)
    assert s.next_wakeup() == pytest.approx(0.3)
    assert s.advance(0.29) == []
    decisions = s.advance(0.35)
    assert decisions == [Expire("a1", 1, pytest.approx(0.3)), Grant("b1", 2, 0.1)]
    assert s.usage("a", 0.35) == pytest.approx(0.3)
    assert s.expiries["a"] == 1
    # The late release is accepted and charged what the expiry did not.
    assert s.release("a1", 1, 0.45, 0.4) == []
    assert s.usage("a", 0.4) == pytest.approx(0.45)
    before = snapshot(s, 0.4)
    with pytest.raises(FailedPrecondition, match="does not hold token 1"):
        s.release("a1", 1, 0.1, 0.4)
    assert snapshot(s, 0.4) == before


def test_expiry_is_decided_by_the_next_event_too(two_groups):
    s = two_groups
    s.request("a1", 0.0)
    decisions = s.request("b1", 1.0)
    assert decisions == [Expire("a1", 1, pytest.approx(0.3)), Grant("b1", 2, 0.1)]
    # Charged as the interval [grant, grant + quantum + grace].
    assert s.usage("a", 10.2) == pytest.approx(0.1)


def test_late_release_before_expiry_is_observed_is_accepted(two_groups):
    s = two_groups
    s.request("a1", 0.0)
    assert s.release("a1", 1, 0.5, 0.5) == []
    assert s.usage("a", 0.5) == pytest.approx(0.5)
    assert s.expiries["a"] == 0


def test_next_wakeup_is_none_when_only_events_can_decide(two_groups):
    s = two_groups
    assert s.next_wakeup() is None
    s.request("a1", 0.0)
    s.release("a1", 1, 0.1, 0.1)
    assert s.next_wakeup() is None


def test_counters_match_decisions(two_groups):
    s = two_groups
    emitted = []
    emitted += s.request("a1", 0.0)
    emitted += s.request("b1", 0.0)
    emitted += s.advance(1.0)
    emitted += s.release("b1", 2, 0.05, 1.05)
    assert s.decisions == len(emitted) == 3
    assert sum(s.tokens_granted.values()) == sum(isinstance(d, Grant) for d in emitted)
    assert sum(s.expiries.values()) == sum(isinstance(d, Expire) for d in emitted)


def test_busy_fraction_counts_all_groups(two_groups):
    s = two_groups
    s.request("a1", 0.0)
    s.release("a1", 1, 1.0, 1.0)
    s.request("b1", 1.0)
    assert s.busy_fraction(1.2) == pytest.approx(0.12)
    assert s.busy_fraction(5.0) == pytest.approx(0.13)  # the holder accrues only until its deadline
    assert s.group_clients("a") == ["a1", "a2"] and s.group_waiting("a") == 0
    assert s.is_waiting("a1") is False


def _charged_capped_group() -> Scheduler:
    """A 30%-capped group that ran 3 slices, each used whole."""
    s = Scheduler(CONFIG)
    s.add_group(spec("c", 0.1, 0.3), 0.0)
    s.attach("c1", "c", 0.0)
    now = 0.0
    for _ in range(3):
        decisions = s.request("c1", now)
        while not decisions:  # the smooth cap's pause
            now = s.next_wakeup()
            decisions = s.advance(now)
        (grant,) = decisions
        s.release("c1", grant.token_id, grant.quantum, now + grant.quantum)
        now += grant.quantum
    return s


def test_accounting_carried_to_a_new_scheduler_keeps_its_window_pace_and_counters():
    old = _charged_capped_group()
    at = 2.0
    carried = old.accounting("c", at)
    new = Scheduler(CONFIG)
    new.add_group(spec("c", 0.1, 0.3), at)
    new.restore_accounting("c", carried, at)
    assert new.usage("c", at) == pytest.approx(old.usage("c", at)) == pytest.approx(old.charged_seconds("c", at))
    assert new.usage("c", at) > 0.05
    assert new.charged_seconds("c", at) == old.charged_seconds("c", at)
    assert new.tokens_granted["c"] == old.tokens_granted["c"] == 3
    assert new.accounting("c", at) == carried
    # ... and the window drops them on time, as the old one would have.
    assert new.usage("c", 10.05) == pytest.approx(old.usage("c", 10.05))
    assert new.usage("c", 11.0) == 0.0


@pytest.mark.parametrize("bad", [
    GroupAccounting(((1.0, 0.5, 0.0),), 0.0, 0.5, 1, 0, 0),          # ends before it starts
    GroupAccounting(((0.0, 1.0, 0.0), (0.5, 1.5, 0.0)), 0.0, 2.0, 2, 0, 0),  # overlapping
    GroupAccounting(((0.0, 3.0, 0.0),), 0.0, 3.0, 1, 0, 0),          # after now
    GroupAccounting(((0.0, 1.0, -1.0),), 0.0, 0.0, 1, 0, 0),         # negative point charge
    GroupAccounting(((0.0, math.nan, 0.0),), 0.0, 1.0, 1, 0, 0),
    GroupAccounting((), 0.0, -1.0, 0, 0, 0),                           # negative total
    GroupAccounting((), 0.0, 0.0, -1, 0, 0),                           # negative count
], ids=["reversed", "overlapping", "future", "negative_point", "nan", "negative_total", "negative_count"])
def test_bad_accounting_is_refused_and_changes_nothing(bad):
    s = Scheduler(CONFIG)
    s.add_group(spec("c", 0.1, 0.3), 2.0)
    before = snapshot(s, 2.0)
    with pytest.raises(InvalidArgument, match="group 'c'"):
        s.restore_accounting("c", bad, 2.0)
    assert snapshot(s, 2.0) == before and s.charged_seconds("c", 2.0) == 0.0


def test_accounting_is_restored_only_into_a_group_not_yet_charged():
    s = _charged_capped_group()
    with pytest.raises(FailedPrecondition, match="restore only a new group"):
        s.restore_accounting("c", GroupAccounting((), 0.0, 0.0, 0, 0, 0), 2.0)
