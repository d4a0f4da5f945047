"""The pending-reclaims file (tokend/state_store.py ReclaimStore) never goes
back in time: saves run on worker threads while the loop goes on, and at
shutdown a last save runs on the loop itself. An older table written after
a newer one would hand out memory the driver has not freed (the next daemon
believes the reclaim ended)."""
from __future__ import annotations

import json
import threading

from gslice.tokend.memory_ledger import PendingReclaim
from gslice.tokend.state_store import ReclaimStore


def _pending(pid: int) -> PendingReclaim:
    return PendingReclaim("a", pid, 1 << 20, "c", 1.0, 1.0, 1.0, False, 0)


def _stored_pids(store: ReclaimStore) -> list[int]:
    return [item["pid"] for item in json.loads(store.path.read_text())["pending"]]


def test_a_table_older_than_the_one_written_is_dropped(tmp_path):
    store = ReclaimStore(tmp_path)
    store.save([_pending(1), _pending(2)], generation=2)  # shutdown's final save: both reclaims
    store.save([_pending(1)], generation=1)  # a worker's save, taken earlier, landing late
    assert _stored_pids(store) == [1, 2]
    store.save([], generation=3)
    assert _stored_pids(store) == []


def test_a_save_in_flight_on_a_worker_finishes_before_the_final_one_starts(tmp_path, monkeypatch):
    """The worker is inside its write when shutdown saves: the final table
    must land last, whichever thread gets the lock first."""
    store = ReclaimStore(tmp_path)
    import gslice.tokend.state_store as state_store
    real_write = state_store.write_atomically
    inside, go_on = threading.Event(), threading.Event()

    def slow_first_write(path, data, **kwargs):
        if not inside.is_set():
            inside.set()
            go_on.wait(5)
        real_write(path, data, **kwargs)

    monkeypatch.setattr(state_store, "write_atomically", slow_first_write)
    worker = threading.Thread(target=store.save, args=([_pending(1)], 1))
    worker.start()
    assert inside.wait(5)
    final = threading.Thread(target=store.save, args=([_pending(1), _pending(2)], 2))
    final.start()
    go_on.set()
    worker.join(5)
    final.join(5)
    assert _stored_pids(store) == [1, 2]
