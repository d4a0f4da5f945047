"""ClientService.Calls without a daemon: how many calls may wait on one
stream, and what happens to them when the stream ends."""
from __future__ import annotations

import asyncio

import grpc
import pytest

from gslice.v1 import client_pb2
from tokend.client_service import ClientService
from tokend.limits import Limits
from tokend.rpc_guard import RpcFailure, RpcGuard


class AcquiresNeverGranted:
    """The coordinator's part that Calls uses: acquires that wait until cancelled."""

    def __init__(self, limits: Limits):
        self.limits = limits
        self.waiting = 0
        self.cancelled = 0

    def acquire_start(self, client_id, timeout_ms, work_item_us, doorbell_rang=False):
        return self.acquire(client_id, timeout_ms, work_item_us, doorbell_rang)   # never granted at once

    async def acquire(self, client_id, timeout_ms, work_item_us, doorbell_rang=False):
        self.waiting += 1
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise


class Context:
    def __init__(self):
        self.written = []

    async def write(self, message):
        self.written.append(message)


def acquire_call(call_id: int) -> client_pb2.ClientCall:
    return client_pb2.ClientCall(call_id=call_id, acquire=client_pb2.AcquireTokenRequest(client_id=f"c{call_id}"))


def run_calls(coordinator, calls):
    service = ClientService(coordinator, RpcGuard(lambda method, code: None))
    pending = list(calls)

    async def read():
        await asyncio.sleep(0)  # the previous call's task starts first
        return pending.pop(0) if pending else None

    async def main():
        context = Context()
        # (Without the bound, the stream would wait for its calls forever.)
        await asyncio.wait_for(service.Calls(read, context), 5)
        return context
    return asyncio.run(main())


def test_calls_that_wait_are_bounded_per_stream_and_cancelled_when_it_ends():
    coordinator = AcquiresNeverGranted(Limits(max_streams_per_connection=4))
    with pytest.raises(RpcFailure) as refused:
        run_calls(coordinator, [acquire_call(i) for i in range(1, 6)])
    assert refused.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert refused.value.message == ("ClientCall 5: 4 calls already wait on this stream; "
                                     "at most 4 (max-streams-per-connection)")
    assert (coordinator.waiting, coordinator.cancelled) == (4, 4), "the stream's waiting calls outlived it"


def test_a_stream_within_the_bound_keeps_its_calls_waiting_until_they_end():
    coordinator = AcquiresNeverGranted(Limits(max_streams_per_connection=4))

    async def main():
        service = ClientService(coordinator, RpcGuard(lambda method, code: None))
        calls = [acquire_call(i) for i in range(1, 5)]
        ended = asyncio.Event()

        async def read():
            if calls:
                return calls.pop(0)
            await ended.wait()
            return None
        serving = asyncio.create_task(service.Calls(read, Context()))
        for _ in range(20):
            await asyncio.sleep(0)
        assert coordinator.waiting == 4 and not serving.done()
        serving.cancel()  # the client went away
        with pytest.raises(asyncio.CancelledError):
            await serving
        assert coordinator.cancelled == 4
    asyncio.run(main())
