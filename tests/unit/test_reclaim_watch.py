"""The reclaim watch (tokend/daemon.py) with NVML's process list hanging,
as it can during an Xid or a GPU reset: pending reclaims still end at
their timeout. Before, the watch waited for the query, and the departed
process's memory stayed charged to its group for as long as NVML hung."""
from __future__ import annotations

import asyncio
import threading
import time
from types import SimpleNamespace

from gslice.v1 import admin_pb2, client_pb2
from tokend import daemon as daemon_module
from tokend.coordinator import Coordinator
from tokend.daemon import TokenDaemon
from tokend.gpu_discovery import GpuInfo
from tokend.metrics import TokendMetrics
from tokend.scheduler import SchedulerConfig
from tokend.state_store import GroupStore

MIB = 1 << 20
RECLAIM_TIMEOUT = 0.3


def test_a_hung_nvml_query_never_holds_back_a_reclaim_timeout(tmp_path, monkeypatch):
    unhang = threading.Event()

    def hung_list(uuid):
        unhang.wait(10)
        return []

    monkeypatch.setattr(daemon_module, "list_gpu_processes", hung_list)

    async def scenario():
        store = GroupStore(tmp_path)
        store.prepare()
        coordinator = Coordinator(GpuInfo(0, "GPU-x", "fake", 1 << 34), SchedulerConfig(), store,
                                  TokendMetrics("GPU-x"), reclaim_timeout=RECLAIM_TIMEOUT)
        coordinator.bind_loop(asyncio.get_running_loop())
        secret = (await coordinator.create_group(admin_pb2.Group(name="g", request=0.5, limit=1.0,
                                                                 memory_quota=1 << 30))).secret
        client = coordinator.attach(client_pb2.AttachRequest(group="g", secret=secret, pid=4242)).client_id
        assert (await coordinator.reserve_memory(client, 64 * MIB)).granted
        watcher = TokenDaemon.__new__(TokenDaemon)
        watcher.options = SimpleNamespace(fake_gpu=None)  # NVML is there (and hangs)
        watch = asyncio.ensure_future(watcher._watch_reclaims(coordinator))
        departed = time.monotonic()
        coordinator.detach(client, "process exited")
        while coordinator.ledger.group_used("g") and time.monotonic() - departed < 3.0:
            await asyncio.sleep(0.01)
        back = time.monotonic() - departed
        unhang.set()
        watch.cancel()
        store.close()
        return back

    back = asyncio.run(scenario())
    # Back at the timeout (plus the watch's patience with a slow query), not when NVML returns.
    assert RECLAIM_TIMEOUT <= back <= RECLAIM_TIMEOUT + daemon_module.RECLAIM_QUERY_PATIENCE + 0.3, back
