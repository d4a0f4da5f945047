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
    with pytest.raises(InvalidArgument, match=r"release of 6291457 bytes by client 'a1' is invalid: it holds only 6291456 bytes"):
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
