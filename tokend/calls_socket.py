"""The Calls messages on a plain unix stream socket: client.calls beside
client.sock, for shims that AttachReply.calls_socket tells of it.

Why: grpcio's Python server spends ~170-210 us of daemon CPU per message
on an open stream (docs/architecture.md, "The round trip"), most of an
acquire + release round trip. Here each ClientCall comes framed as on a
gRPC stream (a 0 byte, the length as 4 bytes big-endian, the message) and
is served by the Calls stream's own rules (ClientService.start_call), with
each ClientAnswer framed the same way: one set of rules for both.

Only those calls: Attach, Control (revokes; a process's exit detaches it
when its Control stream ends) and the rest stay on gRPC. A connection
belongs to no client: every call carries its client_id, the bearer
credential, as on the stream, and the socket has client.sock's mode. A
connection that sends something malformed is closed; its shim then sends
its calls on the Calls stream."""
from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import struct
from pathlib import Path

import grpc

from gslice.v1 import client_pb2

from .client_service import ClientService
from .rpc_guard import MAX_REQUEST_BYTES, RpcFailure, RpcGuard

log = logging.getLogger("gslice.tokend.calls_socket")

FRAME = struct.Struct(">BI")   # gRPC's message prefix: compressed flag, length


class CallsSocket:
    """The listener and its connections (at most max_connections at once)."""

    def __init__(self, path: Path, service: ClientService, guard: RpcGuard, max_connections: int):
        self.path = Path(path)
        self._service = service
        self._guard = guard
        self._max_connections = max_connections
        self._connections: set[_CallsConnection] = set()
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        """Listen (a stale file from a daemon that died is replaced; the
        daemon checked client.sock was not in use)."""
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        old_umask = os.umask(0o177)   # nobody connects before the mode is set
        try:
            loop = asyncio.get_running_loop()
            self._server = await loop.create_unix_server(lambda: _CallsConnection(self), path=str(self.path))
        finally:
            os.umask(old_umask)
        os.chmod(self.path, 0o666)   # as client.sock: any tenant's shim connects

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        waiting = [task for connection in self._connections for task in connection.waiting]
        for connection in list(self._connections):
            connection.abort()
        for task in waiting:
            task.cancel()
        if waiting:
            await asyncio.gather(*waiting, return_exceptions=True)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


class _CallsConnection(asyncio.Protocol):
    """One shim's connection. Calls are taken from the bytes as they arrive
    and served in the same callback: a call decided at once (nearly all) is
    answered before the callback returns, with no task, future or await on
    its way (on this path the daemon's event loop was half of its cost per
    call with asyncio streams). A call that waits runs as a task and
    answers when decided."""

    def __init__(self, listener: CallsSocket):
        self._listener = listener
        self._transport: asyncio.Transport | None = None
        self._received = bytearray()
        self.waiting: set[asyncio.Task] = set()

    def connection_made(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        listener = self._listener
        if len(listener._connections) >= listener._max_connections:
            log.warning("calls socket %s: %d connections already; at most %d (max-connections): one refused",
                        listener.path, len(listener._connections), listener._max_connections)
            transport.close()
            return
        listener._connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        # The shim closed it (exit, or its client gave up): unlike a gRPC
        # half-close, nobody is left to answer, so calls still waiting are
        # abandoned (cancelled: an acquire withdraws its request), not
        # granted a token nobody will release.
        self._listener._connections.discard(self)
        # Cancelled in a later turn of the loop: a task made in this turn
        # has not taken its first step yet, and a coroutine cancelled before
        # it starts never runs its `finally` (an acquire would stay queued
        # at the scheduler, and its client refused every later acquire).
        loop = asyncio.get_running_loop()
        for task in self.waiting:
            loop.call_soon(task.cancel)

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    # A shim that stops reading its answers is not read from either.
    def pause_writing(self) -> None:
        self._transport.pause_reading()

    def resume_writing(self) -> None:
        self._transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        received = self._received
        received += data
        service = self._listener._service
        taken = 0
        try:
            # Not past a failed write of an earlier answer (the shim closed
            # its end): nobody would read what the later calls decide.
            while len(received) - taken >= FRAME.size and not self._transport.is_closing():
                compressed, length = FRAME.unpack_from(received, taken)
                if compressed:
                    raise RpcFailure(grpc.StatusCode.INVALID_ARGUMENT,
                                     f"message flagged compressed ({compressed}); only uncompressed messages (0) "
                                     f"are taken")
                if length > MAX_REQUEST_BYTES:
                    raise RpcFailure(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                     f"ClientCall of {length} bytes; the limit is {MAX_REQUEST_BYTES} bytes")
                end = taken + FRAME.size + length
                if len(received) < end:
                    break
                call = self._listener._guard.parse("Calls", client_pb2.ClientCall,
                                                   bytes(received[taken + FRAME.size:end]))
                taken = end
                started = service.start_call(call, len(self.waiting))
                if isinstance(started, client_pb2.ClientAnswer):
                    self._write(started)
                else:
                    task = asyncio.get_running_loop().create_task(self._write_when_decided(started))
                    self.waiting.add(task)
                    task.add_done_callback(self.waiting.discard)
        except Exception as exc:   # a malformed message: counted and logged, the connection closed
            code, message = self._listener._guard.failure("Calls", exc)
            log.info("calls socket: closed a connection (%s: %s)", code.name, message)
            self._transport.close()
            received.clear()
            return
        del received[:taken]

    def eof_received(self) -> bool:
        if self._received:
            log.info("calls socket: the shim closed it with a message cut short (%d bytes of a ClientCall)",
                     len(self._received))
        return False   # close our side too: connection_lost follows

    def _write(self, answer: client_pb2.ClientAnswer) -> None:
        if self._transport.is_closing():
            return   # the shim went away while its call waited
        body = answer.SerializeToString()
        self._transport.write(FRAME.pack(0, len(body)) + body)

    async def _write_when_decided(self, answer_coroutine) -> None:
        self._write(await answer_coroutine)
