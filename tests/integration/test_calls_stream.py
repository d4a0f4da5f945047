"""ClientService.Calls: the token and memory calls as messages on one stream
(what the shim uses; hook/rpc_client.c). Each call is served as its unary
method would be, with the same replies and statuses; calls that may wait run
beside the others. Every test runs on both transports: the gRPC stream, and
client.calls beside client.sock (tokend/calls_socket.py), the same messages
framed as on a gRPC stream over a plain unix socket."""
from __future__ import annotations

import queue
import socket
import struct
import time

import grpc
import pytest

from gslice.v1 import client_pb2

MiB = 1024**2


class CallsStream:
    """One client's Calls stream: send() a call, answer() the next answer."""

    def __init__(self, client):
        self.client = client
        self._out: queue.Queue = queue.Queue()
        self._call_id = 0
        self._answers = client.stub.Calls(iter(self._out.get, None))

    def send(self, wait_ms: int = 0, **call) -> int:
        self._call_id += 1
        kind, request = next(iter(call.items()))
        request.client_id = request.client_id or self.client.client_id
        self._out.put(client_pb2.ClientCall(call_id=self._call_id, wait_ms=wait_ms, **{kind: request}))
        return self._call_id

    def answer(self) -> client_pb2.ClientAnswer:
        return next(self._answers)

    def close(self) -> None:
        self._out.put(None)

    def cancel(self) -> None:
        self._answers.cancel()


FRAME = struct.Struct(">BI")


