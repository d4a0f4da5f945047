"""Scheduler.preemptors: the groups the preemption doorbell flags (a client
of theirs asking now would preempt the holder), on a fake clock. Each case
also asks `request` what it does, so the view and the rule agree: a
flagged group's client asking preempts the holder (a Revoke of its token
and, with preempt_handover, a Grant to the asker in the same step); an
unflagged one's does not."""
from __future__ import annotations

import pytest

from gslice.tokend.scheduler import Expire, Grant, GroupSpec, Priority, Revoke, Scheduler, SchedulerConfig

GIB = 1 << 30
# A 1 s window, so usage moves tiers within a test; a long grace, so the
# holder's deadline is not what ends these cases (one test is about it);
# smooth caps off (one test turns them on).
CONFIG = SchedulerConfig(window=1.0, quantum_min=0.005, quantum_max=0.1, grace=2.0, cap_period=0.0)
LOW, NORMAL, HIGH = Priority.LOW, Priority.NORMAL, Priority.HIGH


def scheduler(*groups, config=CONFIG) -> Scheduler:
    """groups: (name, request, limit, priority, clients)."""
    s = Scheduler(config)
    for name, request, limit, priority, clients in groups:
        s.add_group(GroupSpec(name, request, limit, GIB, priority), 0.0)
        for client in clients:
            s.attach(client, name, 0.0)
    return s


def low_holder_and_idle_high(config=CONFIG) -> Scheduler:
    s = scheduler(("lo", 0.3, 1.0, LOW, ["l1"]), ("hi", 0.3, 1.0, HIGH, ["h1"]), config=config)
    assert [type(d) for d in s.request("l1", 0.0)] == [Grant]
    return s


def assert_preempts(s: Scheduler, client: str, now: float) -> None:
    holder = s.holder()
    decisions = s.request(client, now)
    assert len(decisions) == 2, decisions
    revoke, grant = decisions
    assert isinstance(revoke, Revoke) and (revoke.client_id, revoke.token_id) == holder
    assert isinstance(grant, Grant) and grant.client_id == client
    assert s.holder() == (client, grant.token_id)


def assert_does_not_preempt(s: Scheduler, client: str, now: float) -> None:
    holder = s.holder()
    decisions = s.request(client, now)
    assert decisions == []
    assert s.holder() == holder and s.is_waiting(client)


def test_a_higher_class_with_an_idle_client_preempts_a_low_holder():
    s = low_holder_and_idle_high()
    assert s.preemptors(0.01) == {"hi"}
    assert_preempts(s, "h1", 0.01)
    assert s.preemptors(0.02) == frozenset()  # the holder is of the highest class now


def test_nothing_is_flagged_while_nobody_holds_the_token():
    s = scheduler(("lo", 0.3, 1.0, LOW, ["l1"]), ("hi", 0.3, 1.0, HIGH, ["h1"]))
    assert s.preemptors(0.0) == frozenset()
    s.request("l1", 0.0)
    s.release("l1", s.holder()[1], 0.01, 0.01)
    assert s.holder() is None
    assert s.preemptors(0.02) == frozenset()


def test_a_higher_class_without_clients_is_not_flagged():
    s = scheduler(("lo", 0.3, 1.0, LOW, ["l1"]), ("hi", 0.3, 1.0, HIGH, []))
    s.request("l1", 0.0)
    assert s.preemptors(0.01) == frozenset()  # nobody could ring


def test_a_lease_is_preempted_through_the_doorbell_as_a_slice_is():
    # The lessee may start a slice on its own at any time: a higher class
    # rings so that it stops feeding at once, and is granted at once.
    s = low_holder_and_idle_high()
    token = s.holder()[1]
    s.release("l1", token, 0.002, 0.01, idle=True, keep_lease=True)
    assert s.holds_lease("l1", token)
    assert s.preemptors(0.02) == {"hi"}
    assert_preempts(s, "h1", 0.03)


