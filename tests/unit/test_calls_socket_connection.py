"""tokend/calls_socket.py without a daemon: a connection serves its calls by
ClientService.start_call's rules, answers decided calls before its read
returns, and cancels the calls still waiting when the shim goes away."""
from __future__ import annotations

import asyncio
import struct

from gslice.v1 import client_pb2
from tokend.calls_socket import CallsSocket
from tokend.client_service import ClientService
from tokend.limits import Limits
from tokend.rpc_guard import RpcGuard

from test_client_service_calls import AcquiresNeverGranted, acquire_call

FRAME = struct.Struct(">BI")


class ReleasesAnswered(AcquiresNeverGranted):
    """Acquires wait forever; releases are answered at once."""

    def release_token(self, request):
        return client_pb2.ReleaseTokenReply(lease_kept=request.keep_lease)


def framed(call: client_pb2.ClientCall) -> bytes:
    body = call.SerializeToString()
    return FRAME.pack(0, len(body)) + body


async def read_answer(reader: asyncio.StreamReader) -> client_pb2.ClientAnswer:
    _, length = FRAME.unpack(await reader.readexactly(FRAME.size))
    return client_pb2.ClientAnswer.FromString(await reader.readexactly(length))


def serve(tmp_path, coordinator, client):
    errors = []

    async def main():
        listener = CallsSocket(tmp_path / "client.calls", ClientService(coordinator, RpcGuard(
            lambda method, code: errors.append((method, code.name)))), RpcGuard(
            lambda method, code: errors.append((method, code.name))), max_connections=4)
        await listener.start()
        try:
            reader, writer = await asyncio.open_unix_connection(str(listener.path))
            try:
                return await asyncio.wait_for(client(reader, writer), 10)
            finally:
                writer.close()
        finally:
            await asyncio.wait_for(listener.close(), 10)
    return asyncio.run(main()), errors


def test_calls_decided_at_once_are_answered_in_order_beside_calls_that_wait(tmp_path):
    coordinator = ReleasesAnswered(Limits(max_streams_per_connection=4))

    async def client(reader, writer):
        release = client_pb2.ClientCall(call_id=3, release=client_pb2.ReleaseTokenRequest(client_id="c", keep_lease=True))
        # In one write: the daemon takes every call from the bytes it got.
        writer.write(framed(acquire_call(1)) + framed(acquire_call(2)) + framed(release))
        answer = await read_answer(reader)
        await asyncio.sleep(0.05)
        return answer, coordinator.waiting

    (answer, waiting), errors = serve(tmp_path, coordinator, client)
    assert (answer.call_id, answer.code, answer.release.lease_kept) == (3, 0, True)
    assert waiting == 2 and errors == []


def test_a_connection_past_the_bound_of_waiting_calls_is_closed_and_its_calls_cancelled(tmp_path):
    coordinator = AcquiresNeverGranted(Limits(max_streams_per_connection=4))

    async def client(reader, writer):
        writer.write(b"".join(framed(acquire_call(i)) for i in range(1, 6)))
        closed = await reader.read()   # EOF: the daemon closed it
        for _ in range(100):
            if coordinator.cancelled == 4:
                break
            await asyncio.sleep(0.01)
        return closed, coordinator.waiting, coordinator.cancelled   # before the listener closes

    (closed, waiting, cancelled), errors = serve(tmp_path, coordinator, client)
    assert closed == b""
    assert errors == [("Calls", "RESOURCE_EXHAUSTED")]
    assert (waiting, cancelled) == (4, 4), "waiting calls outlived their connection"


def test_the_shim_going_away_cancels_its_waiting_calls(tmp_path):
    coordinator = AcquiresNeverGranted(Limits(max_streams_per_connection=4))

    async def client(reader, writer):
        writer.write(framed(acquire_call(1)) + framed(acquire_call(2))[:7])   # the second cut short
        for _ in range(100):
            if coordinator.waiting == 1:
                break
            await asyncio.sleep(0.01)
        writer.close()
        for _ in range(100):
            if coordinator.cancelled == 1:
                break
            await asyncio.sleep(0.01)
        return coordinator.waiting, coordinator.cancelled

    (waiting, cancelled), errors = serve(tmp_path, coordinator, client)
    assert (waiting, cancelled) == (1, 1)
    assert errors == []


def test_a_call_split_across_reads_is_served_once_whole(tmp_path):
    coordinator = ReleasesAnswered(Limits(max_streams_per_connection=4))

    async def client(reader, writer):
        data = b"".join(framed(client_pb2.ClientCall(call_id=n, release=client_pb2.ReleaseTokenRequest(
            client_id="c", keep_lease=n % 2 == 0))) for n in (1, 2))
        for cut in (3, 9, len(data) - 1):   # inside the first prefix, the first body, the second body
            writer.write(data[:cut])
            await writer.drain()
            await asyncio.sleep(0.02)
            writer.write(data[cut:])
            answers = [await read_answer(reader), await read_answer(reader)]
            assert [(a.call_id, a.release.lease_kept) for a in answers] == [(1, False), (2, True)]
        return True

    done, errors = serve(tmp_path, coordinator, client)
    assert done and errors == []


class _TransportWhoseWritesFail(asyncio.Transport):
    """A shim that closed its end: the first answer written fails, and the
    transport closes as asyncio's does on EPIPE (connection_lost in the next
    turn of the loop)."""

    def __init__(self, protocol):
        super().__init__()
        self._protocol = protocol
        self._closing = False

    def write(self, data):
        if not self._closing:
            self._closing = True
            asyncio.get_running_loop().call_soon(self._protocol.connection_lost, BrokenPipeError())

    def is_closing(self):
        return self._closing

    def close(self):
        self._closing = True

    def pause_reading(self):
        pass

    def resume_reading(self):
        pass


class AcquiresCounted(ReleasesAnswered):
    started = 0

    def acquire_start(self, client_id, timeout_ms, work_item_us, doorbell_rang=False):
        self.started += 1
        return super().acquire_start(client_id, timeout_ms, work_item_us, doorbell_rang)


def test_calls_after_a_failed_write_are_not_taken_and_every_waiting_call_is_withdrawn(tmp_path):
    """Before: the acquire after the release whose answer could not be
    written was started, and its task cancelled before its first step: the
    coordinator's `finally` never ran, the request stayed queued and the
    client was refused every later acquire ("already has an AcquireToken
    waiting"). Now it is not taken; and a call already waiting is
    withdrawn, not left queued."""
    from tokend.calls_socket import _CallsConnection

    release = client_pb2.ClientCall(call_id=2, release=client_pb2.ReleaseTokenRequest(client_id="c"))

    async def scenario():
        coordinator = AcquiresCounted(Limits(max_streams_per_connection=4))
        listener = CallsSocket(tmp_path / "client.calls", ClientService(coordinator, RpcGuard(lambda m, c: None)),
                               RpcGuard(lambda m, c: None), max_connections=4)
        connection = _CallsConnection(listener)
        connection.connection_made(_TransportWhoseWritesFail(connection))
        connection.data_received(framed(acquire_call(1)) + framed(release) + framed(acquire_call(3)))
        for _ in range(5):
            await asyncio.sleep(0)
        return coordinator

    coordinator = asyncio.run(scenario())
    assert coordinator.started == 1  # call 3 came after the failed write of call 2's answer
    assert coordinator.cancelled == coordinator.waiting == 1  # call 1 ran, and was withdrawn