class CallsSocket(CallsStream):
    """The same over client.calls: ClientCall / ClientAnswer framed as on a gRPC stream."""

    def __init__(self, client):
        self.client = client
        self._call_id = 0
        assert client.attach_reply.calls_socket, "the daemon did not offer its calls socket"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(30)
        self.sock.connect(str(client.socket_path.with_name("client.calls")))

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, wait_ms: int = 0, **call) -> int:
        self._call_id += 1
        kind, request = next(iter(call.items()))
        request.client_id = request.client_id or self.client.client_id
        body = client_pb2.ClientCall(call_id=self._call_id, wait_ms=wait_ms, **{kind: request}).SerializeToString()
        self.send_raw(FRAME.pack(0, len(body)) + body)
        return self._call_id

    def _read(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise EOFError(f"the daemon closed the calls socket ({len(data)} of {n} bytes read)")
            data += chunk
        return data

    def answer(self) -> client_pb2.ClientAnswer:
        compressed, length = FRAME.unpack(self._read(FRAME.size))
        assert compressed == 0
        return client_pb2.ClientAnswer.FromString(self._read(length))

    def close(self) -> None:
        self.sock.close()

    cancel = close


@pytest.fixture(params=["stream", "socket"])
def transport(request):
    return {"stream": CallsStream, "socket": CallsSocket}[request.param]


@pytest.fixture
def group(tokend):
    return tokend.admin().create_group("g", request="50%", limit="100%", memory="64MiB")


@pytest.fixture
def holder_and_waiter(tokend, group, transport):
    """Two clients of the group; the waiter's calls go on its Calls stream
    (or socket). (The clients are closed with the daemon.)"""
    holder = tokend.shim_client("g", group.secret)
    waiter = tokend.shim_client("g", group.secret)
    stream = transport(waiter)
    yield holder, waiter, stream
    stream.close()


def test_every_call_answers_as_its_unary_method(tokend, group, transport):
    client = tokend.shim_client("g", group.secret)
    stream = transport(client)
    try:
        call = stream.send(acquire=client_pb2.AcquireTokenRequest(timeout_ms=5000))
        acquired = stream.answer()
        assert (acquired.call_id, acquired.code, acquired.WhichOneof("answer")) == (call, 0, "acquire")
        assert acquired.acquire.token_id > 0 and acquired.acquire.quantum_us > 0

        stream.send(renew=client_pb2.RenewTokenRequest(token_id=acquired.acquire.token_id, used_us=1000))
        renewed = stream.answer()
        assert renewed.code == 0 and renewed.renew.renewed  # nobody else waits: a fresh slice at once
        stream.send(release=client_pb2.ReleaseTokenRequest(token_id=renewed.renew.token_id, used_us=500))
        assert stream.answer().WhichOneof("answer") == "release"

        stream.send(reserve=client_pb2.ReserveMemoryRequest(bytes=48 * MiB))
        reserved = stream.answer()
        assert (reserved.reserve.granted, reserved.reserve.used, reserved.reserve.quota) == (True, 48 * MiB, 64 * MiB)
        stream.send(reserve=client_pb2.ReserveMemoryRequest(bytes=32 * MiB))
        refused = stream.answer()
        assert refused.code == 0 and not refused.reserve.granted   # all or nothing, as unary
        stream.send(release_memory=client_pb2.ReleaseMemoryRequest(bytes=48 * MiB))
        assert stream.answer().release_memory.used == 0
        assert client.memory_info().used == 0

        # Errors: the unary call's status code and message, and the stream goes on.
        stream.send(release=client_pb2.ReleaseTokenRequest(token_id=12345))
        failed = stream.answer()
        assert failed.code == grpc.StatusCode.FAILED_PRECONDITION.value[0] and "12345" in failed.message
        assert failed.WhichOneof("answer") is None
        stream.send(acquire=client_pb2.AcquireTokenRequest(client_id="not-a-client"))
        unknown = stream.answer()
        assert unknown.code == grpc.StatusCode.NOT_FOUND.value[0] and "not-a-client" in unknown.message
        stream.send(reserve=client_pb2.ReserveMemoryRequest(bytes=0))
        assert stream.answer().code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
        assert tokend.metric_value("gslice_bad_requests_total", method="ReleaseToken",
                                   code="FAILED_PRECONDITION") == 1
    finally:
        stream.close()
        client.close()


def test_a_waiting_acquire_lets_later_calls_through_and_ends_at_its_wait(holder_and_waiter):
    holder, _, stream = holder_and_waiter
    token = holder.acquire()
    waiting = stream.send(acquire=client_pb2.AcquireTokenRequest(timeout_ms=20000), wait_ms=20000)
    reserve = stream.send(reserve=client_pb2.ReserveMemoryRequest(bytes=MiB))
    first = stream.answer()
    assert (first.call_id, first.reserve.granted) == (reserve, True), "the reserve waited behind the acquire"
    holder.release(token, used_us=1000)
    granted = stream.answer()
    assert granted.call_id == waiting and granted.code == 0 and granted.acquire.token_id > 0
    stream.send(release=client_pb2.ReleaseTokenRequest(token_id=granted.acquire.token_id))
    assert stream.answer().code == 0

    # wait_ms ends the call as grpc-timeout ends the unary one (well
    # within the holder's 100 ms quantum); the daemon forgets the
    # waiter, so the next release does not grant it.
    token = holder.acquire()
    started = time.monotonic()
    stream.send(acquire=client_pb2.AcquireTokenRequest(timeout_ms=20000), wait_ms=40)
    late = stream.answer()
    assert late.code == grpc.StatusCode.DEADLINE_EXCEEDED.value[0] and "wait_ms 40" in late.message, late
    assert 0.035 < time.monotonic() - started < 5
    holder.release(token, used_us=1000)
    assert holder.acquire(timeout_ms=2000) > 0, "the abandoned waiter was granted the token"


def test_ending_the_stream_abandons_its_waiting_acquire(tokend, holder_and_waiter):
    holder, waiter, stream = holder_and_waiter
    admin = tokend.admin()
    token = holder.acquire()
    stream.send(acquire=client_pb2.AcquireTokenRequest(timeout_ms=20000))
    wait_until = time.monotonic() + 10
    while admin.status().waiting_client_ids != [waiter.public_id]:
        assert time.monotonic() < wait_until, "the acquire never queued at the daemon"
        time.sleep(0.02)
    stream.cancel()
    while admin.status().waiting_client_ids:
        assert time.monotonic() < wait_until, "the cancelled stream's acquire still waits"
        time.sleep(0.02)
    holder.release(token, used_us=1000)
    assert admin.status().holder_client_id in ("", holder.public_id)


def test_a_malformed_call_ends_the_stream_with_invalid_argument(tokend, group):
    client = tokend.shim_client("g", group.secret)
    try:
        answers = client.stub.Calls(iter([client_pb2.ClientCall(call_id=7)]))
        with pytest.raises(grpc.RpcError) as raised:
            next(answers)
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "ClientCall 7 names no call" in raised.value.details()
        raw = client.channel.stream_stream("/gslice.v1.ClientService/Calls")(iter([b"\xff\xff\xff"]))
        with pytest.raises(grpc.RpcError) as raised:
            next(raw)
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "not a valid" in raised.value.details()
        assert client.acquire() > 0, "the client itself is unharmed"
    finally:
        client.close()


@pytest.mark.parametrize("bad, why", [
    (FRAME.pack(0, 3) + b"\xff\xff\xff", "not a valid gslice.v1.ClientCall"),
    (FRAME.pack(1, 0), "flagged compressed (1)"),
    (FRAME.pack(0, 1 << 20), "the limit is 65536 bytes"),
    (FRAME.pack(0, 2) + client_pb2.ClientCall(call_id=7).SerializeToString(), "ClientCall 7 names no call"),
])
def test_a_malformed_message_closes_the_calls_socket_connection_alone(tokend, group, bad, why):
    """The connection is closed, counted and logged with what was wrong; the
    daemon, the client and a second connection go on."""
    client = tokend.shim_client("g", group.secret)
    try:
        good, broken = CallsSocket(client), CallsSocket(client)
        broken.send_raw(bad)
        with pytest.raises(EOFError):
            broken.answer()
        assert why in tokend.log_path.read_text(), tokend.log_tail()
        assert tokend.metric_value("gslice_bad_requests_total", method="Calls") == 1
        good.send(acquire=client_pb2.AcquireTokenRequest(timeout_ms=5000))
        assert good.answer().acquire.token_id > 0
        good.close()
    finally:
        client.close()


def test_the_calls_socket_is_offered_only_when_served(tmp_path):
    """--calls-socket off: no file, and AttachReply says so (the shim then
    sends its calls on the Calls stream)."""
    from gslice.testing import TokendProcess

    with TokendProcess(tmp_path, gpu="fake", extra_args=["--calls-socket", "off"]) as off:
        created = off.admin().create_group("g", request="50%", memory="64MiB")
        client = off.shim_client("g", created.secret)
        try:
            assert not client.attach_reply.calls_socket
            assert not off.client_socket.with_name("client.calls").exists()
        finally:
            client.close()

