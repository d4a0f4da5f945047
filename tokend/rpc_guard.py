"""Wraps servicer methods into grpc.aio handlers that never let client input
hurt the daemon.

Requests arrive as raw bytes and are parsed here, so a message over
MAX_REQUEST_BYTES gets RESOURCE_EXHAUSTED and an unparsable one
INVALID_ARGUMENT, both with a message and counted like every other error
status in gslice_bad_requests_total{method,code}. Typed errors from the
core (their `.code`) and RpcFailure map to their gRPC status; anything
unexpected is logged with its traceback and answered INTERNAL."""
from __future__ import annotations

import logging
from typing import Callable

import grpc
from google.protobuf import message as protobuf_message
from google.protobuf import symbol_database

log = logging.getLogger("gslice.tokend.rpc")

# Every legitimate request is a few hundred bytes at most.
MAX_REQUEST_BYTES = 64 * 1024
# Above this, grpc itself refuses the message before it reaches us.
GRPC_MAX_RECEIVE_BYTES = 1024 * 1024

CORE_CODES = {
    "invalid_argument": grpc.StatusCode.INVALID_ARGUMENT,
    "not_found": grpc.StatusCode.NOT_FOUND,
    "already_exists": grpc.StatusCode.ALREADY_EXISTS,
    "failed_precondition": grpc.StatusCode.FAILED_PRECONDITION,
    "resource_exhausted": grpc.StatusCode.RESOURCE_EXHAUSTED,
}


class RpcFailure(Exception):
    """An error status decided by the adapter itself (auth, deadlines, ...)."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def status_of(exc: BaseException) -> tuple[grpc.StatusCode, str] | None:
    """The status an expected error maps to; None for an unexpected one."""
    if isinstance(exc, RpcFailure):
        return exc.code, exc.message
    code = getattr(exc, "code", None)
    if isinstance(code, str) and code in CORE_CODES:
        return CORE_CODES[code], str(exc)
    return None


class RpcGuard:
    def __init__(self, on_error: Callable[[str, grpc.StatusCode], None]):
        self._on_error = on_error

    def handlers(self, service_descriptor, servicer) -> grpc.GenericRpcHandler:
        """A generic handler serving every method of the service from `servicer`."""
        methods = {}
        for method in service_descriptor.methods:
            request_class = symbol_database.Default().GetSymbol(method.input_type.full_name)
            implementation = getattr(servicer, method.name)
            if method.client_streaming and method.server_streaming:
                handler = grpc.stream_stream_rpc_method_handler(
                    self._bidi(method.name, request_class, implementation),
                    request_deserializer=None, response_serializer=_serialize)
            elif method.server_streaming:
                handler = grpc.unary_stream_rpc_method_handler(
                    self._stream(method.name, request_class, implementation),
                    request_deserializer=None, response_serializer=_serialize)
            else:
                handler = grpc.unary_unary_rpc_method_handler(
                    self._unary(method.name, request_class, implementation),
                    request_deserializer=None, response_serializer=_serialize)
            methods[method.name] = handler
        return grpc.method_handlers_generic_handler(service_descriptor.full_name, methods)

    def parse(self, name: str, request_class, raw: bytes):
        """The request `raw` holds, or RpcFailure naming what is wrong with it."""
        if len(raw) > MAX_REQUEST_BYTES:
            raise RpcFailure(grpc.StatusCode.RESOURCE_EXHAUSTED,
                             f"{name} request is {len(raw)} bytes; the limit is {MAX_REQUEST_BYTES} bytes")
        try:
            return request_class.FromString(raw)
        except protobuf_message.DecodeError as exc:
            raise RpcFailure(grpc.StatusCode.INVALID_ARGUMENT,
                             f"{name} request ({len(raw)} bytes) is not a valid {request_class.DESCRIPTOR.full_name}: {exc}"
                             ) from None

    def failure(self, name: str, exc: BaseException) -> tuple[grpc.StatusCode, str]:
        """The status a call of `name` that raised exc ends with (counted and
        logged here); for a call answered on a stream as for a unary one."""
        status = status_of(exc)
        if status is None:
            log.error("%s failed unexpectedly", name, exc_info=exc)
            status = (grpc.StatusCode.INTERNAL, f"{name} failed inside tokend: {type(exc).__name__}: {exc}")
        code, message = status
        self._on_error(name, code)
        log.debug("%s -> %s: %s", name, code.name, message)
        return code, message

    async def _fail(self, name: str, exc: BaseException, context) -> None:
        await context.abort(*self.failure(name, exc))

    def _unary(self, name, request_class, implementation):
        async def handle(raw: bytes, context):
            try:
                request = self.parse(name, request_class, raw)
                return await implementation(request, context)
            except (grpc.aio.AbortError, KeyboardInterrupt, SystemExit):
                raise
            except Exception as exc:  # client input must never take the daemon down
                await self._fail(name, exc, context)
        return handle

    def _stream(self, name, request_class, implementation):
        async def handle(raw: bytes, context):
            try:
                request = self.parse(name, request_class, raw)
                async for reply in implementation(request, context):
                    yield reply
            except (grpc.aio.AbortError, KeyboardInterrupt, SystemExit):
                raise
            except Exception as exc:
                await self._fail(name, exc, context)
        return handle

    def _bidi(self, name, request_class, implementation):
        """implementation(read, context): read() is the next parsed request,
        None at the end of the client's side."""
        async def handle(_request_iterator, context):
            async def read():
                raw = await context.read()
                return None if raw is grpc.aio.EOF else self.parse(name, request_class, raw)
            try:
                await implementation(read, context)
            except (grpc.aio.AbortError, KeyboardInterrupt, SystemExit):
                raise
            except Exception as exc:
                await self._fail(name, exc, context)
        return handle


def _serialize(reply) -> bytes:
    return reply.SerializeToString()
