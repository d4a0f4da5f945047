"""gslice.v1.AdminService: the operator's, on admin.sock (owner only)."""
from __future__ import annotations

import asyncio
import time

from gslice.v1 import admin_pb2

from .coordinator import Coordinator


class AdminService:
    def __init__(self, coordinator: Coordinator):
        self._coordinator = coordinator
        self._changes = asyncio.Lock()  # one group-table change (and its save) at a time

    async def CreateGroup(self, request: admin_pb2.CreateGroupRequest, context) -> admin_pb2.CreateGroupReply:
        async with self._changes:
            return await self._coordinator.create_group(request.group)

    async def UpdateGroup(self, request: admin_pb2.UpdateGroupRequest, context) -> admin_pb2.Group:
        async with self._changes:
            return await self._coordinator.update_group(request)

    async def DeleteGroup(self, request: admin_pb2.DeleteGroupRequest, context) -> admin_pb2.DeleteGroupReply:
        async with self._changes:
            await self._coordinator.delete_group(request.name)
        return admin_pb2.DeleteGroupReply()

    async def ListGroups(self, request: admin_pb2.ListGroupsRequest, context) -> admin_pb2.ListGroupsReply:
        return admin_pb2.ListGroupsReply(groups=self._coordinator.list_groups())

    async def GetStatus(self, request: admin_pb2.GetStatusRequest, context) -> admin_pb2.GpuStatus:
        return self._coordinator.status()

    async def GetGroupSecret(self, request: admin_pb2.GetGroupSecretRequest, context) -> admin_pb2.GetGroupSecretReply:
        return admin_pb2.GetGroupSecretReply(secret=self._coordinator.group_secret(request.name))

    async def RemoveClient(self, request: admin_pb2.RemoveClientRequest, context) -> admin_pb2.RemoveClientReply:
        self._coordinator.remove_client(request.public_id, request.reason)
        return admin_pb2.RemoveClientReply()

    async def Watch(self, request: admin_pb2.WatchRequest, context):
        events = self._coordinator.events
        queue = events.subscribe()
        context.add_done_callback(lambda _ctx: events.unsubscribe(queue))
        try:
            # Tells the watcher it is subscribed: events after this are all seen.
            yield admin_pb2.Event(time=time.time(), kind="watch_started")
            while True:
                yield await queue.get()
        finally:
            events.unsubscribe(queue)
