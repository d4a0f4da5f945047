"""Fuzzing tokend on both sockets (issue 9, "Done means"): random bytes,
random well-formed messages with extreme values, and random call sequences.
Every answer must be OK or a proper gRPC status naming the problem (never
INTERNAL / UNKNOWN, never a dead daemon), and after every step the state
invariants hold: per group, the clients' reservations sum to the ledger's
total; at most one holder of the token."""
from __future__ import annotations

import grpc
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule

from gslice import paths
from gslice.testing import TokendProcess
from gslice.v1 import admin_pb2, client_pb2

GiB = 1024**3
# What a well-behaved daemon may answer to input it does not like.
EXPECTED_ERRORS = {
    grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.ALREADY_EXISTS, grpc.StatusCode.ABORTED, grpc.StatusCode.OUT_OF_RANGE,
}
CLIENT_METHODS = [m.name for m in client_pb2.DESCRIPTOR.services_by_name["ClientService"].methods]
ADMIN_METHODS = [m.name for m in admin_pb2.DESCRIPTOR.services_by_name["AdminService"].methods]
STREAMING = {"Control", "Watch"}
BIDIRECTIONAL = {"Calls"}
FUZZ_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))

u64 = st.one_of(st.sampled_from([0, 1, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**64 - 1]),
                st.integers(0, 2**64 - 1))
u32 = st.one_of(st.sampled_from([0, 1, 2**31, 2**32 - 1]), st.integers(0, 2**32 - 1))
text = st.one_of(st.text(max_size=40), st.just("\x1b[2J"), st.text(min_size=200, max_size=300))


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    tokend = TokendProcess(tmp_path_factory.mktemp("fuzz"), gpu="fake", log_level="warning", extra_args=[
        "--attach-rate", "100000", "--attach-burst", "100000", "--max-clients-per-group", "64",
        "--control-open-timeout", "2", "--grace-ms", "100"])
    tokend.start()
    admin = tokend.admin()
    secrets = {name: admin.create_group(name, request=0.3, limit=1.0, memory="1GiB", priority=prio).secret
               for name, prio in (("a", "normal"), ("b", "high"))}
    yield tokend, secrets
    tokend.close()


def _check_answer(call) -> None:
    try:
        result = call()
        if hasattr(result, "__iter__") and not hasattr(result, "SerializeToString"):
            for _ in result:
                pass
    except grpc.RpcError as exc:
        assert exc.code() in EXPECTED_ERRORS, (exc.code(), exc.details())
        if exc.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
            assert exc.details(), exc.code()  # every refusal says why


def _raw(channel, service: str, method: str, payload: bytes):
    path = f"/gslice.v1.{service}/{method}"
    if method in BIDIRECTIONAL:  # the payload as one message, then the end of the client's side
        call = channel.stream_stream(path, request_serializer=None, response_deserializer=None)
        return lambda: call(iter([payload]), timeout=3)
    if method in STREAMING:
        call = channel.unary_stream(path, request_serializer=None, response_deserializer=None)
        return lambda: call(payload, timeout=0.5)
    call = channel.unary_unary(path, request_serializer=None, response_deserializer=None)
    return lambda: call(payload, timeout=3)


def _alive(tokend) -> None:
    assert tokend.process.poll() is None, tokend.log_tail()
    tokend.admin().status()


def _check_invariants(tokend) -> admin_pb2.GpuStatus:
    with grpc.insecure_channel(paths.grpc_target(tokend.admin_socket)) as channel:
        status = channel.unary_unary("/gslice.v1.AdminService/GetStatus", request_serializer=None,
                                     response_deserializer=admin_pb2.GpuStatus.FromString)(b"", timeout=5)
    for group in status.groups:
        members = [c.memory_used for c in status.clients if c.group == group.group.name]
        # Departed clients' memory stays the group's until the driver frees it (pending reclaims).
        assert sum(members) + group.memory_awaiting_driver == group.memory_used, (
            group.group.name, members, group.memory_awaiting_driver, group.memory_used)
        assert group.clients == len(members)
    holders = [c for c in status.clients if c.holding]
    assert len(holders) <= 1, holders
    if holders:
        assert status.holder_client_id == holders[0].client_id
    return status


