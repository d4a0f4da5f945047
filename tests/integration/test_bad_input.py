"""Every kind of bad client or operator input gets a clear status, is counted
in gslice_bad_requests_total{method,code}, and leaves the state unchanged."""
from __future__ import annotations

import grpc
import pytest

from gslice import paths
from gslice.v1 import admin_pb2, admin_pb2_grpc, client_pb2, client_pb2_grpc

GiB = 1024**3


@pytest.fixture
def setup(tokend_factory):
    # A long grace: the holder keeps its token for the whole test (no expiry).
    tokend = tokend_factory(extra_args=["--grace-ms", "120000"])
    admin = tokend.admin()
    created = admin.create_group("base", request=0.5, limit=0.6, memory="1GiB")
    holder = tokend.shim_client("base", created.secret)
    holder.reserve(1000)
    token = holder.acquire()
    client_channel = grpc.insecure_channel(paths.grpc_target(tokend.client_socket))
    admin_channel = grpc.insecure_channel(paths.grpc_target(tokend.admin_socket))
    yield {
        "tokend": tokend, "secret": created.secret, "holder": holder, "token": token,
        "client": client_pb2_grpc.ClientServiceStub(client_channel),
        "admin": admin_pb2_grpc.AdminServiceStub(admin_channel),
        "client_channel": client_channel, "admin_channel": admin_channel,
    }
    client_channel.close()
    admin_channel.close()


def snapshot(env) -> tuple:
    """Everything a bad request must not change (not the clock-driven shares)."""
    status = env["admin"].GetStatus(admin_pb2.GetStatusRequest(), timeout=5)
    groups = [(g.group.SerializeToString(), g.memory_used, g.clients, g.waiting, g.over_quota, g.tokens_granted)
              for g in status.groups]
    clients = [(c.client_id, c.holding, c.waiting, c.memory_used) for c in status.clients]
    state_file = (env["tokend"].state_dir / "groups.json").read_bytes()
    return (status.holder_client_id, status.token_id, tuple(status.waiting_client_ids), groups, clients, state_file)


def raw_call(channel, method: str, payload: bytes):
    call = channel.unary_unary(method, request_serializer=None, response_deserializer=None)
    return call(payload, timeout=5)


def _cases(env):
    client, admin, holder, token = env["client"], env["admin"], env["holder"], env["token"]
    cid = holder.client_id
    group = lambda **kw: admin_pb2.Group(**{"name": "x", "request": 0.1, "limit": 0.1, "memory_quota": GiB, **kw})
    return [
        ("Attach", "UNAUTHENTICATED", "unknown group or wrong secret",
         lambda: client.Attach(client_pb2.AttachRequest(group="ghost", secret=env["secret"]), timeout=5)),
        ("Attach", "UNAUTHENTICATED", "unknown group or wrong secret",
         lambda: client.Attach(client_pb2.AttachRequest(group="base", secret="guess"), timeout=5)),
        ("Attach", "FAILED_PRECONDITION", "protocol_version 9",
         lambda: client.Attach(client_pb2.AttachRequest(group="base", secret=env["secret"], protocol_version=9),
                               timeout=5)),
        ("AcquireToken", "NOT_FOUND", "unknown client_id 'nobody'",
         lambda: client.AcquireToken(client_pb2.AcquireTokenRequest(client_id="nobody"), timeout=5)),
        ("ReserveMemory", "NOT_FOUND", "unknown client_id",
         lambda: client.ReserveMemory(client_pb2.ReserveMemoryRequest(client_id="nobody", bytes=1), timeout=5)),
        ("Detach", "NOT_FOUND", "unknown client_id",
         lambda: client.Detach(client_pb2.DetachRequest(client_id="nobody"), timeout=5)),
        ("AcquireToken", "FAILED_PRECONDITION", "already holds token",
         lambda: client.AcquireToken(client_pb2.AcquireTokenRequest(client_id=cid, timeout_ms=100), timeout=5)),
        ("ReleaseToken", "FAILED_PRECONDITION", f"does not hold token {token + 7}",
         lambda: client.ReleaseToken(client_pb2.ReleaseTokenRequest(client_id=cid, token_id=token + 7), timeout=5)),
        ("ReserveMemory", "INVALID_ARGUMENT", "0 bytes",
         lambda: client.ReserveMemory(client_pb2.ReserveMemoryRequest(client_id=cid, bytes=0), timeout=5)),
        ("ReleaseMemory", "INVALID_ARGUMENT", "5000",
         lambda: client.ReleaseMemory(client_pb2.ReleaseMemoryRequest(client_id=cid, bytes=5000), timeout=5)),
        ("Control", "FAILED_PRECONDITION", "already has a Control stream",
         lambda: list(client.Control(client_pb2.ControlRequest(client_id=cid), timeout=5))),
        ("CreateGroup", "INVALID_ARGUMENT", "limit 0.05",
         lambda: admin.CreateGroup(admin_pb2.CreateGroupRequest(group=group(limit=0.05)), timeout=5)),
        ("CreateGroup", "INVALID_ARGUMENT", "memory quota 0",
         lambda: admin.CreateGroup(admin_pb2.CreateGroupRequest(group=group(memory_quota=0)), timeout=5)),
        ("CreateGroup", "INVALID_ARGUMENT", "request -0.2",
         lambda: admin.CreateGroup(admin_pb2.CreateGroupRequest(group=group(request=-0.2)), timeout=5)),
        ("CreateGroup", "FAILED_PRECONDITION", "sum to 1.50",
         lambda: admin.CreateGroup(admin_pb2.CreateGroupRequest(group=group(request=0.6, limit=0.6)), timeout=5)),
        ("CreateGroup", "ALREADY_EXISTS", "'base' already exists",
         lambda: admin.CreateGroup(admin_pb2.CreateGroupRequest(group=group(name="base")), timeout=5)),
        ("CreateGroup", "INVALID_ARGUMENT", "group name",
         lambda: admin.CreateGroup(admin_pb2.CreateGroupRequest(group=group(name="../etc")), timeout=5)),
        ("UpdateGroup", "INVALID_ARGUMENT", "priority 7",
         lambda: admin.UpdateGroup(admin_pb2.UpdateGroupRequest(name="base", priority=7), timeout=5)),
        ("UpdateGroup", "FAILED_PRECONDITION", "sum to 1.10",  # with group 'other' at 0.4
         lambda: admin.UpdateGroup(admin_pb2.UpdateGroupRequest(name="base", request=0.7, limit=0.7), timeout=5)),
        ("UpdateGroup", "INVALID_ARGUMENT", "sets nothing: expected at least one of request",
         lambda: admin.UpdateGroup(admin_pb2.UpdateGroupRequest(name="base"), timeout=5)),
        ("UpdateGroup", "NOT_FOUND", "'ghost' does not exist",
         lambda: admin.UpdateGroup(admin_pb2.UpdateGroupRequest(name="ghost", request=0.1), timeout=5)),
        ("DeleteGroup", "FAILED_PRECONDITION", "1 attached client",
         lambda: admin.DeleteGroup(admin_pb2.DeleteGroupRequest(name="base"), timeout=5)),
        ("GetGroupSecret", "NOT_FOUND", "'ghost'",
         lambda: admin.GetGroupSecret(admin_pb2.GetGroupSecretRequest(name="ghost"), timeout=5)),
        ("ReserveMemory", "INVALID_ARGUMENT", "not a valid gslice.v1.ReserveMemoryRequest",
         lambda: raw_call(env["client_channel"], "/gslice.v1.ClientService/ReserveMemory", b"\x0a\xff\xff\xff")),
        ("Attach", "RESOURCE_EXHAUSTED", "the limit is 65536 bytes",
         lambda: client.Attach(client_pb2.AttachRequest(group="base", secret="s" * 100_000), timeout=5)),
    ]


