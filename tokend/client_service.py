"""gslice.v1.ClientService: what every shim speaks, on client.sock. A thin
translation onto the Coordinator; errors are raised typed and mapped to
statuses by rpc_guard."""
from __future__ import annotations

import asyncio

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
        return self._coordinator.release_token(request)

    async def RenewToken(self, request: client_pb2.RenewTokenRequest, context) -> client_pb2.RenewTokenReply:
        return self._coordinator.renew_token(request)

    async def ReserveMemory(self, request: client_pb2.ReserveMemoryRequest, context) -> client_pb2.ReserveMemoryReply:
        return await self._coordinator.reserve_memory(request.client_id, request.bytes)

    def _start_at_once(self, kind: str, request):
        """A call that may wait (CALLS_THAT_WAIT) up to its first wait: its
        reply if decided at once, else a coroutine that waits for it."""
        if kind == "acquire":
            return self._acquire_start(request)
        return self._coordinator.reserve_memory_start(request.client_id, request.bytes)

    async def ReleaseMemory(self, request: client_pb2.ReleaseMemoryRequest, context) -> client_pb2.ReleaseMemoryReply:
        return self._coordinator.release_memory(request.client_id, request.bytes)

    async def GetMemoryInfo(self, request: client_pb2.GetMemoryInfoRequest, context) -> client_pb2.GetMemoryInfoReply:
        return self._coordinator.memory_info(request.client_id)

    async def Calls(self, read, context) -> None:
        """Each ClientCall is served as its unary method would be. Calls
        that never wait are answered in order as they come; one that may
        wait runs beside the reading. Answers are written one at a time
        (grpc allows one write in flight)."""
        writing = asyncio.Lock()
        waiting: set[asyncio.Task] = set()

        async def answer(call: client_pb2.ClientCall, kind: str, started=None) -> None:
            """`started`: what the call's start returned (a reply, a
            coroutine that waits for one, or what it raised); None: the
            unary handler serves it."""
            name = STREAM_CALLS[kind]
            try:
                if isinstance(started, Exception):
                    raise started
                serve = getattr(self, name)(getattr(call, kind), context) if started is None else started
                if not asyncio.iscoroutine(serve):
                    reply = serve   # decided at once
                elif kind in CALLS_THAT_WAIT and call.wait_ms:
                    try:
                        reply = await asyncio.wait_for(serve, call.wait_ms / 1000)
                    except asyncio.TimeoutError:
                        raise RpcFailure(grpc.StatusCode.DEADLINE_EXCEEDED,
                                         f"{name} not answered within the call's wait_ms {call.wait_ms}") from None
                else:
                    reply = await serve
                client_answer = client_pb2.ClientAnswer(call_id=call.call_id, **{kind: reply})
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the call's status, as the unary call would end
                code, message = self._guard.failure(name, exc)
                client_answer = client_pb2.ClientAnswer(call_id=call.call_id, code=code.value[0], message=message)
            async with writing:
                await context.write(client_answer)

        try:
            while (call := await read()) is not None:
                kind = call.WhichOneof("call")
                if kind is None:
                    raise RpcFailure(grpc.StatusCode.INVALID_ARGUMENT,
                                     f"ClientCall {call.call_id} names no call; one of {sorted(STREAM_CALLS)} is needed")
                if kind in CALLS_THAT_WAIT:
                    # As many as one connection may have unary calls open.
                    limit = self._coordinator.limits.max_streams_per_connection
                    if len(waiting) >= limit:
                        raise RpcFailure(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                         f"ClientCall {call.call_id}: {len(waiting)} calls already wait on this "
                                         f"stream; at most {limit} (max-streams-per-connection)")
                    # Up to its first wait at once: decided then (an
                    # uncontended grant, a reservation that fits), it is
                    # answered in order with no task; else it waits beside
                    # the later calls.
                    try:
                        started = self._start_at_once(kind, getattr(call, kind))
                    except Exception as exc:   # answered with its status, as from the handler
                        started = exc
                    if not asyncio.iscoroutine(started):
                        await answer(call, kind, started)
                        continue
                    task = asyncio.create_task(answer(call, kind, started))
                    waiting.add(task)
                    task.add_done_callback(waiting.discard)
                else:
                    await answer(call, kind)
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