@FUZZ_SETTINGS
@given(socket=st.sampled_from(["client", "admin"]), data=st.data(), payload=st.binary(max_size=300))
def test_random_bytes_on_both_sockets(daemon, socket, data, payload):
    tokend, _ = daemon
    service, methods = ("ClientService", CLIENT_METHODS) if socket == "client" else ("AdminService", ADMIN_METHODS)
    method = data.draw(st.sampled_from(methods))
    if socket == "admin" and method in ("CreateGroup", "UpdateGroup", "DeleteGroup"):
        # Random bytes that happen to parse could change the group table: allowed, but keep "a" and "b".
        payload = b""
    path = tokend.client_socket if socket == "client" else tokend.admin_socket
    with grpc.insecure_channel(paths.grpc_target(path)) as channel:
        _check_answer(_raw(channel, service, method, payload))
    _alive(tokend)
    _check_invariants(tokend)


@FUZZ_SETTINGS
@given(group=st.sampled_from(["a", "b", "ghost", ""]), good_secret=st.booleans(), pid=u32, gpu_uuid=text,
       process_name=text, reserved=u64, version=u32)
def test_random_attach_messages(daemon, group, good_secret, pid, gpu_uuid, process_name, reserved, version):
    tokend, secrets = daemon
    secret = secrets.get(group, "x") if good_secret else "0" * 48
    request = client_pb2.AttachRequest(group=group, secret=secret, pid=pid, gpu_uuid=gpu_uuid,
                                       process_name=process_name, reserved_bytes=reserved, protocol_version=version)
    with grpc.insecure_channel(paths.grpc_target(tokend.client_socket)) as channel:
        attach = channel.unary_unary("/gslice.v1.ClientService/Attach", request_serializer=None,
                                     response_deserializer=client_pb2.AttachReply.FromString)
        detach = channel.unary_unary("/gslice.v1.ClientService/Detach", request_serializer=None,
                                     response_deserializer=None)
        try:
            reply = attach(request.SerializeToString(), timeout=3)
        except grpc.RpcError as exc:
            assert exc.code() in EXPECTED_ERRORS, (exc.code(), exc.details())
            if version in (0, 1) and (group not in secrets or not good_secret):
                assert exc.code() in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.INVALID_ARGUMENT)
        else:
            assert good_secret and group in secrets and reply.public_id and reply.client_id != reply.public_id
            detach(client_pb2.DetachRequest(client_id=reply.client_id).SerializeToString(), timeout=3)
    _alive(tokend)
    _check_invariants(tokend)


