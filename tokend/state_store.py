"""Persists the group table (with secrets) in STATE_DIR/groups.json.

Writes are atomic and durable: a temp file in the same directory, fsync,
rename over the old file, fsync of the directory; so a crash leaves either
the old or the new table, never a torn one. File 0600, directory 0700:
the file holds the group secrets.

The previous good table is kept as groups.json.bak (each save copies the
current file there first). At start-up, a corrupt groups.json falls back to
the backup (the corrupt file is kept beside as groups.json.corrupt-<time>)
and leftover temp files of an interrupted save are removed: a daemon that
refuses to start leaves every process on the GPU waiting.

One daemon per state directory: prepare() takes an exclusive lock on
STATE_DIR/tokend.lock, held for the daemon's life, so a second daemon
pointed at the same directory (two GPUs sharing the default --state-dir)
is refused instead of overwriting the first one's table with its own."""
from __future__ import annotations

import array
import base64
import fcntl
import json
import logging
import math
import os
import struct
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from gslice.atomic_file import write_atomically

FORMAT_VERSION = 1
DAEMON_LOSS_WAIT = 1  # gslice.v1.DaemonLossPolicy; the default for old files
_TEMP_PREFIX = ".groups."  # write_atomically's temp names: .groups.json.*.tmp, .groups.json.bak.*.tmp
LOCK_FILE_NAME = "tokend.lock"

log = logging.getLogger("gslice.tokend")


class StateError(Exception):
    """The state directory or file is unusable; the message names the path."""


