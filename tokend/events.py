"""Fan-out of daemon events to Watch streams. Each watcher has a bounded
queue; a slow watcher loses its oldest events instead of ever blocking the
event loop (publishing is synchronous and O(watchers))."""
from __future__ import annotations

import asyncio
import time
from typing import Callable

from gslice.v1 import admin_pb2

WATCH_QUEUE_SIZE = 1024


class EventHub:
    def __init__(self, queue_size: int = WATCH_QUEUE_SIZE, on_drop: Callable[[], None] | None = None):
        self._queue_size = queue_size
        self._watchers: set[asyncio.Queue] = set()
        self._on_drop = on_drop

    def publish(self, kind: str, group: str = "", client_id: str = "", message: str = "") -> admin_pb2.Event:
        event = admin_pb2.Event(time=time.time(), kind=kind, group=group, client_id=client_id, message=message)
        for queue in self._watchers:
            if queue.full():
                queue.get_nowait()
                if self._on_drop:
                    self._on_drop()
            queue.put_nowait(event)
        return event

    def subscribe(self) -> asyncio.Queue:
        queue: asyncio.Queue = asyncio.Queue(maxsize=self._queue_size)
        self._watchers.add(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue) -> None:
        self._watchers.discard(queue)

    @property
    def watcher_count(self) -> int:
        return len(self._watchers)