class TokendSequences(RuleBasedStateMachine):
    """Random interleavings of every client call, by several clients of two
    groups, with quota changes and removals from the operator; the model of
    what each client holds must match the daemon's view after every step."""

    tokend: TokendProcess = None
    secrets: dict = None
    clients = Bundle("clients")

    def __init__(self):
        super().__init__()
        self.channel = grpc.insecure_channel(paths.grpc_target(self.tokend.client_socket))
        self.admin = self.tokend.admin()
        self.held: dict[str, int] = {}     # client_id -> bytes the model says it holds
        self.tokens: dict[str, int] = {}   # client_id -> token id it was granted
        self.public: dict[str, str] = {}
        self.controls = []

    def _call(self, method, request, reply_class=None, timeout=3):
        fn = self.channel.unary_unary(f"/gslice.v1.ClientService/{method}", request_serializer=None,
                                      response_deserializer=reply_class.FromString if reply_class else None)
        try:
            return fn(request.SerializeToString(), timeout=timeout), None
        except grpc.RpcError as exc:
            assert exc.code() in EXPECTED_ERRORS, (method, exc.code(), exc.details())
            return None, exc.code()

    @rule(target=clients, group=st.sampled_from(["a", "b"]), declared=st.integers(0, 3 * GiB))
    def attach(self, group, declared):
        reply, code = self._call("Attach", client_pb2.AttachRequest(
            group=group, secret=self.secrets[group], pid=1, reserved_bytes=declared), client_pb2.AttachReply)
        if reply is None:
            return "gone"
        self.held[reply.client_id] = declared
        self.public[reply.client_id] = reply.public_id
        # A Control stream keeps it attached (and ends with it).
        stream = self.channel.unary_stream("/gslice.v1.ClientService/Control", request_serializer=None,
                                           response_deserializer=None)(
            client_pb2.ControlRequest(client_id=reply.client_id).SerializeToString())
        self.controls.append(stream)
        return reply.client_id

    def _forget_if_gone(self, client_id, code):
        if code == grpc.StatusCode.NOT_FOUND:
            self.held.pop(client_id, None)
            self.tokens.pop(client_id, None)

    @rule(client_id=clients, size=u64)
    def reserve(self, client_id, size):
        reply, code = self._call("ReserveMemory", client_pb2.ReserveMemoryRequest(client_id=client_id, bytes=size),
                                 client_pb2.ReserveMemoryReply)
        if reply is not None and reply.granted:
            self.held[client_id] += size
        self._forget_if_gone(client_id, code)

    @rule(client_id=clients, size=u64)
    def release_memory(self, client_id, size):
        reply, code = self._call("ReleaseMemory", client_pb2.ReleaseMemoryRequest(client_id=client_id, bytes=size),
                                 client_pb2.ReleaseMemoryReply)
        if reply is not None:
            self.held[client_id] -= size
        self._forget_if_gone(client_id, code)

    @rule(client_id=clients, timeout_ms=st.integers(1, 200))
    def acquire(self, client_id, timeout_ms):
        reply, code = self._call("AcquireToken", client_pb2.AcquireTokenRequest(
            client_id=client_id, timeout_ms=timeout_ms), client_pb2.AcquireTokenReply, timeout=5)
        if reply is not None:
            self.tokens[client_id] = reply.token_id
        self._forget_if_gone(client_id, code)

    @rule(client_id=clients, used=u64, overrun=u64, idle=st.booleans(), wrong=st.booleans())
    def release_token(self, client_id, used, overrun, idle, wrong):
        token = self.tokens.get(client_id, 0) + (7 if wrong else 0)
        _, code = self._call("ReleaseToken", client_pb2.ReleaseTokenRequest(
            client_id=client_id, token_id=token, used_us=used, overrun_us=overrun, idle=idle))
        if code is None:
            self.tokens.pop(client_id, None)
        self._forget_if_gone(client_id, code)

    @rule(client_id=clients)
    def detach(self, client_id):
        _, code = self._call("Detach", client_pb2.DetachRequest(client_id=client_id))
        self.held.pop(client_id, None)
        self.tokens.pop(client_id, None)

    @rule(client_id=clients)
    def operator_removes(self, client_id):
        if client_id in self.public:
            try:
                self.admin.remove_client(self.public[client_id])
            except Exception as exc:  # already gone
                assert type(exc).__name__ == "NotFound", exc
            self.held.pop(client_id, None)
            self.tokens.pop(client_id, None)

    @rule(group=st.sampled_from(["a", "b"]), quota=st.integers(1, 4 * GiB))
    def operator_changes_quota(self, group, quota):
        if quota > self.tokend.admin().status().physical_memory:
            return
        self.admin.update_group(group, memory=str(quota))

    @invariant()
    def matches_the_model(self):
        status = _check_invariants(self.tokend)
        by_public = {c.client_id: c.memory_used for c in status.clients}
        for client_id, held in self.held.items():
            public = self.public[client_id]
            if public in by_public:  # else: ended meanwhile (Control timeout, expiry...) and detached
                assert by_public[public] == held, (public, by_public[public], held)

    def teardown(self):
        for stream in self.controls:
            stream.cancel()
        for client_id in list(self.held):
            self._call("Detach", client_pb2.DetachRequest(client_id=client_id))
        self.channel.close()
        self.admin.close()


def test_random_call_sequences_keep_the_invariants(daemon):
    tokend, secrets = daemon
    TokendSequences.tokend, TokendSequences.secrets = tokend, secrets
    runner = TokendSequences.TestCase
    runner.settings = settings(max_examples=25, stateful_step_count=25, deadline=None,
                               suppress_health_check=list(HealthCheck))
    runner().runTest()
    _alive(tokend)
