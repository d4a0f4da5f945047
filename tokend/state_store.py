"""Persists the group table (with secrets) in STATE_DIR/groups.json.

Writes are atomic and durable: a temp file in the same directory, fsync,
rename over the old file, fsync of the directory; so a crash leaves either
the old or the new table, never a torn one. File 0600, directory 0700:
the file holds the group secrets."""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

FORMAT_VERSION = 1


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
        }
        if self.labels:  # absent when empty: files stay as older daemons wrote them
            data["labels"] = dict(sorted(self.labels.items()))
        return data


class GroupStore:
    def __init__(self, state_dir: str | os.PathLike):
        self.state_dir = Path(state_dir)
        self.path = self.state_dir / "groups.json"

    def prepare(self) -> None:
        """Create the state directory (0700) if missing; tighten it if it exists."""
        try:
            self.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(self.state_dir, 0o700)
        except OSError as exc:
            raise StateError(f"cannot use state directory {self.state_dir}: {exc.strerror}") from None

    def load(self) -> list[StoredGroup]:
        """The stored groups; [] when there is no file yet."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StateError(f"cannot read {self.path}: {exc.strerror}") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise StateError(
                f"{self.path} is corrupt (not JSON: {exc}); fix or move it away to start with no groups"
            ) from None
        if not isinstance(data, dict) or data.get("version") != FORMAT_VERSION or not isinstance(data.get("groups"), list):
            raise StateError(
                f"{self.path} is not a gslice group table version {FORMAT_VERSION} "
                "(expected {\"version\": 1, \"groups\": [...]}); fix or move it away"
            )
        groups = []
        for item in data["groups"]:
            if not isinstance(item, dict):
                raise StateError(f"group entry {item!r} in {self.path} is not an object")
            groups.append(StoredGroup.from_json(item, self.path))
        names = [g.name for g in groups]
        if len(set(names)) != len(names):
            raise StateError(f"{self.path} names a group twice: {sorted(names)}")
        return groups

    def save(self, groups: list[StoredGroup]) -> None:
        data = {"version": FORMAT_VERSION, "groups": [g.to_json() for g in sorted(groups, key=lambda g: g.name)]}
        payload = (json.dumps(data, indent=2) + "\n").encode()
        fd, tmp_name = tempfile.mkstemp(prefix=".groups.", suffix=".tmp", dir=self.state_dir)
        try:
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "wb") as tmp:
                tmp.write(payload)
                tmp.flush()
                os.fsync(tmp.fileno())
            os.replace(tmp_name, self.path)
        except BaseException:
            try:
                os.unlink(tmp_name)
            except FileNotFoundError:
                pass
            raise
        dir_fd = os.open(self.state_dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
