"""The Calls messages on a plain unix stream socket: client.calls beside
client.sock, for shims that AttachReply.calls_socket tells of it.

Why: grpcio's Python server spends ~170-210 us of daemon CPU per message
on an open stream (docs/architecture.md, "The round trip"), most of an
acquire + release round trip. Here each ClientCall comes framed as on a
gRPC stream (a 0 byte, the length as 4 bytes big-endian, the message) and
is answered by the Calls stream's own handler (ClientService.Calls), with
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


class _AnswerWriter:
    """What ClientService.Calls writes its answers to (a grpc context's write)."""

    def __init__(self, writer: asyncio.StreamWriter):
        self._writer = writer

    async def write(self, answer: client_pb2.ClientAnswer) -> None:
        body = answer.SerializeToString()
        self._writer.write(FRAME.pack(0, len(body)) + body)
        await self._writer.drain()


class CallsSocket:
    """The listener and its connections (at most max_connections at once)."""

    def __init__(self, path: Path, service: ClientService, guard: RpcGuard, max_connections: int):
        self.path = Path(path)
        self._service = service
        self._guard = guard
        self._max_connections = max_connections
        self._connections: set[asyncio.Task] = set()
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        """Listen (a stale file from a daemon that died is replaced; the
        daemon checked client.sock was not in use)."""
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        old_umask = os.umask(0o177)   # nobody connects before the mode is set
        try:
            self._server = await asyncio.start_unix_server(self._serve, path=str(self.path))
        finally:
            os.umask(old_umask)
        os.chmod(self.path, 0o666)   # as client.sock: any tenant's shim connects

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if len(self._connections) >= self._max_connections:
            log.warning("calls socket %s: %d connections already; at most %d (max-connections): one refused",
                        self.path, len(self._connections), self._max_connections)
            writer.close()
            return
        self._connections.add(task)

        async def read() -> client_pb2.ClientCall | None:
            try:
                header = await reader.readexactly(FRAME.size)
            except asyncio.IncompleteReadError as exc:
                if exc.partial:
                    raise RpcFailure(grpc.StatusCode.INVALID_ARGUMENT,
                                     f"a message prefix cut short: {len(exc.partial)} of {FRAME.size} bytes") from None
                # The shim closed it (exit, or its client gave up): unlike a
                # gRPC half-close, nobody is left to answer, so calls still
                # waiting are abandoned (Calls cancels them on the way out),
                # not granted a token nobody will release.
                raise ConnectionResetError("the shim closed its calls socket") from None
            compressed, length = FRAME.unpack(header)
            if compressed:
                raise RpcFailure(grpc.StatusCode.INVALID_ARGUMENT,
                                 f"message flagged compressed ({compressed}); only uncompressed messages (0) are taken")
            if length > MAX_REQUEST_BYTES:
                raise RpcFailure(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                 f"ClientCall of {length} bytes; the limit is {MAX_REQUEST_BYTES} bytes")
            return self._guard.parse("Calls", client_pb2.ClientCall, await reader.readexactly(length))

        try:
            await self._service.Calls(read, _AnswerWriter(writer))
        except (ConnectionError, asyncio.IncompleteReadError):
            pass   # the shim went away mid-message
        except asyncio.CancelledError:
            raise
        except Exception as exc:   # a malformed message: counted and logged, the connection closed
            code, message = self._guard.failure("Calls", exc)
            log.info("calls socket: closed a connection (%s: %s)", code.name, message)
        finally:
            self._connections.discard(task)
            writer.close()
