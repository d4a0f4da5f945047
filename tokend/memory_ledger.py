"""The memory ledger: per-group device-memory quotas, reserved all-or-nothing.

Sans-I/O and lock-free on purpose: the daemon calls it from one asyncio
loop, so each call is atomic across every process of a group (no
check-then-add race between processes, unlike a shared file).

Rules:
- A reservation is granted iff group use + nbytes <= quota; otherwise
  nothing changes and the group's refusal count goes up.
- Bytes re-declared at attach (memory a process already holds after a daemon
  restart or reconnect) are recorded even over quota: they are allocated
  already, refusing them would only make the ledger lie.
- A quota may be lowered below current use; the group is then over quota
  and every new reservation is refused until releases bring use back under.
- A group with attached clients cannot be removed (FailedPrecondition), even
  if they hold no memory: the group's clients would be left unaccounted.
"""
from __future__ import annotations

from dataclasses import dataclass

from .errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound


@dataclass(frozen=True)
class Reservation:
    granted: bool
    used: int  # group total after the call
    quota: int


def _check_bytes(what: str, value, minimum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise InvalidArgument(f"{what} {value!r} is invalid: expected a whole number of bytes >= {minimum}")
    return value


class _GroupMemory:
    __slots__ = ("name", "quota", "used", "clients", "refusals")

    def __init__(self, name: str, quota: int) -> None:
        self.name = name
        self.quota = quota
        self.used = 0
        self.clients: set[str] = set()
        self.refusals = 0


class _ClientMemory:
    __slots__ = ("group", "used")

    def __init__(self, group: _GroupMemory) -> None:
        self.group = group
        self.used = 0


class MemoryLedger:
    def __init__(self) -> None:
        self._groups: dict[str, _GroupMemory] = {}
        self._clients: dict[str, _ClientMemory] = {}

    # ----------------------------------------------------------------- groups

    def set_group(self, name: str, quota: int) -> None:
        """Create the group, or change its quota (lowering below use is allowed)."""
        if not isinstance(quota, int) or isinstance(quota, bool) or quota <= 0:
            raise InvalidArgument(f"memory quota {quota!r} for group {name!r} is invalid: expected a whole number of bytes > 0")
        group = self._groups.get(name)
        if group is None:
            self._groups[name] = _GroupMemory(name, quota)
        else:
            group.quota = quota

    def remove_group(self, name: str) -> None:
        group = self._group(name)
        if group.clients:
            raise FailedPrecondition(
                f"group {name!r} still has {len(group.clients)} attached client(s) holding "
                f"{group.used} bytes: detach them first"
            )
        del self._groups[name]

    def _group(self, name: str) -> _GroupMemory:
        group = self._groups.get(name)
        if group is None:
            raise NotFound(f"group {name!r} has no memory ledger entry (known: {', '.join(sorted(self._groups)) or 'none'})")
        return group

    def _client(self, client_id: str) -> _ClientMemory:
        client = self._clients.get(client_id)
        if client is None:
            raise NotFound(f"client {client_id!r} is not attached to the memory ledger: attach it first")
        return client

    # ---------------------------------------------------------------- clients

    def attach(self, client_id: str, group: str, declared: int = 0) -> None:
        target = self._group(group)
        if client_id in self._clients:
            raise AlreadyExists(f"client {client_id!r} is already attached to the memory ledger")
        declared = _check_bytes("declared memory", declared, 0)
        client = _ClientMemory(target)
        client.used = declared
        target.used += declared
        target.clients.add(client_id)
        self._clients[client_id] = client

    def reserve(self, client_id: str, nbytes: int) -> Reservation:
        client = self._client(client_id)
        nbytes = _check_bytes("reservation size", nbytes, 1)
        group = client.group
        if group.used + nbytes > group.quota:
            group.refusals += 1
            return Reservation(False, group.used, group.quota)
        group.used += nbytes
        client.used += nbytes
        return Reservation(True, group.used, group.quota)

    def release(self, client_id: str, nbytes: int) -> Reservation:
        client = self._client(client_id)
        nbytes = _check_bytes("release size", nbytes, 1)
        if nbytes > client.used:
            raise InvalidArgument(
                f"release of {nbytes} bytes by client {client_id!r} is invalid: it holds only {client.used} bytes"
            )
        client.used -= nbytes
        client.group.used -= nbytes
        return Reservation(True, client.group.used, client.group.quota)

    def detach(self, client_id: str) -> int:
        """Forget the client and free everything it held; returns those bytes."""
        client = self._client(client_id)
        freed = client.used
        client.group.used -= freed
        client.group.clients.discard(client_id)
        del self._clients[client_id]
        return freed

    # ------------------------------------------------------------------ views

    def group_used(self, name: str) -> int:
        return self._group(name).used

    def group_quota(self, name: str) -> int:
        return self._group(name).quota

    def client_used(self, client_id: str) -> int:
        return self._client(client_id).used

    def client_group(self, client_id: str) -> str:
        return self._client(client_id).group.name

    def over_quota(self, name: str) -> bool:
        group = self._group(name)
        return group.used > group.quota

    def refusals(self, name: str) -> int:
        """Reservations refused for this group so far (for metrics)."""
        return self._group(name).refusals

    def groups(self) -> list[str]:
        return sorted(self._groups)

    def clients(self) -> list[str]:
        return sorted(self._clients)
