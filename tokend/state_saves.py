"""What the coordinator keeps on disk besides the group table, and when it
writes it: the pending reclaims (memory of departed processes the driver
has not freed yet) and each group's charges. A part of Coordinator
(tokend/coordinator.py), which owns the scheduler, ledger and stores used
here.

- Pending reclaims are written whenever one begins or ends: a restart must
  not hand out memory the driver still holds.
- Charges are written every ACCOUNTING_SAVE_SECONDS by the daemon's loop
  (when any changed) and at stop: a crash loses at most that much.

Both are written on a worker thread (fsync on a busy disk must not stall
token grants), each table with a generation taken when it was read, so a
slow older write never lands after a newer one (state_store._WritesInOrder).
A failed write is logged and tried again at the next change or period."""
from __future__ import annotations

import asyncio
import itertools
import logging
import time

from .errors import GsliceError
from .memory_ledger import PendingReclaim
from .scheduler import GroupAccounting

log = logging.getLogger("gslice.tokend")


class TableWrites:
    """Numbered writes of one table to its store, now or on a worker thread."""

    def __init__(self, store, what: str):
        self.store = store
        self.what = what
        self._generations = itertools.count(1)

    def save_now(self, table) -> bool:
        return self._write(table, next(self._generations))

    async def save(self, table) -> bool:
        return await asyncio.to_thread(self._write, table, next(self._generations))

    def _write(self, table, generation: int) -> bool:
        try:
            self.store.save(table, generation)
            return True
        except OSError as exc:
            log.error("cannot save %s to %s: %s", self.what, self.store.path, exc)
            return False


class StateSaves:
    """Coordinator's saving and restoring of pending reclaims and charges."""

    def _init_state_saves(self, reclaim_store, accounting_store) -> None:
        self.reclaim_store = reclaim_store
        self.accounting_store = accounting_store
        self._reclaim_writes = TableWrites(reclaim_store, "pending reclaims")
        self._accounting_writes = TableWrites(accounting_store, "group charges")
        self._accounting_saved_at: tuple[int, float] | None = None  # (decisions, charges) at the last save
        self._reclaims_dirty = False
        self._reclaims_saving = False

    # -------------------------------------------------------- pending reclaims
    def _reclaims_changed(self) -> None:
        """A reclaim began or ended: wake the watch, persist the table."""
        self.reclaims_changed.set()
        self._reclaims_dirty = True
        if self._loop is None:
            self._save_reclaims_now()
        elif not self._reclaims_saving:
            self._reclaims_saving = True
            self._loop.create_task(self._save_reclaims())

    async def _save_reclaims(self) -> None:
        """Writes the latest table until none is newer (one writer)."""
        try:
            while self._reclaims_dirty:
                self._reclaims_dirty = False
                await self._reclaim_writes.save(self.ledger.pending_reclaims())
        finally:
            self._reclaims_saving = False

    def _save_reclaims_now(self) -> None:
        self._reclaims_dirty = False
        self._reclaim_writes.save_now(self.ledger.pending_reclaims())

    def _restore_reclaims(self) -> None:
        entries, note = self.reclaim_store.load()
        if note:
            log.warning("%s", note)
        for item in entries:
            if item["group"] not in self.secrets:
                log.warning("pending reclaim of pid %d (%d bytes) names group %r, which no longer exists; dropped",
                            item["pid"], item["bytes"], item["group"])
                continue
            self.ledger.restore_pending(PendingReclaim(
                item["group"], item["pid"], item["bytes"], item["client"], float(item["since"]),
                float(item["since_wall"]), float(item["last_listed"]), item["seen_listed"], item["lists_since"]))
            self._publish_memory(item["group"])
            log.info("group %s: memory of pid %d (%d bytes) still held from before the restart, until the driver "
                     "frees it", item["group"], item["pid"], item["bytes"])

    # ------------------------------------------------------------------ charges
    def _restore_accounting(self, now: float) -> None:
        """The previous daemon's charges, back on the groups it had (see
        AccountingStore): a capped group's window spans the restart."""
        table, note = self.accounting_store.load()
        if note:
            log.warning("%s", note)
        for name, entry in table.items():
            if name not in self.secrets:
                continue  # deleted while no daemon kept the file (or the table was restored from a backup)
            try:
                accounting = GroupAccounting(tuple(tuple(i) for i in entry["intervals"]), float(entry["pace_until"]),
                                             float(entry["charged_total"]), entry["tokens_granted"],
                                             entry["preemptions"], entry["expiries"])
                self.scheduler.restore_accounting(name, accounting, now)
            except (KeyError, TypeError, ValueError, GsliceError) as exc:  # a hand edit must not stop the start
                log.warning("charges of group %r in %s are unusable (%s); the group starts afresh",
                            name, self.accounting_store.path, exc)

    def _accounting_table(self, now: float) -> dict[str, GroupAccounting]:
        return {spec.name: self.scheduler.accounting(spec.name, now) for spec in self.scheduler.groups()}

    async def save_accounting(self) -> None:
        """Every ACCOUNTING_SAVE_SECONDS (the daemon's loop): the charges, if
        any were made or decided since the last save."""
        changed_since = (self.scheduler.decisions, sum(self.scheduler.charged_total.values()))
        if changed_since == self._accounting_saved_at:
            return
        if await self._accounting_writes.save(self._accounting_table(time.monotonic())):
            self._accounting_saved_at = changed_since  # else tried again in a second

    def _save_accounting_now(self) -> None:
        self._accounting_writes.save_now(self._accounting_table(time.monotonic()))
