"""RenewToken, idle leases and late releases through the daemon's client
protocol (what the shim speaks), with stand-in shims."""
from __future__ import annotations

import threading

import pytest

from gslice.v1 import client_pb2


def renew(client, token_id: int, used_us: int = 1000, work_item_us: int = 0):
    return client.stub.RenewToken(client_pb2.RenewTokenRequest(
        client_id=client.client_id, token_id=token_id, used_us=used_us, work_item_us=work_item_us), timeout=10)


def release(client, token_id: int, used_us: int = 0, idle: bool = False, keep_lease: bool = False):
    return client.stub.ReleaseToken(client_pb2.ReleaseTokenRequest(
        client_id=client.client_id, token_id=token_id, used_us=used_us, idle=idle, keep_lease=keep_lease),
        timeout=10)


@pytest.fixture
def groups(tokend):
    admin = tokend.admin()
    a = admin.create_group("a", request=0.3, limit=1.0, memory="1GiB")
    b = admin.create_group("b", request=0.3, limit=1.0, memory="1GiB")
    capped = admin.create_group("capped", request=0.2, limit=0.2, memory="1GiB")
    return {"a": tokend.shim_client("a", a.secret), "b": tokend.shim_client("b", b.secret),
            "capped": tokend.shim_client("capped", capped.secret), "admin": admin}


def test_lone_holder_is_renewed_without_releasing(groups):
    a = groups["a"]
    token = a.acquire()
    reply = renew(a, token)
    assert reply.renewed and reply.token_id > token and reply.quantum_us > 0
    status = groups["admin"].status()
    assert status.holder_client_id == a.public_id and status.token_id == reply.token_id
    with pytest.raises(Exception, match="does not hold token"):
        release(a, token)  # the old slice is over
    release(a, reply.token_id)


def test_renew_is_refused_while_someone_else_waits(groups):
    a, b = groups["a"], groups["b"]
    token = a.acquire()
    got = {}
    waiter = threading.Thread(target=lambda: got.setdefault("b", b.acquire()))
    waiter.start()
    for _ in range(100):  # b's AcquireToken reaches the daemon
        if groups["admin"].status().waiting_client_ids:
            break
        threading.Event().wait(0.02)
    assert not renew(a, token).renewed
    assert groups["admin"].status().holder_client_id == a.public_id  # a still holds it
    release(a, token, used_us=2000)
    waiter.join(10)
    assert got["b"] > token


def test_capped_group_is_never_renewed(groups):
    capped = groups["capped"]
    token = capped.acquire()
    assert not renew(capped, token).renewed
    release(capped, token)


def test_idle_lease_is_kept_while_nobody_waits_and_taken_back_when_someone_asks(groups):
    a, b = groups["a"], groups["b"]
    token = a.acquire()
    assert release(a, token, used_us=500, idle=True, keep_lease=True).lease_kept
    assert groups["admin"].status().holder_client_id == a.public_id  # held as a lease
    # The lessee starts a new slice on its own and renews it (no acquire).
    reply = renew(a, token, used_us=800)
    assert reply.renewed
    assert release(a, reply.token_id, used_us=300, idle=True, keep_lease=True).lease_kept
    got = {}
    waiter = threading.Thread(target=lambda: got.setdefault("b", b.acquire()))
    waiter.start()
    event = a.next_event(timeout=10)  # the lease is taken back
    assert event is not None and event.revoke.token_id == reply.token_id
    assert not release(a, reply.token_id).lease_kept  # given back unused
    waiter.join(10)
    assert got["b"] > reply.token_id


def test_acquire_with_a_work_item_gets_a_quantum_covering_it(groups):
    a = groups["a"]
    reply = a.stub.AcquireToken(client_pb2.AcquireTokenRequest(client_id=a.client_id, timeout_ms=5000,
                                                               work_item_us=1_000_000), timeout=15)
    # At least the item plus quantum_min (tokend's default --quantum-min-ms 5),
    # so the item runs whole under one token (docs/architecture.md).
    assert reply.quantum_us >= 1_000_000 + 5_000, reply.quantum_us
    release(a, reply.token_id, used_us=1_000_000)


def lease_if_free(client):
    return client.stub.AcquireToken(client_pb2.AcquireTokenRequest(client_id=client.client_id, lease_if_free=True),
                                    timeout=10)


def test_a_starting_client_gets_a_free_token_as_a_lease_and_nothing_when_it_is_taken(groups):
    a, b, capped = groups["a"], groups["b"], groups["capped"]
    assert lease_if_free(capped).token_id == 0          # capped groups never lease
    reply = lease_if_free(a)
    assert reply.token_id > 0 and reply.quantum_us > 0
    status = groups["admin"].status()
    assert status.holder_client_id == a.public_id and status.token_id == reply.token_id
    assert lease_if_free(b).token_id == 0               # held (as a lease): b gets nothing, and does not wait
    assert not groups["admin"].status().waiting_client_ids
    # The lessee's first slice runs on it and is reported like any lease's.
    assert release(a, reply.token_id, used_us=4000, idle=True, keep_lease=True).lease_kept
    # Someone asking takes it back.
    got = {}
    waiter = threading.Thread(target=lambda: got.setdefault("b", b.acquire()))
    waiter.start()
    event = a.next_event(timeout=10)
    assert event is not None and event.revoke.token_id == reply.token_id
    assert event.revoke.lease_reclaim   # b is of a's class: not a preemption
    assert not release(a, reply.token_id).lease_kept
    waiter.join(10)
    assert got["b"] > reply.token_id


def test_lease_at_start_off_gives_nothing(tokend_factory):
    daemon = tokend_factory(extra_args=["--lease-at-start", "off"])
    admin = daemon.admin()
    spec = admin.create_group("a", request=0.3, limit=1.0, memory="1GiB")
    a = daemon.shim_client("a", spec.secret)
    assert lease_if_free(a).token_id == 0
    assert not admin.status().holder_client_id
