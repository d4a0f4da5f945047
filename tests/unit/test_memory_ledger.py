"""The memory ledger: all-or-nothing reservations against per-group quotas."""
from __future__ import annotations

import pytest
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from gslice.tokend.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from gslice.tokend.memory_ledger import MemoryLedger, Reservation

MIB = 1 << 20


def snapshot(ledger: MemoryLedger):
    return {
        "groups": {g: (ledger.group_used(g), ledger.group_quota(g), ledger.refusals(g)) for g in ledger.groups()},
        "clients": {c: (ledger.client_group(c), ledger.client_used(c)) for c in ledger.clients()},
    }


@pytest.fixture
def ledger():
    ledger = MemoryLedger()
    ledger.set_group("a", 100 * MIB)
    ledger.set_group("b", 50 * MIB)
    ledger.attach("a1", "a")
    ledger.attach("a2", "a")
    ledger.attach("b1", "b")
    return ledger


def test_reservation_is_granted_up_to_the_quota_exactly(ledger):
    assert ledger.reserve("a1", 60 * MIB) == Reservation(True, 60 * MIB, 100 * MIB)
    assert ledger.reserve("a2", 40 * MIB) == Reservation(True, 100 * MIB, 100 * MIB)
    assert ledger.reserve("a2", 1) == Reservation(False, 100 * MIB, 100 * MIB)
    assert ledger.client_used("a1") == 60 * MIB and ledger.client_used("a2") == 40 * MIB
    assert ledger.refusals("a") == 1


def test_refused_reservation_changes_nothing_but_the_refusal_count(ledger):
    ledger.reserve("a1", 70 * MIB)
    before = snapshot(ledger)
    assert ledger.reserve("a2", 31 * MIB).granted is False
    after = snapshot(ledger)
    assert after["clients"] == before["clients"]
    assert after["groups"]["a"][:2] == before["groups"]["a"][:2]


def test_groups_are_independent(ledger):
    ledger.reserve("a1", 100 * MIB)
    assert ledger.reserve("b1", 50 * MIB).granted
    assert ledger.group_used("a") == 100 * MIB and ledger.group_used("b") == 50 * MIB


def test_release_returns_bytes_and_refuses_more_than_held(ledger):
    ledger.reserve("a1", 10 * MIB)
    assert ledger.release("a1", 4 * MIB) == Reservation(True, 6 * MIB, 100 * MIB)
    before = snapshot(ledger)
    with pytest.raises(InvalidArgument, match=r"release of 6291457 bytes is invalid: this client holds only 6291456 bytes"):
        ledger.release("a1", 6 * MIB + 1)
    with pytest.raises(InvalidArgument, match="release size 0"):
        ledger.release("a1", 0)
    assert snapshot(ledger) == before


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "1"])
def test_reservation_size_must_be_positive_whole_bytes(ledger, bad):
    before = snapshot(ledger)
    with pytest.raises(InvalidArgument, match="reservation size"):
        ledger.reserve("a1", bad)
    assert snapshot(ledger) == before


def test_detach_frees_everything_the_client_held(ledger):
    ledger.reserve("a1", 30 * MIB)
    ledger.reserve("a2", 20 * MIB)
    assert ledger.detach("a1") == 30 * MIB
    assert ledger.group_used("a") == 20 * MIB
    with pytest.raises(NotFound, match="client 'a1' is not attached"):
        ledger.client_used("a1")
    assert ledger.reserve("a2", 80 * MIB).granted


def test_redeclared_bytes_are_recorded_even_over_quota(ledger):
    ledger.reserve("b1", 40 * MIB)
    ledger.attach("b2", "b", declared=30 * MIB)  # already allocated before a daemon restart
    assert ledger.group_used("b") == 70 * MIB
    assert ledger.over_quota("b")
    assert ledger.reserve("b1", 1).granted is False
    ledger.release("b2", 30 * MIB)
    assert not ledger.over_quota("b")
    assert ledger.reserve("b1", 10 * MIB).granted