def test_every_bad_input_gets_its_status_is_counted_and_changes_nothing(setup):
    env = setup
    tokend = env["tokend"]
    # A second group so that raising base's request can overflow the sum.
    env["admin"].CreateGroup(admin_pb2.CreateGroupRequest(
        group=admin_pb2.Group(name="other", request=0.4, limit=0.4, memory_quota=GiB)), timeout=5)
    before = snapshot(env)
    for method, code, message, call in _cases(env):
        counted_before = tokend.metric_value("gslice_bad_requests_total", method=method, code=code)
        with pytest.raises(grpc.RpcError) as info:
            call()
        assert info.value.code().name == code, (method, message, info.value.details())
        assert message in info.value.details(), (method, info.value.details())
        # The client_id is a credential: logged at debug, a message must not carry it.
        assert env["holder"].client_id not in info.value.details(), (method, info.value.details())
        assert snapshot(env) == before, f"{method} ({message}) changed the state"
        assert tokend.metric_value("gslice_bad_requests_total", method=method, code=code) == counted_before + 1, \
            (method, code)
    # The holder is unharmed and the daemon still serves.
    holder, token = env["holder"], env["token"]
    holder.release(token, used_us=1000)
    with pytest.raises(grpc.RpcError) as info:
        holder.release(token, used_us=1000)  # double release
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "already released" in info.value.details()
    assert holder.acquire() > token


def test_wrong_secret_message_does_not_reveal_the_secret(setup):
    env = setup
    with pytest.raises(grpc.RpcError) as info:
        env["client"].Attach(client_pb2.AttachRequest(group="base", secret="guess"), timeout=5)
    assert env["secret"] not in info.value.details()


def test_acquire_timeout_is_deadline_exceeded_and_leaves_no_waiter(setup):
    env = setup
    tokend = env["tokend"]
    other = tokend.shim_client("base", env["secret"])
    with pytest.raises(grpc.RpcError) as info:
        other.acquire(timeout_ms=200)
    assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    status = env["admin"].GetStatus(admin_pb2.GetStatusRequest(), timeout=5)
    assert list(status.waiting_client_ids) == []
    # Once the holder lets go, the timed-out client can still acquire.
    env["holder"].release(env["token"], used_us=100)
    assert other.acquire(timeout_ms=5000) > 0
