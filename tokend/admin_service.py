"""gslice.v1.AdminService: the operator's, on admin.sock (owner only)."""
from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

from gslice.v1 import admin_pb2

from .coordinator import Coordinator


class AdminService:
    def __init__(self, coordinator: Coordinator):
        self._coordinator = coordinator
        self._changes = asyncio.Lock()  # one group-table change (and its save) at a time

    async def _change(self, change: Callable[[], Awaitable]):
        """Run one group-table change to its end, even if its caller goes
        away (a deadline, Ctrl-C): cancelled halfway, its save would still
        land on its worker thread while the daemon forgot the change, and the
        next change's save could land before it. The next change starts only
        after this one has taken effect or been refused."""
        async with self._changes:
            task = asyncio.ensure_future(change())
            try:
                return await asyncio.shield(task)
            except asyncio.CancelledError:
                with contextlib.suppress(BaseException):
                    await task
                raise

    async def CreateGroup(self, request: admin_pb2.CreateGroupRequest, context) -> admin_pb2.CreateGroupReply:
        return await self._change(lambda: self._coordinator.create_group(request.group))

    async def UpdateGroup(self, request: admin_pb2.UpdateGroupRequest, context) -> admin_pb2.Group:
        return await self._change(lambda: self._coordinator.update_group(request))

    async def DeleteGroup(self, request: admin_pb2.DeleteGroupRequest, context) -> admin_pb2.DeleteGroupReply:
        await self._change(lambda: self._coordinator.delete_group(request.name))
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