def test_lowered_quota_refuses_until_use_falls_under_it(ledger):
    ledger.reserve("a1", 80 * MIB)
    ledger.set_group("a", 50 * MIB)
    assert ledger.over_quota("a") and ledger.group_quota("a") == 50 * MIB
    assert ledger.reserve("a2", 1).granted is False
    ledger.release("a1", 40 * MIB)
    assert not ledger.over_quota("a")
    assert ledger.reserve("a2", 10 * MIB).granted
    assert ledger.reserve("a2", 1).granted is False


def test_group_and_client_errors(ledger):
    before = snapshot(ledger)
    with pytest.raises(InvalidArgument, match="memory quota 0 for group 'a'"):
        ledger.set_group("a", 0)
    with pytest.raises(InvalidArgument, match="memory quota -5"):
        ledger.set_group("new", -5)
    with pytest.raises(NotFound, match="group 'zz'"):
        ledger.attach("z1", "zz")
    with pytest.raises(AlreadyExists, match="client 'a1' is already attached"):
        ledger.attach("a1", "b")
    with pytest.raises(InvalidArgument, match="declared memory -1"):
        ledger.attach("a9", "a", declared=-1)
    with pytest.raises(FailedPrecondition, match="group 'a' still has 2 attached client"):
        ledger.remove_group("a")
    with pytest.raises(NotFound):
        ledger.remove_group("zz")
    with pytest.raises(NotFound):
        ledger.reserve("ghost", 1)
    with pytest.raises(NotFound):
        ledger.detach("ghost")
    assert snapshot(ledger) == before


def test_group_can_be_removed_once_its_clients_left(ledger):
    ledger.detach("b1")
    ledger.remove_group("b")
    assert ledger.groups() == ["a"]
    with pytest.raises(NotFound):
        ledger.group_used("b")


# ------------------------------------------------------------- properties

CLIENTS = [f"c{i}" for i in range(5)]
GROUPS = ["g0", "g1"]


class LedgerMachine(RuleBasedStateMachine):
    """Compares the ledger with a plain model after random calls."""

    def __init__(self):
        super().__init__()
        self.ledger = MemoryLedger()
        self.quota = {}
        self.held = {}  # client -> (group, bytes)
        self.declared_over = {g: False for g in GROUPS}  # use may exceed quota legitimately

    def used(self, group):
        return sum(b for g, b in self.held.values() if g == group)

    @rule(group=st.sampled_from(GROUPS), quota=st.integers(1, 1000))
    def set_group(self, group, quota):
        self.ledger.set_group(group, quota)
        self.quota[group] = quota

    @precondition(lambda self: self.quota)
    @rule(client=st.sampled_from(CLIENTS), group=st.sampled_from(GROUPS), declared=st.integers(0, 600))
    def attach(self, client, group, declared):
        if group not in self.quota:
            with pytest.raises(NotFound):
                self.ledger.attach(client, group, declared)
        elif client in self.held:
            with pytest.raises(AlreadyExists):
                self.ledger.attach(client, group, declared)
        else:
            self.ledger.attach(client, group, declared)
            self.held[client] = (group, declared)

    @rule(client=st.sampled_from(CLIENTS), nbytes=st.integers(-2, 500))
    def reserve(self, client, nbytes):
        if client not in self.held:
            with pytest.raises(NotFound):
                self.ledger.reserve(client, nbytes)
            return
        if nbytes <= 0:
            with pytest.raises(InvalidArgument):
                self.ledger.reserve(client, nbytes)
            return
        group, held = self.held[client]
        result = self.ledger.reserve(client, nbytes)
        expected = self.used(group) + nbytes <= self.quota[group]
        assert result.granted == expected
        if expected:
            self.held[client] = (group, held + nbytes)
            assert result.used <= result.quota  # a grant never leaves a group over its quota
        assert result.used == self.used(group)

    @rule(client=st.sampled_from(CLIENTS), nbytes=st.integers(-1, 500))
    def release(self, client, nbytes):
        if client not in self.held:
            with pytest.raises(NotFound):
                self.ledger.release(client, nbytes)
            return
        group, held = self.held[client]
        if nbytes <= 0 or nbytes > held:
            with pytest.raises(InvalidArgument):
                self.ledger.release(client, nbytes)
            return
        self.ledger.release(client, nbytes)
        self.held[client] = (group, held - nbytes)

    @rule(client=st.sampled_from(CLIENTS))
    def detach(self, client):
        if client not in self.held:
            with pytest.raises(NotFound):
                self.ledger.detach(client)
            return
        assert self.ledger.detach(client) == self.held.pop(client)[1]

    @rule(group=st.sampled_from(GROUPS))
    def remove_group(self, group):
        if group not in self.quota:
            with pytest.raises(NotFound):
                self.ledger.remove_group(group)
        elif any(g == group for g, _ in self.held.values()):
            with pytest.raises(FailedPrecondition):
                self.ledger.remove_group(group)
        else:
            self.ledger.remove_group(group)
            del self.quota[group]

    @invariant()
    def matches_model(self):
        for group, quota in self.quota.items():
            assert self.ledger.group_quota(group) == quota
            assert self.ledger.group_used(group) == self.used(group)
            assert self.ledger.over_quota(group) == (self.used(group) > quota)
        for client, (group, held) in self.held.items():
            assert self.ledger.client_used(client) == held
            assert self.ledger.client_group(client) == group
        assert self.ledger.clients() == sorted(self.held)


