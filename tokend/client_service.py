"""gslice.v1.ClientService: what every shim speaks, on client.sock. A thin
translation onto the Coordinator; errors are raised typed and mapped to
statuses by rpc_guard."""
from __future__ import annotations

import asyncio

from gslice.v1 import client_pb2

from .coordinator import Coordinator


class ClientService:
    def __init__(self, coordinator: Coordinator):
        self._coordinator = coordinator

    async def Attach(self, request: client_pb2.AttachRequest, context) -> client_pb2.AttachReply:
        return self._coordinator.attach(request)

    async def Detach(self, request: client_pb2.DetachRequest, context) -> client_pb2.DetachReply:
        self._coordinator.session(request.client_id)  # unknown -> NOT_FOUND
        self._coordinator.detach(request.client_id, "Detach requested")
        return client_pb2.DetachReply()

    async def AcquireToken(self, request: client_pb2.AcquireTokenRequest, context) -> client_pb2.AcquireTokenReply:
        if request.lease_if_free:
            return self._coordinator.lease_if_free(request.client_id)
        return await self._coordinator.acquire(request.client_id, request.timeout_ms, request.work_item_us,
                                               doorbell_rang=request.doorbell_rang)

    async def ReleaseToken(self, request: client_pb2.ReleaseTokenRequest, context) -> client_pb2.ReleaseTokenReply:
        return self._coordinator.release_token(request)

    async def RenewToken(self, request: client_pb2.RenewTokenRequest, context) -> client_pb2.RenewTokenReply:
        return self._coordinator.renew_token(request)

    async def ReserveMemory(self, request: client_pb2.ReserveMemoryRequest, context) -> client_pb2.ReserveMemoryReply:
        return await self._coordinator.reserve_memory(request.client_id, request.bytes)

    async def ReleaseMemory(self, request: client_pb2.ReleaseMemoryRequest, context) -> client_pb2.ReleaseMemoryReply:
        return self._coordinator.release_memory(request.client_id, request.bytes)

    async def GetMemoryInfo(self, request: client_pb2.GetMemoryInfoRequest, context) -> client_pb2.GetMemoryInfoReply:
        return self._coordinator.memory_info(request.client_id)

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
