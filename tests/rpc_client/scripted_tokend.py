"""A scripted stand-in for tokend's ClientService, for the C client's tests.

Runs a grpc.aio server on a unix socket in a background thread with its own
event loop. Tests steer it (grant, hold, refuse, revoke, restart, reply with
garbage) and read back what the client sent. Unlike the real tokend it can
misbehave on purpose, which is what the failure-path tests need.
"""
from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import struct
import threading
from dataclasses import dataclass, field

import grpc

from gslice.v1 import client_pb2

SERVICE = "gslice.v1.ClientService"
# ClientCall's oneof -> the unary handler that serves it; the field number
# of each in ClientAnswer's oneof (for raw replies embedded in an answer).
STREAM_CALLS = {"acquire": "AcquireToken", "release": "ReleaseToken", "renew": "RenewToken",
                "reserve": "ReserveMemory", "release_memory": "ReleaseMemory"}
ANSWER_FIELDS = {"acquire": 10, "release": 11, "renew": 12, "reserve": 13, "release_memory": 14}


class CallAborted(Exception):
    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(message)
        self.code, self.message = code, message


class StreamCallContext:
    """The context a unary handler gets when its call came on Calls: an
    abort becomes the answer's status."""

    async def abort(self, code, message):
        raise CallAborted(code, message)


FRAME = struct.Struct(">BI")   # client.calls frames its messages as a gRPC stream does