def test_a_revoked_holder_is_not_flagged_again():
    config = SchedulerConfig(window=1.0, quantum_min=0.005, quantum_max=0.1, grace=2.0, cap_period=0.0,
                             preempt_handover=False)
    s = scheduler(("lo", 0.3, 1.0, LOW, ["l1"]), ("hi", 0.3, 1.0, HIGH, ["h1"]),
                  ("hi2", 0.3, 1.0, HIGH, ["k1"]), config=config)
    s.request("l1", 0.0)
    assert s.preemptors(0.01) == {"hi", "hi2"}
    assert [type(d) for d in s.request("h1", 0.01)] == [Revoke]
    assert s.holder()[0] == "l1"  # until it releases
    assert s.preemptors(0.02) == frozenset()
    assert s.request("k1", 0.02) == []  # revoked once per token


def test_lower_and_equal_classes_are_not_flagged():
    s = scheduler(("lo", 0.3, 1.0, LOW, ["l1"]), ("n1", 0.3, 1.0, NORMAL, ["a1"]),
                  ("n2", 0.3, 1.0, NORMAL, ["b1"]))
    s.request("a1", 0.0)
    assert s.preemptors(0.01) == frozenset()
    assert_does_not_preempt(s, "b1", 0.01)  # equal class
    assert_does_not_preempt(s, "l1", 0.01)  # lower class


def test_nothing_is_flagged_once_the_holders_deadline_has_passed():
    s = low_holder_and_idle_high()
    deadline = CONFIG.quantum_max + CONFIG.grace  # granted at 0 with quantum_max
    assert s.preemptors(deadline - 0.01) == {"hi"}
    assert s.preemptors(deadline) == frozenset()
    decisions = s.request("h1", deadline)  # the expiry takes the token back; nobody is preempted
    assert [type(d) for d in decisions] == [Expire, Grant]
    assert decisions[0].client_id == "l1" and decisions[1].client_id == "h1"
    assert s.preemptions == {"lo": 0, "hi": 0}


def hi_then_lo(s: Scheduler, lo_asks: float, hi_releases: float) -> Scheduler:
    """h1 takes the token at 0 and uses it until `hi_releases`; l1, asking
    at `lo_asks`, gets it then (and keeps it: the grace is long)."""
    s.request("h1", 0.0)
    s.request("l1", lo_asks)
    assert [d.client_id for d in s.release("h1", 1, hi_releases, hi_releases)] == ["l1"]
    return s


def tiers_setup() -> Scheduler:
    """hi (request 0.1) used 0.15 s; lo (request 0.5) holds from 0.15. hi is
    at or above its request until 1.05; lo rises past its request at 0.65."""
    return hi_then_lo(scheduler(("lo", 0.5, 1.0, LOW, ["l1"]), ("hi", 0.1, 1.0, HIGH, ["h1", "h2"])), 0.1, 0.15)


def room_setup() -> Scheduler:
    """hi is capped at 0.1 (window cap only) and used it all from 0 to 0.1,
    so it has room again from 1.1; lo (request 0.1) holds from 0.1 and is at
    its request from 0.2 (both tier 1 at 0.25)."""
    return hi_then_lo(scheduler(("lo", 0.1, 1.0, LOW, ["l1"]), ("hi", 0.1, 0.1, HIGH, ["h1"])), 0.05, 0.1)


def pause_setup() -> Scheduler:
    """Smooth caps on: hi (limit 0.2) used 0.05 s from 0, so it pauses until
    0.05 / 0.2 = 0.25; lo holds from 0.05 (both below their requests)."""
    config = SchedulerConfig(window=1.0, quantum_min=0.005, quantum_max=0.1, grace=2.0, cap_period=0.05)
    return hi_then_lo(scheduler(("lo", 0.5, 1.0, LOW, ["l1"]), ("hi", 0.1, 0.2, HIGH, ["h1"]), config=config),
                      0.01, 0.05)


@pytest.mark.parametrize("setup, now, flagged", [
    (tiers_setup, 0.2, False),   # hi at its request (tier 1), lo below it (tier 0)
    (tiers_setup, 0.7, True),    # lo past its request too: the class decides
    (room_setup, 0.25, False),   # hi has no room under its limit
    (room_setup, 1.15, True),    # its slice left the window
    (pause_setup, 0.1, False),   # hi inside its smooth-cap pause
    (pause_setup, 0.3, True),    # after it
], ids=["worse-tier", "same-tier", "no-room", "room-back", "cap-pause", "pause-over"])
def test_a_higher_class_is_flagged_exactly_when_its_request_preempts(setup, now, flagged):
    s = setup()
    if flagged:
        assert s.preemptors(now) == {"hi"}
        assert_preempts(s, "h1", now)
    else:
        assert s.preemptors(now) == frozenset()
        assert_does_not_preempt(s, "h1", now)


