"""The claims this plugin prepared on this node, persisted atomically (temp
file, fsync, rename, fsync of the directory) so a crash or reboot leaves the
old or the new table, never a torn one. An entry is written as "preparing"
before anything is created for the claim and becomes "prepared" at the end:
after a crash in between, the clean-up still knows what to undo."""
from __future__ import annotations

import json
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path

from gslice.atomic_file import write_atomically

FORMAT_VERSION = 1
PREPARING = "preparing"
PREPARED = "prepared"


class CheckpointError(Exception):
    pass


@dataclass
class DeviceEntry:
    """One gslice device of a claim: its group on one GPU's tokend."""
    group: str
    admin_socket: str
    gpu_uuid: str = ""
    pool: str = ""
    device: str = ""
    request_names: list[str] = field(default_factory=list)
    share_id: str | None = None
    cdi_device_ids: list[str] = field(default_factory=list)


@dataclass
class ClaimEntry:
    uid: str
    namespace: str
    name: str
    state: str
    devices: list[DeviceEntry] = field(default_factory=list)
    spec_file: str = ""
    claim_dir: str = ""

    @classmethod
    def from_json(cls, data: dict) -> "ClaimEntry":
        known = {f for f in cls.__dataclass_fields__}
        entry = cls(**{k: v for k, v in data.items() if k in known})
        entry.devices = [DeviceEntry(**d) for d in data.get("devices") or []]
        return entry


class Checkpoint:
    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock = threading.Lock()

    def load(self) -> dict[str, ClaimEntry]:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise CheckpointError(f"checkpoint {self.path} is unreadable ({exc}); move it away to start empty "
                                  "(the clean-up then cannot undo what it recorded)") from None
        if not isinstance(data, dict) or data.get("version") != FORMAT_VERSION:
            raise CheckpointError(f"checkpoint {self.path} is not version {FORMAT_VERSION}")
        return {uid: ClaimEntry.from_json(item) for uid, item in (data.get("claims") or {}).items()}

    def _save(self, claims: dict[str, ClaimEntry]) -> None:
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        payload = json.dumps({"version": FORMAT_VERSION,
                              "claims": {uid: asdict(e) for uid, e in sorted(claims.items())}}, indent=2)
        write_atomically(self.path, (payload + "\n").encode(), mode=0o600, sync_dir=True)

    def get(self, uid: str) -> ClaimEntry | None:
        with self._lock:
            return self.load().get(uid)

    def put(self, entry: ClaimEntry) -> None:
        with self._lock:
            claims = self.load()
            claims[entry.uid] = entry
            self._save(claims)

    def remove(self, uid: str) -> None:
        with self._lock:
            claims = self.load()
            if claims.pop(uid, None) is not None:
                self._save(claims)
