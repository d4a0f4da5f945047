"""gslice.v1.ClientService: what every shim speaks, on client.sock. A thin
translation onto the Coordinator; errors are raised typed and mapped to
statuses by rpc_guard."""
from __future__ import annotations

import asyncio
from types import CoroutineType

import grpc

from gslice.v1 import client_pb2

from .coordinator import Coordinator, settled
from .rpc_guard import RpcFailure, RpcGuard

# ClientCall's oneof -> the unary method it stands for. Those that may wait
# for the scheduler or the ledger run beside the reading of later calls.
STREAM_CALLS = {"acquire": "AcquireToken", "release": "ReleaseToken", "renew": "RenewToken",
                "reserve": "ReserveMemory", "release_memory": "ReleaseMemory"}
CALLS_THAT_WAIT = {"acquire", "reserve"}


class ClientService:
    def __init__(self, coordinator: Coordinator, guard: RpcGuard):
        self._coordinator = coordinator
        self._guard = guard

    async def Attach(self, request: client_pb2.AttachRequest, context) -> client_pb2.AttachReply:
        return self._coordinator.attach(request)

    async def Detach(self, request: client_pb2.DetachRequest, context) -> client_pb2.DetachReply:
        self._coordinator.session(request.client_id)  # unknown -> NOT_FOUND
        self._coordinator.detach(request.client_id, "Detach requested")
        return client_pb2.DetachReply()

    async def AcquireToken(self, request: client_pb2.AcquireTokenRequest, context) -> client_pb2.AcquireTokenReply:
        return await settled(self._acquire_start(request))

    def _acquire_start(self, request: client_pb2.AcquireTokenRequest):
        """The reply if decided at once, else a coroutine to await."""
        if request.lease_if_free:
            return self._coordinator.lease_if_free(request.client_id)
        return self._coordinator.acquire_start(request.client_id, request.timeout_ms, request.work_item_us,
                                               doorbell_rang=request.doorbell_rang)

    async def ReleaseToken(self, request: client_pb2.ReleaseTokenRequest, context) -> client_pb2.ReleaseTokenReply:
        return self._release_token(request)

    def _release_token(self, request: client_pb2.ReleaseTokenRequest) -> client_pb2.ReleaseTokenReply:
        return self._coordinator.release_token(request)

    async def RenewToken(self, request: client_pb2.RenewTokenRequest, context) -> client_pb2.RenewTokenReply:
        return self._renew_token(request)

    def _renew_token(self, request: client_pb2.RenewTokenRequest) -> client_pb2.RenewTokenReply:
        return self._coordinator.renew_token(request)

    async def ReserveMemory(self, request: client_pb2.ReserveMemoryRequest, context) -> client_pb2.ReserveMemoryReply:
        return await settled(self._reserve_start(request))

    def _reserve_start(self, request: client_pb2.ReserveMemoryRequest):
        return self._coordinator.reserve_memory_start(request.client_id, request.bytes)

    async def ReleaseMemory(self, request: client_pb2.ReleaseMemoryRequest, context) -> client_pb2.ReleaseMemoryReply:
        return self._release_memory(request)

    def _release_memory(self, request: client_pb2.ReleaseMemoryRequest) -> client_pb2.ReleaseMemoryReply:
        return self._coordinator.release_memory(request.client_id, request.bytes)

    async def GetMemoryInfo(self, request: client_pb2.GetMemoryInfoRequest, context) -> client_pb2.GetMemoryInfoReply:
        return self._coordinator.memory_info(request.client_id)

    def start_call(self, call: client_pb2.ClientCall, waiting: int):
        """One ClientCall, served as its unary method would be, up to its
        first wait, synchronously: its ClientAnswer when decided at once
        (every release and renewal, an uncontended grant, a reservation
        that fits), else a coroutine that waits for it (to be run beside the
        reading of later calls). A call's own failure is its answer, with
        the unary call's status; a call that breaks the stream's rules
        (names no call; more than max-streams-per-connection waiting, given
        `waiting` already) raises RpcFailure, and the stream ends.
        Both transports serve their calls here (Calls, and client.calls in
        tokend/calls_socket.py): one set of rules."""
        kind = call.WhichOneof("call")
        if kind is None:
            raise RpcFailure(grpc.StatusCode.INVALID_ARGUMENT,
                             f"ClientCall {call.call_id} names no call; one of {sorted(STREAM_CALLS)} is needed")
        if kind in CALLS_THAT_WAIT:
            # As many as one connection may have unary calls open.
            limit = self._coordinator.limits.max_streams_per_connection
            if waiting >= limit:
                raise RpcFailure(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                 f"ClientCall {call.call_id}: {waiting} calls already wait on this "
                                 f"stream; at most {limit} (max-streams-per-connection)")
        try:
            started = self._starts[kind](self, getattr(call, kind))
        except Exception as exc:   # answered with its status, as from the handler
            return self._failed_answer(call, kind, exc)
        if isinstance(started, CoroutineType):
            return self._answer_when_decided(call, kind, started)
        return client_pb2.ClientAnswer(call_id=call.call_id, **{kind: started})

    # ClientCall's oneof -> its synchronous start (what the unary method awaits).
    _starts = {"acquire": _acquire_start, "reserve": _reserve_start, "release": _release_token,
               "renew": _renew_token, "release_memory": _release_memory}

    async def _answer_when_decided(self, call: client_pb2.ClientCall, kind: str, waiting) -> client_pb2.ClientAnswer:
        """A call that waits (CALLS_THAT_WAIT), bounded by its wait_ms."""
        try:
            if call.wait_ms:
                try:
                    reply = await asyncio.wait_for(waiting, call.wait_ms / 1000)
                except asyncio.TimeoutError:
                    raise RpcFailure(grpc.StatusCode.DEADLINE_EXCEEDED,
                                     f"{STREAM_CALLS[kind]} not answered within the call's wait_ms {call.wait_ms}"
                                     ) from None
            else:
                reply = await waiting
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return self._failed_answer(call, kind, exc)
        return client_pb2.ClientAnswer(call_id=call.call_id, **{kind: reply})

    def _failed_answer(self, call: client_pb2.ClientCall, kind: str, exc: Exception) -> client_pb2.ClientAnswer:
        """The call's status, as the unary call would end (counted and logged)."""
        code, message = self._guard.failure(STREAM_CALLS[kind], exc)
        return client_pb2.ClientAnswer(call_id=call.call_id, code=code.value[0], message=message)

    async def Calls(self, read, context) -> None:
        """The gRPC stream: each ClientCall is served by start_call. Calls
        decided at once are answered in order as they come; one that waits
        runs beside the reading. Answers are written one at a time (grpc
        allows one write in flight)."""
        writing = asyncio.Lock()
        waiting: set[asyncio.Task] = set()

        async def write_when_decided(answer_coroutine) -> None:
            answer = await answer_coroutine
            async with writing:
                await context.write(answer)

        try:
            while (call := await read()) is not None:
                started = self.start_call(call, len(waiting))
                if isinstance(started, client_pb2.ClientAnswer):
                    async with writing:
                        await context.write(started)
                    continue
                task = asyncio.create_task(write_when_decided(started))
                waiting.add(task)
                task.add_done_callback(waiting.discard)
            if waiting:
                await asyncio.wait(set(waiting))
        finally:
            for task in waiting:
                task.cancel()

    async def Control(self, request: client_pb2.ControlRequest, context):
        coordinator = self._coordinator
        client_id = request.client_id
        session = coordinator.open_control(client_id)
        # However the RPC ends (client exit, kill -9 -> EOF -> cancel), the
        # client is detached at once: the callback covers a generator that
        # is abandoned while suspended, the finally a normal end.
        context.add_done_callback(lambda _ctx: coordinator.detach(client_id, "Control stream ended"))
        try:
            yield client_pb2.ControlEvent(ready=client_pb2.Ready())
            while True:
                item = await session.control_queue.get()
                if coordinator.is_end_of_stream(item):
                    return
                # Scheduled now, they run once this step has handed the event
                # to the transport (the write starts first).
                for after_send in item.after_send:
                    asyncio.get_running_loop().call_soon(after_send)
                yield item.event
        finally:
            coordinator.detach(client_id, "Control stream ended")