TestLedgerMachine = LedgerMachine.TestCase
TestLedgerMachine.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)


# ---- memory of departed processes: back when the driver has freed it -------

@pytest.fixture
def departed():
    """Group a (100 MiB): client a1 (pid 11) held 60 MiB and departed at t=10; a2 (pid 12) stays."""
    ledger = MemoryLedger(reclaim_timeout=2.0)
    ledger.set_group("a", 100 * MIB)
    ledger.attach("a1", "a", pid=11)
    ledger.attach("a2", "a", pid=12)
    ledger.reserve("a1", 60 * MIB)
    ledger.observe_gpu_processes([11, 12], taken_at=5.0)  # NVML lists both while attached
    pending = ledger.detach_held("a1", "c1", now=10.0, wall=1000.0)
    assert pending is not None and (pending.pid, pending.nbytes, pending.seen_listed) == (11, 60 * MIB, True)
    return ledger


def test_departed_memory_stays_charged_while_nvml_lists_the_process(departed):
    assert departed.group_used("a") == 60 * MIB and departed.group_pending("a") == 60 * MIB
    assert departed.observe_gpu_processes([11, 12], taken_at=10.1) == []
    # Listed, so no timeout: the driver still holds it, however long that takes.
    assert departed.observe_gpu_processes([11], taken_at=11.9) == []
    assert departed.expire(13.8) == []
    assert departed.group_used("a") == 60 * MIB


def test_departed_memory_comes_back_at_the_first_list_without_the_process(departed):
    departed.observe_gpu_processes([11, 12], taken_at=10.05)
    [reclaimed] = departed.observe_gpu_processes([12], taken_at=10.13)
    assert (reclaimed.how, reclaimed.at, reclaimed.pending.nbytes) == ("driver freed", 10.13, 60 * MIB)
    assert departed.group_used("a") == 0 and departed.group_pending("a") == 0
    assert departed.pending_reclaims() == []


def test_a_list_taken_before_the_departure_proves_nothing(departed):
    assert departed.observe_gpu_processes([12], taken_at=9.99) == []  # began before a1 left
    assert departed.group_pending("a") == 60 * MIB


def test_a_pid_nvml_never_listed_comes_back_by_the_timeout_and_not_before():
    ledger = MemoryLedger(reclaim_timeout=2.0)
    ledger.set_group("a", 100 * MIB)
    ledger.attach("a1", "a", pid=77)  # e.g. its pid in another pid namespace
    ledger.reserve("a1", 10 * MIB)
    ledger.detach_held("a1", "c1", now=10.0, wall=0.0)
    assert ledger.observe_gpu_processes([5, 6], taken_at=10.01) == []  # absent, but never seen: proves nothing
    assert ledger.next_reclaim_deadline() == 12.0
    assert ledger.expire(11.999) == []
    [reclaimed] = ledger.observe_gpu_processes([5, 6], taken_at=12.0)
    assert reclaimed.how == "timeout" and "NVML never listed pid 77" in reclaimed.reason
    assert ledger.group_used("a") == 0


