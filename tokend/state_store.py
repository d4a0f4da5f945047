"""Persists the group table (with secrets) in STATE_DIR/groups.json.

Writes are atomic and durable: a temp file in the same directory, fsync,
rename over the old file, fsync of the directory; so a crash leaves either
the old or the new table, never a torn one. File 0600, directory 0700:
the file holds the group secrets.

The previous good table is kept as groups.json.bak (each save copies the
current file there first). At start-up, a corrupt groups.json falls back to
the backup (the corrupt file is kept beside as groups.json.corrupt-<time>)
and leftover temp files of an interrupted save are removed: a daemon that
refuses to start leaves every process on the GPU waiting."""
from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from gslice.atomic_file import write_atomically

FORMAT_VERSION = 1
DAEMON_LOSS_WAIT = 1  # gslice.v1.DaemonLossPolicy; the default for old files
_TEMP_PREFIX = ".groups."  # write_atomically's temp names: .groups.json.*.tmp, .groups.json.bak.*.tmp

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
        self._loaded_quotas: dict[str, int] = {}

    def prepare(self) -> None:
        """Create the state directory (0700) if missing; tighten it if it exists."""
        try:
            self.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(self.state_dir, 0o700)
        except OSError as exc:
            raise StateError(f"cannot use state directory {self.state_dir}: {exc.strerror}") from None
        leftovers = [*self.state_dir.glob(f"{_TEMP_PREFIX}*.tmp"), *self.state_dir.glob(".reclaims.json.*.tmp")]
        for leftover in leftovers:  # from a save a crash interrupted
            try:
                leftover.unlink()
                log.info("removed %s, left by an interrupted save", leftover)
            except OSError as exc:
                log.warning("cannot remove leftover %s: %s", leftover, exc.strerror)

    def load_or_recover(self) -> tuple[list[StoredGroup], str]:
        """The stored groups and a note for the operator ("" when all is well).
        A corrupt table is moved aside and the backup loaded instead; with no
        usable backup either, tokend starts with no groups (and says so)."""
        try:
            groups = self.load()
            self._loaded_quotas = {g.name: g.memory_quota for g in groups}
            return groups, ""
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
            self._loaded_quotas = {}
            return [], f"{problem}; moved to {kept}; started with no groups"
        write_atomically(self.path, self.backup_path.read_bytes(), mode=0o600, sync_dir=True)
        self._loaded_quotas = {g.name: g.memory_quota for g in groups}
        return groups, f"{problem}; moved to {kept}; restored the last good table from {self.backup_path}"

    def stored_quota(self, name: str, default: int) -> int:
        """The quota the file held at start-up (kept for a flagged group)."""
        return self._loaded_quotas.get(name, default)

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

    def save(self, pending: list) -> None:
        """`pending`: memory_ledger.PendingReclaim items."""
        data = {"version": RECLAIMS_FORMAT_VERSION, "boot_id": _boot_id(),
                "pending": [{"group": p.group, "pid": p.pid, "bytes": p.nbytes, "client": p.client,
                             "since": p.since, "since_wall": p.since_wall, "last_listed": p.last_listed,
                             "seen_listed": p.seen_listed, "lists_since": p.lists_since} for p in pending]}
        write_atomically(self.path, (json.dumps(data, indent=1) + "\n").encode(), mode=0o600, sync_dir=True)

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
            entries = data["pending"]
            for item in entries:
                for key, kind in (("group", str), ("pid", int), ("bytes", int), ("client", str), ("since", float),
                                  ("since_wall", float), ("last_listed", float), ("seen_listed", bool),
                                  ("lists_since", int)):
                    if not isinstance(item.get(key), (int, float) if kind is float else kind):
                        raise ValueError(f"entry {item!r} has no valid {key!r}")
        except (ValueError, KeyError, TypeError) as exc:
            return [], f"{self.path} is unusable ({exc}); pending reclaims lost"
        if data.get("boot_id") != _boot_id():
            return [], ""  # rebooted since: the driver freed everything
        return entries, ""