@dataclass(frozen=True)
class StoredGroup:
    name: str
    request: float
    limit: float
    memory_quota: int
    priority: int
    secret: str
    labels: dict[str, str] = field(default_factory=dict)  # who the group is for (e.g. a Kubernetes claim)
    on_daemon_loss: int = DAEMON_LOSS_WAIT

    @classmethod
    def from_json(cls, item: dict, path: Path) -> "StoredGroup":
        try:
            group = cls(
                name=str(item["name"]),
                request=float(item["request"]),
                limit=float(item["limit"]),
                memory_quota=int(item["memory_quota"]),
                priority=int(item["priority"]),
                secret=str(item["secret"]),
                labels=dict(item.get("labels") or {}),
                on_daemon_loss=int(item.get("on_daemon_loss", DAEMON_LOSS_WAIT)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise StateError(f"group entry {item!r} in {path} is malformed ({exc!r})") from None
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in group.labels.items()):
            raise StateError(f"group entry {item!r} in {path} has labels that are not strings")
        if not group.name or not group.secret:
            raise StateError(f"group entry {item!r} in {path} has an empty name or secret")
        return group

    def to_json(self) -> dict:
        data = {
            "name": self.name, "request": self.request, "limit": self.limit,
            "memory_quota": self.memory_quota, "priority": self.priority, "secret": self.secret,
            "on_daemon_loss": self.on_daemon_loss,
        }
        if self.labels:  # absent when empty: files stay as older daemons wrote them
            data["labels"] = dict(sorted(self.labels.items()))
        return data


class GroupStore:
    def __init__(self, state_dir: str | os.PathLike):
        self.state_dir = Path(state_dir)
        self.path = self.state_dir / "groups.json"
        self.backup_path = self.state_dir / "groups.json.bak"
        self._loaded: dict[str, StoredGroup] = {}
        self._lock_fd: int | None = None

    def prepare(self) -> None:
        """Create the state directory (0700) if missing; tighten it if it
        exists; take its lock (StateError if another daemon holds it); then
        remove what an interrupted save left."""
        try:
            self.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(self.state_dir, 0o700)
        except OSError as exc:
            raise StateError(f"cannot use state directory {self.state_dir}: {exc.strerror}") from None
        self._lock_state_dir()
        leftovers = [*self.state_dir.glob(f"{_TEMP_PREFIX}*.tmp"), *self.state_dir.glob(".reclaims.json.*.tmp"),
                     *self.state_dir.glob(".accounting.json.*.tmp")]
        for leftover in leftovers:  # from a save a crash interrupted
            try:
                leftover.unlink()
                log.info("removed %s, left by an interrupted save", leftover)
            except OSError as exc:
                log.warning("cannot remove leftover %s: %s", leftover, exc.strerror)

    def _lock_state_dir(self) -> None:
        """flock, not a pid file: the kernel drops it when the daemon dies,
        however it dies, so a crash never leaves the directory locked."""
        path = self.state_dir / LOCK_FILE_NAME
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise StateError(f"cannot open the state lock {path}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise StateError(f"state directory {self.state_dir} is in use by another tokend (pid {holder}): "
                             "give each daemon its own --state-dir (one per GPU)") from None
        except OSError as exc:
            os.close(fd)
            raise StateError(f"cannot lock {path}: {exc.strerror}") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

    def close(self) -> None:
        """Release the state directory's lock (the daemon is stopping)."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def load_or_recover(self) -> tuple[list[StoredGroup], str]:
        """The stored groups and a note for the operator ("" when all is well).
        A corrupt table is moved aside and the backup loaded instead; with no
        usable backup either, tokend starts with no groups (and says so, at
        every start until a group is created again)."""
        try:
            groups = self.load()
            self._loaded = {g.name: g for g in groups}
            return groups, self._note_of_a_table_lost_before()
        except StateError as exc:
            problem = str(exc)
        kept = self.path.with_name(f"groups.json.corrupt-{time.strftime('%Y%m%dT%H%M%S')}")
        try:
            os.replace(self.path, kept)
        except OSError as exc:
            raise StateError(f"{problem}; and it cannot be moved aside: {exc.strerror}") from None
        try:
            groups = self._load_file(self.backup_path) if self.backup_path.exists() else None
        except StateError as exc:
            groups, problem = None, f"{problem}; the backup is unusable too: {exc}"
        if groups is None:
            self._loaded = {}
            return [], f"{problem}; moved to {kept}; started with no groups"
        write_atomically(self.path, self.backup_path.read_bytes(), mode=0o600, sync_dir=True)
        self._loaded = {g.name: g for g in groups}
        return groups, f"{problem}; moved to {kept}; restored the last good table from {self.backup_path}"

    def _note_of_a_table_lost_before(self) -> str:
        """No table, but a corrupt one moved aside by an earlier start: the
        groups were lost then, and a restart must not make that look like a
        fresh node."""
        if self.path.exists():
            return ""
        kept = sorted(self.state_dir.glob("groups.json.corrupt-*"))
        if not kept:
            return ""
        return (f"no group table: a corrupt {self.path.name} was moved to {kept[-1]} by an earlier start, "
                "which started with no groups; create the groups again (or restore them from that file)")

    def stored(self, name: str) -> StoredGroup | None:
        """The group as the file held it at start-up (a flagged group keeps
        its stored values on disk until the operator sets them)."""
        return self._loaded.get(name)

    def load(self) -> list[StoredGroup]:
        """The stored groups; [] when there is no file yet."""
        return self._load_file(self.path)

    def _load_file(self, path: Path) -> list[StoredGroup]:
        try:
            text = path.read_text()
        except FileNotFoundError:
            return []
        except (OSError, UnicodeDecodeError) as exc:
            raise StateError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise StateError(
                f"{path} is corrupt (not JSON: {exc}); fix or move it away to start with no groups"
            ) from None
        if not isinstance(data, dict) or data.get("version") != FORMAT_VERSION or not isinstance(data.get("groups"), list):
            raise StateError(
                f"{path} is not a gslice group table version {FORMAT_VERSION} "
                "(expected {\"version\": 1, \"groups\": [...]}); fix or move it away"
            )
        groups = []
        for item in data["groups"]:
            if not isinstance(item, dict):
                raise StateError(f"group entry {item!r} in {path} is not an object")
            groups.append(StoredGroup.from_json(item, path))
        names = [g.name for g in groups]
        if len(set(names)) != len(names):
            raise StateError(f"{path} names a group twice: {sorted(names)}")
        return groups

    def save(self, groups: list[StoredGroup]) -> None:
        data = {"version": FORMAT_VERSION, "groups": [g.to_json() for g in sorted(groups, key=lambda g: g.name)]}
        if self.path.exists():
            # The current table is good (loaded or written by us): keep it as the backup.
            write_atomically(self.backup_path, self.path.read_bytes(), mode=0o600)
        write_atomically(self.path, (json.dumps(data, indent=2) + "\n").encode(), mode=0o600, sync_dir=True)


RECLAIMS_FORMAT_VERSION = 1
_BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")


def _boot_id() -> str:
    try:
        return _BOOT_ID_PATH.read_text().strip()
    except OSError:
        return ""


class _WritesInOrder:
    """One state file written from worker threads and, at shutdown, from the
    loop: each table carries the generation (increasing) at which it was
    taken, and one older than the table already written is dropped, so the
    file never goes back in time."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()
        self._written_generation = 0

    def write(self, data: dict, generation: int) -> None:
        with self._lock:
            if generation <= self._written_generation:
                return
            write_atomically(self.path, (json.dumps(data, indent=1) + "\n").encode(), mode=0o600, sync_dir=True)
            self._written_generation = generation


class ReclaimStore:
    """Persists the pending reclaims (memory of departed processes the driver
    has not freed yet, tokend/memory_ledger.py) in STATE_DIR/reclaims.json,
    so a daemon restart does not hand that memory out early. Times are
    CLOCK_MONOTONIC (time.monotonic), valid across a daemon restart on the
    same boot; the file records the boot, and after a reboot its entries are
    dropped (the GPU's memory was freed with the driver). No secrets: 0600
    like groups.json all the same."""

    def __init__(self, state_dir: str | os.PathLike):
        self.path = Path(state_dir) / "reclaims.json"
        self._writes = _WritesInOrder(self.path)

    def save(self, pending: list, generation: int) -> None:
        """`pending`: memory_ledger.PendingReclaim items, as the ledger held
        them when `generation` (increasing) was taken (see _WritesInOrder)."""
        data = {"version": RECLAIMS_FORMAT_VERSION, "boot_id": _boot_id(),
                "pending": [{"group": p.group, "pid": p.pid, "bytes": p.nbytes, "client": p.client,
                             "since": p.since, "since_wall": p.since_wall, "last_listed": p.last_listed,
                             "seen_listed": p.seen_listed, "lists_since": p.lists_since} for p in pending]}
        self._writes.write(data, generation)

    def load(self) -> tuple[list[dict], str]:
        """The stored entries (dicts with the fields save writes) and a note
        for the operator ("" when all is well). An unreadable file is
        reported and ignored: the memory it named comes back at once."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return [], ""
        except (OSError, UnicodeDecodeError) as exc:
            return [], f"cannot read {self.path} ({getattr(exc, 'strerror', None) or exc}); pending reclaims lost"
        try:
            data = json.loads(text)
            if not isinstance(data, dict) or data.get("version") != RECLAIMS_FORMAT_VERSION:
                raise ValueError(f"not a version {RECLAIMS_FORMAT_VERSION} reclaim table")
            entries = data.get("pending")
            if not isinstance(entries, list):
                raise ValueError(f"'pending' is {entries!r}, expected a list of entries")
            for item in entries:
                _check_reclaim_entry(item)
        except ValueError as exc:
            return [], f"{self.path} is unusable ({exc}); pending reclaims lost"
        if data.get("boot_id") != _boot_id():
            return [], ""  # rebooted since: the driver freed everything
        return entries, ""


_RECLAIM_FIELDS = (("group", str), ("pid", int), ("bytes", int), ("client", str), ("since", float),
                   ("since_wall", float), ("last_listed", float), ("seen_listed", bool), ("lists_since", int))


def _check_reclaim_entry(item) -> None:
    """ValueError naming the entry unless it is what ReclaimStore.save writes
    (a hand edit or a disk fault must not stop the daemon from starting)."""
    if not isinstance(item, dict):
        raise ValueError(f"entry {item!r} is not an object")
    for key, kind in _RECLAIM_FIELDS:
        value = item.get(key)
        if kind is bool:
            ok = isinstance(value, bool)
        elif kind is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        else:
            ok = isinstance(value, kind) and not isinstance(value, bool)
        if not ok:
            raise ValueError(f"entry {item!r} has no valid {key!r}")
    if item["pid"] <= 0 or item["bytes"] <= 0:
        raise ValueError(f"entry {item!r} has pid {item['pid']} and bytes {item['bytes']}: expected both > 0")


# 2: each group's intervals packed (intervals_f64le). Version 1 wrote them as
# JSON lists, about 1700 triples beside 12 ms bursts (a 10 s window);
# json.dumps(indent=1) of those on the saving thread took the GIL from the
# loop for up to 5 ms at a time, once a second, and a grant waiting behind
# it came up to 12 ms late (the H200's periodic p99 outliers, every ~85
# bursts). Packed, the save's Python work is a few hundred microseconds.
ACCOUNTING_FORMAT_VERSION = 2
_INTERVAL = struct.Struct("<3d")   # start, end, point charge (little-endian float64)


def pack_intervals(intervals) -> str:
    """(start, end, point) triples as base64 of little-endian float64s."""
    flat = array.array("d", (v for interval in intervals for v in interval))
    if sys.byteorder != "little":
        flat.byteswap()
    return base64.b64encode(flat.tobytes()).decode("ascii")


def unpack_intervals(text: str) -> list[list[float]]:
    """pack_intervals's inverse; ValueError for text that is not whole triples."""
    raw = base64.b64decode(text.encode("ascii"), validate=True)
    if len(raw) % _INTERVAL.size:
        raise ValueError(f"{len(raw)} bytes of intervals: expected a multiple of {_INTERVAL.size}")
    return [list(t) for t in _INTERVAL.iter_unpack(raw)]


class AccountingStore:
    """Persists each group's charges (scheduler.GroupAccounting) in
    STATE_DIR/accounting.json, at every stop and every second while they
    change, so a restart neither gives a capped group a fresh window nor
    resets the counters `gslice status` reports since the group was created.
    A crash loses at most the last second's charges. Times are
    CLOCK_MONOTONIC, like reclaims.json: after a reboot the window and pace
    are dropped (long past) and the counters kept."""

    def __init__(self, state_dir: str | os.PathLike):
        self.path = Path(state_dir) / "accounting.json"
        self._writes = _WritesInOrder(self.path)

    def save(self, table: dict, generation: int) -> None:
        """`table`: group name -> scheduler.GroupAccounting."""
        data = {"version": ACCOUNTING_FORMAT_VERSION, "boot_id": _boot_id(),
                "groups": {name: {"intervals_f64le": pack_intervals(a.intervals), "pace_until": a.pace_until,
                                  "charged_total": a.charged_total, "tokens_granted": a.tokens_granted,
                                  "preemptions": a.preemptions, "expiries": a.expiries}
                           for name, a in sorted(table.items())}}
        self._writes.write(data, generation)

    def load(self) -> tuple[dict[str, dict], str]:
        """group name -> the fields save writes (intervals empty and pace_until
        -inf after a reboot), and a note for the operator ("" when all is
        well). An unusable file is reported and ignored: the groups start
        with no charges, as before this file existed."""
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}, ""
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            return {}, f"{self.path} is unusable ({getattr(exc, 'strerror', None) or exc}); charges start afresh"
        groups = data.get("groups") if isinstance(data, dict) else None
        version = data.get("version") if isinstance(data, dict) else None
        if (version not in (1, ACCOUNTING_FORMAT_VERSION) or not isinstance(groups, dict)
                or not all(isinstance(g, dict) for g in groups.values())):
            return {}, (f"{self.path} is not a version 1 or {ACCOUNTING_FORMAT_VERSION} accounting table; "
                        "charges start afresh")
        notes = []
        if version == ACCOUNTING_FORMAT_VERSION:
            unpacked = {}
            for name, entry in groups.items():
                try:
                    packed = entry.pop("intervals_f64le")
                    if not isinstance(packed, str):
                        raise TypeError(f"intervals_f64le is {type(packed).__name__}: expected base64 text")
                    unpacked[name] = {**entry, "intervals": unpack_intervals(packed)}
                except (KeyError, TypeError, ValueError) as exc:   # binascii.Error is a ValueError
                    notes.append(f"charges of group {name!r} in {self.path} are unusable "
                                 f"({'no intervals_f64le' if isinstance(exc, KeyError) else exc}); "
                                 "the group starts afresh")
            groups = unpacked
        if data.get("boot_id") != _boot_id():
            groups = {name: {**entry, "intervals": [], "pace_until": -math.inf} for name, entry in groups.items()}
        return groups, "; ".join(notes)