class SocketCallContext:
    """client.calls (tokend/calls_socket.py) as the Calls handler's context:
    read() the next framed ClientCall (EOF when the client closed it),
    write() an answer framed, abort() closes the connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, behaviour, record):
        self.reader, self.writer = reader, writer
        self.behaviour, self.record = behaviour, record

    async def read(self):
        try:
            _compressed, length = FRAME.unpack(await self.reader.readexactly(FRAME.size))
            call = client_pb2.ClientCall.FromString(await self.reader.readexactly(length))
        except (asyncio.IncompleteReadError, ConnectionError):
            return grpc.aio.EOF
        name = STREAM_CALLS[call.WhichOneof("call")]
        self.record.socket_calls.append(name)
        if self.behaviour.drop_calls_socket_at == name:
            await self.abort(grpc.StatusCode.UNAVAILABLE, f"scripted drop of client.calls at {name}")
        return call

    async def write(self, answer) -> None:
        body = answer if isinstance(answer, bytes) else answer.SerializeToString()
        self.writer.write(FRAME.pack(0, len(body)) + body)
        await self.writer.drain()

    async def abort(self, code, message):
        self.writer.close()
        raise ConnectionResetError(message)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _serialize(message) -> bytes:
    # A handler may return raw bytes to send a malformed reply on purpose.
    return message if isinstance(message, bytes) else message.SerializeToString()


@dataclass
class Behaviour:
    """What the server does; tests change these fields between calls."""

    attach_refusal: tuple[grpc.StatusCode, str] | None = None
    acquire: str = "grant"                      # grant | hold | refuse | garbage
    acquire_refusal: tuple[grpc.StatusCode, str] = (grpc.StatusCode.DEADLINE_EXCEEDED, "timed out")
    reserve: str = "echo"                       # echo (used=bytes, quota=2*bytes) | garbage | huge | slow
    slow_reply_s: float = 0.0
    # Answer calls that may wait even past their wait_ms (the client's own
    # deadline then ends them first, whatever the transport's speed).
    answer_past_wait_ms: bool = False
    send_ready: bool = True
    # Serve the Calls stream (False: a daemon older than it, unary calls only).
    # Read when the server starts.
    serve_calls_stream: bool = True
    # (method name, status): the Calls stream ends with that status when such a call comes on it.
    end_calls_stream_at: tuple[str, grpc.StatusCode] | None = None
    # Also serve client.calls beside the socket and offer it in AttachReply.
    # Read when the server starts.
    serve_calls_socket: bool = False
    # method name: client.calls is closed, the call unanswered, when such a call comes on it.
    drop_calls_socket_at: str | None = None
    # call -> raw ClientAnswer bytes sent instead of the proper answer (a confused daemon)
    raw_stream_answer: object = None
    # method name -> raw reply bytes sent instead of the proper reply (fuzzing the decoder)
    raw_replies: dict = field(default_factory=dict)
    quota: int = 8 << 30
    physical: int = 16 << 30


@dataclass
class Record:
    attaches: list = field(default_factory=list)      # AttachRequest messages
    detached: list = field(default_factory=list)      # client ids
    acquires: list = field(default_factory=list)      # (client_id, timeout_ms)
    acquire_cancelled: int = 0
    releases: list = field(default_factory=list)      # ReleaseTokenRequest messages
    reserves: list = field(default_factory=list)      # (client_id, bytes)
    memory_releases: list = field(default_factory=list)
    controls_opened: list = field(default_factory=list)
    stream_calls: list = field(default_factory=list)  # method names of calls answered as stream messages
    socket_calls: list = field(default_factory=list)  # ... of those that came on client.calls


class ScriptedClientService:
    # Shared by all instances: a restarted daemon hands out new client ids.
    _ids = itertools.count(1)

    def __init__(self, behaviour: Behaviour, record: Record):
        self.behaviour = behaviour
        self.record = record
        self.clients: dict[str, int] = {}                 # client_id -> pid
        self.control_queues: dict[str, asyncio.Queue] = {}
        self.hold_release = asyncio.Event()
        self._tokens = itertools.count(100)

    async def _known(self, client_id: str, context) -> None:
        if client_id not in self.clients:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown client_id '{client_id}'")

    async def Attach(self, request, context):
        self.record.attaches.append(request)
        if self.behaviour.attach_refusal:
            code, message = self.behaviour.attach_refusal
            await context.abort(code, message)
        client_id = f"c{next(self._ids)}-{request.pid}"
        self.clients[client_id] = request.pid
        return client_pb2.AttachReply(
            client_id=client_id, group=request.group, gpu_uuid="GPU-scripted",
            memory_quota=self.behaviour.quota, memory_used=request.reserved_bytes,
            physical_memory=self.behaviour.physical, quantum_min_us=1000, quantum_max_us=50000,
            grace_us=2000, priority=3, calls_socket=self.behaviour.serve_calls_socket)

    async def Detach(self, request, context):
        await self._known(request.client_id, context)
        self.record.detached.append(request.client_id)
        self.clients.pop(request.client_id, None)
        queue = self.control_queues.get(request.client_id)
        if queue:
            queue.put_nowait(None)
        return client_pb2.DetachReply()

    async def AcquireToken(self, request, context):
        await self._known(request.client_id, context)
        if "AcquireToken" in self.behaviour.raw_replies:
            return self.behaviour.raw_replies["AcquireToken"]
        self.record.acquires.append((request.client_id, request.timeout_ms))
        mode = self.behaviour.acquire
        if mode == "hold":
            try:
                await self.hold_release.wait()
            except asyncio.CancelledError:
                self.record.acquire_cancelled += 1
                raise
        elif mode == "refuse":
            code, message = self.behaviour.acquire_refusal
            await context.abort(code, message)
        elif mode == "garbage":
            return b"\xff\xff\xff"
        return client_pb2.AcquireTokenReply(token_id=next(self._tokens), quantum_us=20000)

    async def ReleaseToken(self, request, context):
        await self._known(request.client_id, context)
        if "ReleaseToken" in self.behaviour.raw_replies:
            return self.behaviour.raw_replies["ReleaseToken"]
        self.record.releases.append(request)
        if request.token_id == 0:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                f"client does not hold token {request.token_id}")
        return client_pb2.ReleaseTokenReply()

    async def ReserveMemory(self, request, context):
        await self._known(request.client_id, context)
        if "ReserveMemory" in self.behaviour.raw_replies:
            return self.behaviour.raw_replies["ReserveMemory"]
        self.record.reserves.append((request.client_id, request.bytes))
        mode = self.behaviour.reserve
        if mode == "garbage":
            return b"\x0a\x05ab"  # field 1 as a length-delimited value, truncated
        if mode == "huge":
            # A valid reply padded with an unknown 70000-byte field (number 15).
            padding = 70000
            varint = bytes([(padding & 0x7F) | 0x80, ((padding >> 7) & 0x7F) | 0x80, padding >> 14])
            return (client_pb2.ReserveMemoryReply(granted=True, used=1, quota=2).SerializeToString()
                    + b"\x7a" + varint + b"x" * padding)
        if mode == "slow":
            await asyncio.sleep(self.behaviour.slow_reply_s)
        return client_pb2.ReserveMemoryReply(granted=True, used=request.bytes, quota=2 * request.bytes)

    async def ReleaseMemory(self, request, context):
        await self._known(request.client_id, context)
        if "ReleaseMemory" in self.behaviour.raw_replies:
            return self.behaviour.raw_replies["ReleaseMemory"]
        self.record.memory_releases.append((request.client_id, request.bytes))
        return client_pb2.ReleaseMemoryReply(used=0, quota=self.behaviour.quota)

    async def GetMemoryInfo(self, request, context):
        await self._known(request.client_id, context)
        if "GetMemoryInfo" in self.behaviour.raw_replies:
            return self.behaviour.raw_replies["GetMemoryInfo"]
        return client_pb2.GetMemoryInfoReply(quota=self.behaviour.quota, used=12345,
                                             physical_total=self.behaviour.physical)

    async def Control(self, request, context):
        await self._known(request.client_id, context)
        queue: asyncio.Queue = asyncio.Queue()
        self.control_queues[request.client_id] = queue
        self.record.controls_opened.append(request.client_id)
        try:
            if self.behaviour.send_ready:
                yield client_pb2.ControlEvent(ready=client_pb2.Ready())
            while True:
                event = await queue.get()
                if event is None:
                    return
                yield event
        finally:
            self.control_queues.pop(request.client_id, None)
            self.clients.pop(request.client_id, None)

    async def Calls(self, _requests, context):
        """Each call through its unary handler, answered as the real tokend does."""
        writing = asyncio.Lock()
        waiting: set[asyncio.Task] = set()

        async def answer(call, kind: str) -> None:
            name = STREAM_CALLS[kind]
            self.record.stream_calls.append(name)  # on the stream or client.calls (record.socket_calls)
            try:
                serve = getattr(self, name)(getattr(call, kind), StreamCallContext())
                if kind in ("acquire", "reserve") and call.wait_ms and not self.behaviour.answer_past_wait_ms:
                    reply = await asyncio.wait_for(serve, call.wait_ms / 1000)
                else:
                    reply = await serve
                if isinstance(reply, bytes):  # a malformed reply, on purpose
                    out = (client_pb2.ClientAnswer(call_id=call.call_id).SerializeToString()
                           + bytes([ANSWER_FIELDS[kind] << 3 | 2]) + _varint(len(reply)) + reply)
                else:
                    out = client_pb2.ClientAnswer(call_id=call.call_id, **{kind: reply})
            except asyncio.TimeoutError:
                out = client_pb2.ClientAnswer(call_id=call.call_id, code=grpc.StatusCode.DEADLINE_EXCEEDED.value[0],
                                              message=f"not answered within wait_ms {call.wait_ms}")
            except CallAborted as abort:
                out = client_pb2.ClientAnswer(call_id=call.call_id, code=abort.code.value[0], message=abort.message)
            if self.behaviour.raw_stream_answer is not None:
                out = self.behaviour.raw_stream_answer(call)
            async with writing:
                await context.write(out)

        try:
            while (call := await context.read()) is not grpc.aio.EOF:
                kind = call.WhichOneof("call")
                end_at = self.behaviour.end_calls_stream_at
                if end_at and STREAM_CALLS[kind] == end_at[0]:
                    if end_at[1] == grpc.StatusCode.OK:
                        return  # ends the stream with OK, the call unanswered
                    await context.abort(end_at[1], "scripted end of the Calls stream")
                task = asyncio.create_task(answer(call, kind))
                waiting.add(task)
                task.add_done_callback(waiting.discard)
                if kind not in ("acquire", "reserve"):
                    await task
            if waiting:
                await asyncio.wait(set(waiting))
        finally:
            for task in waiting:
                task.cancel()

    def handler(self) -> grpc.GenericRpcHandler:
        unary = {
            "Attach": client_pb2.AttachRequest, "Detach": client_pb2.DetachRequest,
            "AcquireToken": client_pb2.AcquireTokenRequest,
            "ReleaseToken": client_pb2.ReleaseTokenRequest,
            "ReserveMemory": client_pb2.ReserveMemoryRequest,
            "ReleaseMemory": client_pb2.ReleaseMemoryRequest,
            "GetMemoryInfo": client_pb2.GetMemoryInfoRequest,
        }
        handlers = {
            name: grpc.unary_unary_rpc_method_handler(
                getattr(self, name), request_deserializer=request_type.FromString,
                response_serializer=_serialize)
            for name, request_type in unary.items()
        }
        handlers["Control"] = grpc.unary_stream_rpc_method_handler(
            self.Control, request_deserializer=client_pb2.ControlRequest.FromString,
            response_serializer=_serialize)
        if self.behaviour.serve_calls_stream:
            handlers["Calls"] = grpc.stream_stream_rpc_method_handler(
                self.Calls, request_deserializer=client_pb2.ClientCall.FromString,
                response_serializer=_serialize)
        return grpc.method_handlers_generic_handler(SERVICE, handlers)


class ScriptedTokend:
    """The server plus its loop thread. Use as a context manager."""

    def __init__(self, socket_path: str, serve_calls_stream: bool = True, serve_calls_socket: bool = False):
        self.socket_path = socket_path
        self.calls_socket_path = os.path.join(os.path.dirname(socket_path), "client.calls")
        self.behaviour = Behaviour(serve_calls_stream=serve_calls_stream, serve_calls_socket=serve_calls_socket)
        self.calls_server = None
        self._calls_connections: set[asyncio.Task] = set()
        self.record = Record()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="scripted-tokend", daemon=True)
        self.thread.start()
        self.server = None
        self.service: ScriptedClientService | None = None

    def _run(self, coro, timeout: float = 30.0):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call(self, fn, timeout: float = 30.0):
        """Runs fn() on the server's loop (its state is not thread-safe)."""
        async def wrapper():
            return fn()
        return self._run(wrapper(), timeout)

    async def _start(self):
        self.service = ScriptedClientService(self.behaviour, self.record)
        self.server = grpc.aio.server()
        self.server.add_generic_rpc_handlers((self.service.handler(),))
        if self.server.add_insecure_port(f"unix:{self.socket_path}") == 0:
            raise RuntimeError(f"cannot listen on unix:{self.socket_path}")
        await self.server.start()
        if self.behaviour.serve_calls_socket:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.calls_socket_path)
            self.calls_server = await asyncio.start_unix_server(self._serve_calls_socket, self.calls_socket_path)

    async def _serve_calls_socket(self, reader, writer):
        task = asyncio.current_task()
        self._calls_connections.add(task)
        try:
            await self.service.Calls(None, SocketCallContext(reader, writer, self.behaviour, self.record))
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self._calls_connections.discard(task)
            writer.close()

    async def _stop(self):
        if self.calls_server is not None:
            self.calls_server.close()
            for task in list(self._calls_connections):
                task.cancel()
            await asyncio.gather(*self._calls_connections, return_exceptions=True)
            self.calls_server = None
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.calls_socket_path)
        if self.server is not None:
            await self.server.stop(grace=None)
            self.server = None

    def start(self) -> "ScriptedTokend":
        self._run(self._start())
        return self

    def stop(self) -> None:
        self._run(self._stop())

    def restart(self) -> None:
        """A daemon restart: every connection breaks and all clients are forgotten."""
        self.stop()
        self.start()

    def close(self) -> None:
        try:
            self.stop()
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            self.loop.close()

    def __enter__(self) -> "ScriptedTokend":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # -- steering ---------------------------------------------------------

    def push_event(self, client_id: str, event) -> None:
        def put():
            self.service.control_queues[client_id].put_nowait(event)
        self.call(put)

    def revoke(self, client_id: str, token_id: int, reason: str) -> None:
        self.push_event(client_id, client_pb2.ControlEvent(
            revoke=client_pb2.Revoke(token_id=token_id, reason=reason)))

    def change_quota(self, client_id: str, quota: int) -> None:
        self.push_event(client_id, client_pb2.ControlEvent(
            quota_changed=client_pb2.QuotaChanged(memory_quota=quota)))

    def end_control(self, client_id: str) -> None:
        self.push_event(client_id, None)

    def release_held_acquires(self) -> None:
        self.call(lambda: self.service.hold_release.set())

    def control_open(self, client_id: str) -> bool:
        return self.call(lambda: client_id in self.service.control_queues)