def test_a_group_that_waits_already_is_not_flagged():
    s = tiers_setup()
    assert_does_not_preempt(s, "h1", 0.2)  # tier 1 against lo's tier 0: it waits
    # At 0.7 lo is in tier 1 too: the time-driven rule preempts for h1 (the
    # adapter's advance at next_wakeup), not another client's request.
    assert s.preemptors(0.7) == frozenset()
    decisions = s.advance(0.7)
    assert [type(d) for d in decisions] == [Revoke, Grant] and decisions[1].client_id == "h1"


def test_a_waiter_queued_with_a_better_key_is_served_first():
    # hi (request 0.1) used 0.15 s; lo (request 0.1) holds from 0.15, past
    # its request from 0.25: both tier 1. lo2 is of lo's class.
    s = hi_then_lo(scheduler(("lo", 0.1, 1.0, LOW, ["l1"]), ("lo2", 0.1, 1.0, LOW, ["r1"]),
                             ("hi", 0.1, 1.0, HIGH, ["h1"])), 0.1, 0.15)
    assert s.preemptors(0.3) == {"hi"}
    assert_does_not_preempt(s, "r1", 0.3)  # lo2: tier 0, but of the holder's class
    assert s.preemptors(0.3) == frozenset()  # r1 (tier 0) goes before any client of hi (tier 1)
    assert_does_not_preempt(s, "h1", 0.3)
    assert s.waiting() == ["r1", "h1"]


def test_a_waiter_queued_with_a_worse_key_does_not_stop_a_preemption():
    s = scheduler(("lo", 0.3, 1.0, LOW, ["l1"]), ("lo2", 0.1, 1.0, LOW, ["r1"]),
                  ("hi", 0.3, 1.0, HIGH, ["h1"]))
    s.request("r1", 0.0)
    s.request("l1", 0.1)
    s.release("r1", 1, 0.15, 0.15)  # lo2 used 0.15 s: tier 1
    assert_does_not_preempt(s, "r1", 0.2)
    assert s.preemptors(0.2) == {"hi"}  # tier 0: before r1
    assert_preempts(s, "h1", 0.2)
    assert s.waiting() == ["r1"]


def test_a_waiter_that_the_request_puts_in_debt_does_not_hide_a_preemptor():
    """lo2's r1 reports 0.5 s work items and waits just below its request,
    ahead of hi's key. Its last charge (0.28 s) was made while lo contended,
    so its debt spacing runs until ~0.82 s. Alone it is not in debt (no
    other group contends); once hi's client asks, hi contends, r1 is in debt
    and hi is served: hi preempts lo, so it is flagged."""
    s = scheduler(("lo", 0.2, 1.0, LOW, ["l1"]), ("lo2", 0.3, 1.0, LOW, ["r1"]),
                  ("hi", 0.2, 1.0, HIGH, ["h1"]))
    for start in (0.0, 0.1):  # hi: 0.2 s, exactly its request (tier 1)
        s.request("h1", start)
        s.release("h1", s.holder()[1], 0.1, start + 0.1)
    s.request("l1", 0.2)
    s.request("r1", 0.44, work_item=0.5)
    s.release("l1", s.holder()[1], 0.25, 0.45)  # lo: 0.25 s, past its 0.2; r1 is granted
    s.request("l1", 0.46)                       # lo contends while r1 holds
    s.release("r1", s.holder()[1], 0.28, 0.73)  # lo2: 0.28 s, just below its 0.3; l1 is granted
    s.request("r1", 0.74, work_item=0.5)
    assert s.holder()[0] == "l1"
    assert_does_not_preempt(s, "r1", 0.75)  # of lo's class; lo is past its request
    assert s.preemptors(0.75) == {"hi"}
    assert_preempts(s, "h1", 0.75)


# ------------------------------------------------- holder_outranks_waiters