def test_without_any_nvml_list_the_timeout_runs_from_the_departure_or_the_last_listing(departed):
    departed.observe_gpu_processes([11], taken_at=10.5)      # listed after it left; then NVML fails
    assert departed.observe_gpu_processes(None, taken_at=12.4) == []  # 2 s from the departure: not yet
    [reclaimed] = departed.observe_gpu_processes(None, taken_at=12.5)
    assert reclaimed.how == "timeout" and "listed pid 11 last" in reclaimed.reason
    ledger = MemoryLedger(reclaim_timeout=1.0)
    ledger.set_group("a", MIB)
    ledger.attach("x", "a", pid=3)
    ledger.reserve("x", 1)
    ledger.detach_held("x", "c9", now=0.0, wall=0.0)
    [reclaimed] = ledger.expire(1.0)
    assert reclaimed.reason.endswith("NVML gave no process list")


def test_a_reservation_that_fits_after_pending_reclaims_is_told_to_wait_not_refused(departed):
    assert departed.reserve("a2", 50 * MIB) == Reservation(False, 60 * MIB, 100 * MIB)  # plain: refused
    assert departed.refusals("a") == 1
    assert departed.reserve("a2", 50 * MIB, can_wait=True) == Reservation(False, 60 * MIB, 100 * MIB, wait=True)
    assert departed.refusals("a") == 1  # a wait is not a refusal
    # Over the quota even once everything is back: refused, no wait.
    assert departed.reserve("a2", 101 * MIB, can_wait=True).wait is False
    departed.observe_gpu_processes([12], taken_at=10.2)
    assert departed.reserve("a2", 50 * MIB, can_wait=True) == Reservation(True, 50 * MIB, 100 * MIB)


def test_the_same_process_attaching_again_with_its_memory_supersedes_its_pending_reclaim(departed):
    [superseded] = departed.attach("a1-again", "a", declared=60 * MIB, pid=11, now=10.2)
    assert superseded.how == "superseded"
    assert departed.group_used("a") == 60 * MIB and departed.group_pending("a") == 0
    # A fresh process that happens to get pid 11 (declares nothing) does not.
    departed.detach_held("a1-again", "c3", now=11.0, wall=0.0)
    assert departed.attach("new", "a", declared=0, pid=11, now=11.1) == []
    assert departed.group_pending("a") == 60 * MIB


def test_a_group_with_pending_reclaims_cannot_be_removed(departed):
    departed.detach("a2")
    with pytest.raises(FailedPrecondition, match=r"group 'a' still has 62914560 bytes of departed processes "
                                                 r"\(pids 11\) that the driver has not freed yet"):
        departed.remove_group("a")


def test_pending_reclaims_restored_after_a_restart_are_charged_again(departed):
    [pending] = departed.pending_reclaims()
    fresh = MemoryLedger(reclaim_timeout=2.0)
    fresh.set_group("a", 100 * MIB)
    fresh.restore_pending(pending)
    assert fresh.group_used("a") == fresh.group_pending("a") == 60 * MIB
    [reclaimed] = fresh.observe_gpu_processes([], taken_at=10.3)  # it was seen listed: absent means freed
    assert reclaimed.how == "driver freed"


def test_zero_timeout_gives_the_memory_back_at_once():
    ledger = MemoryLedger(reclaim_timeout=0.0)
    ledger.set_group("a", MIB)
    ledger.attach("x", "a", pid=3)
    ledger.reserve("x", 10)
    ledger.detach_held("x", "c1", now=5.0, wall=0.0)
    assert [r.how for r in ledger.expire(5.0)] == ["timeout"]