def test_a_holder_outranks_waiters_only_of_a_strictly_lower_class():
    # Published on the doorbell page: such a holder does not bound its
    # queue (hook/queue_bound.c), since none of them preempts it.
    s = scheduler(("hi", 0.3, 1.0, HIGH, ["h1"]), ("lo", 0.3, 1.0, LOW, ["l1"]),
                  ("peer", 0.3, 1.0, HIGH, ["p1"]))
    assert s.holder_outranks_waiters(0.0) is False  # nobody holds
    s.request("h1", 0.0)
    assert s.holder_outranks_waiters(0.001) is False  # nobody else waits
    s.request("l1", 0.001)
    assert s.holder_outranks_waiters(0.002) is True
    s.request("p1", 0.002)  # the same class: it takes its turn at the slice's end
    assert s.holder_outranks_waiters(0.003) is False


def test_a_holder_is_alone_only_as_the_one_client_attached_in_a_group_without_a_limit():
    # Published on the doorbell page: such a holder keeps more queued
    # (hook/queue_bound.c), since nobody can wait behind it.
    s = scheduler(("only", 0.3, 1.0, NORMAL, ["o1"]), ("capped", 0.3, 0.5, NORMAL, []))
    assert s.holder_alone() is False  # nobody holds
    [grant] = s.request("o1", 0.0)
    assert s.holder_alone() is True
    s.attach("o2", "only", 0.001)   # a second process of its own group: it may ask next
    assert s.holder_alone() is False
    s.detach("o2", 0.002)
    assert s.holder_alone() is True
    s.attach("c1", "capped", 0.003)
    assert s.holder_alone() is False
    s.release("o1", grant.token_id, 0.003, 0.004)
    s.detach("o1", 0.005)
    [grant] = s.request("c1", 0.006)
    assert s.holder_alone() is False  # alone, but its limit ends its slices


def test_a_low_holder_does_not_outrank_a_waiting_higher_class():
    s = low_holder_and_idle_high()
    s.request("h1", 0.01)
    assert s.holder_outranks_waiters(0.01) is False


def test_next_on_release_names_the_waiter_the_release_grants():
    # Published on the doorbell page: at the holder's handback that waiter
    # (not every waiter of its group) starts before its grant
    # (hook/gate_handback.c).
    s = scheduler(("hi", 0.3, 1.0, HIGH, ["h1"]), ("mid", 0.3, 1.0, NORMAL, ["m1"]),
                  ("lo", 0.3, 1.0, LOW, ["l1", "l2"]))
    assert s.next_on_release(0.0) is None  # nobody holds
    [grant] = s.request("h1", 0.0)
    assert s.next_on_release(0.001) is None  # nobody waits
    s.request("l2", 0.001)
    s.request("l1", 0.0015)
    assert s.next_on_release(0.002) == "l2"  # first in line in its group
    s.request("m1", 0.002)
    assert s.next_on_release(0.003) == "m1"  # a higher class goes first
    decisions = s.release("h1", grant.token_id, 0.003, 0.003, idle=True)
    assert [d.client_id for d in decisions if isinstance(d, Grant)] == ["m1"]
    assert s.next_on_release(0.004) == "l2"
    [grant] = [d for d in s.release("m1", decisions[-1].token_id, 0.001, 0.005, idle=True) if isinstance(d, Grant)]
    assert grant.client_id == "l2"
    assert s.next_on_release(0.006) == "l1"  # the next of its group, the only one waiting


def test_next_on_release_is_none_when_the_release_grants_nobody():
    # A capped-out waiter is not served at the release: no group starts
    # at the handback.
    s = scheduler(("a", 0.3, 1.0, NORMAL, ["a1"]), ("capped", 0.2, 0.2, NORMAL, ["c1"]))
    [grant] = s.request("c1", 0.0)
    s.release("c1", grant.token_id, 2.5, 2.5)  # 2.5 s of a 10 s window: over its 20% cap
    [grant] = s.request("a1", 2.5)
    s.request("c1", 2.5)
    assert s.next_on_release(2.6) is None
    assert not [d for d in s.release("a1", grant.token_id, 0.1, 2.6) if isinstance(d, Grant)]
