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
- A departed process's memory returns to its group only when the driver has
  freed it (`detach_held`): the bytes stay charged, as a pending reclaim,
  until an NVML process list taken after the departure no longer lists the
  pid (the driver tears a killed process's context down for 120-140 ms on
  an H100; granting the memory earlier can make a group under its quota meet
  a real out-of-memory error). When NVML cannot tell (it never listed the
  pid: another pid namespace, no per-process figures; or no list came at
  all), the bytes come back `timeout` seconds after the departure, or after
  the pid's last listing, whichever is later. A reservation that would fit
  once the group's pending reclaims are back may wait for them
  (`reserve(..., can_wait=True)`). A process that re-attaches (same group and
  pid) re-declaring memory supersedes its pending reclaim: what it declares
  is what it holds.
"""
from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace

from .errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound


DEFAULT_RECLAIM_TIMEOUT = 2.0  # s; ~15x the H100's measured teardown of a 3.76 GiB process
# A reservation that fits once its group's pending reclaims are back waits
# for them this long at most, then is refused (tokend/coordinator.py; a
# group's delete waits as long for them). Below the shim's 5 s ReserveMemory
# deadline (hook/memory_ledger.c RESERVE_WAIT_MS); above the default
# reclaim timeout, so a reclaim NVML cannot follow ends within the wait.
RESERVE_WAIT_FOR_RECLAIM = 3.0


@dataclass(frozen=True)
class Reservation:
    granted: bool
    used: int  # group total after the call
    quota: int
    wait: bool = False  # refused now, but fits once the group's pending reclaims are back (can_wait only)


@dataclass(frozen=True)
class PendingReclaim:
    """Memory of a departed process, charged to its group until the driver frees it."""
    group: str
    pid: int
    nbytes: int
    client: str            # how status names the client it belonged to
    since: float           # monotonic: when the process departed (detached)
    since_wall: float      # wall clock of the same instant, for display
    last_listed: float     # monotonic: the latest NVML list that showed the pid after `since`; 0: none
    seen_listed: bool      # NVML has listed the pid (while attached or after): its absence means freed
    lists_since: int = 0   # NVML lists taken after `since` (0: NVML has said nothing since)

    def deadline(self, timeout: float) -> float:
        """When the bytes come back if NVML never shows them freed."""
        return max(self.since, self.last_listed) + timeout


@dataclass(frozen=True)
class Reclaimed:
    """A pending reclaim ended: its bytes are the group's again."""
    pending: PendingReclaim
    at: float              # monotonic
    how: str               # "driver freed" | "timeout" | "superseded"
    reason: str            # for status, events and logs


def _check_bytes(what: str, value, minimum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise InvalidArgument(f"{what} {value!r} is invalid: expected a whole number of bytes >= {minimum}")
    return value


class _GroupMemory:
    __slots__ = ("name", "quota", "used", "clients", "refusals", "pending")

    def __init__(self, name: str, quota: int) -> None:
        self.name = name
        self.quota = quota
        self.used = 0          # clients' bytes plus pending reclaims
        self.clients: set[str] = set()
        self.refusals = 0
        self.pending = 0       # bytes of departed processes the driver has not freed yet


class _ClientMemory:
    __slots__ = ("group", "used", "pid", "listed")

    def __init__(self, group: _GroupMemory, pid: int) -> None:
        self.group = group
        self.used = 0
        self.pid = pid
        self.listed = False    # NVML has listed its pid


class MemoryLedger:
    def __init__(self, reclaim_timeout: float = DEFAULT_RECLAIM_TIMEOUT) -> None:
        if not reclaim_timeout >= 0:
            raise InvalidArgument(f"reclaim timeout {reclaim_timeout!r} s is invalid: expected seconds >= 0")
        self.reclaim_timeout = reclaim_timeout
        self._groups: dict[str, _GroupMemory] = {}
        self._clients: dict[str, _ClientMemory] = {}
        self._pending: list[PendingReclaim] = []

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
        if group.pending:
            pids = sorted({p.pid for p in self._pending if p.group == name})
            raise FailedPrecondition(
                f"group {name!r} still has {group.pending} bytes of departed processes (pids "
                f"{', '.join(map(str, pids))}) that the driver has not freed yet: retry once they are back "
                f"(at most {self.reclaim_timeout:g} s after NVML stops listing them)"
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

    def attach(self, client_id: str, group: str, declared: int = 0, pid: int = 0,
               now: float = 0.0) -> list[Reclaimed]:
        """Returns the pending reclaims this attach supersedes: a process
        re-attaching (same group and pid, e.g. after the operator removed its
        client) re-declares what it holds, which replaces what it left."""
        target = self._group(group)
        if client_id in self._clients:
            raise AlreadyExists(f"client {client_id!r} is already attached to the memory ledger")
        declared = _check_bytes("declared memory", declared, 0)
        superseded = []
        if declared and pid:
            for pending in [p for p in self._pending if p.group == group and p.pid == pid]:
                superseded.append(self._end_pending(pending, now, "superseded",
                                                    f"pid {pid} attached again declaring {declared} bytes held"))
        client = _ClientMemory(target, pid)
        client.used = declared
        target.used += declared
        target.clients.add(client_id)
        self._clients[client_id] = client
        return superseded

    def reserve(self, client_id: str, nbytes: int, can_wait: bool = False) -> Reservation:
        """can_wait: the caller can wait for the group's pending reclaims;
        a reservation that fits once they are back is then answered
        wait=True (not counted as a refusal) instead of refused."""
        client = self._client(client_id)
        nbytes = _check_bytes("reservation size", nbytes, 1)
        group = client.group
        if group.used + nbytes > group.quota:
            if can_wait and group.used - group.pending + nbytes <= group.quota:
                return Reservation(False, group.used, group.quota, wait=True)
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
                f"release of {nbytes} bytes is invalid: this client holds only {client.used} bytes"
            )
        client.used -= nbytes
        client.group.used -= nbytes
        return Reservation(True, client.group.used, client.group.quota)

    def detach(self, client_id: str) -> int:
        """Forget the client and free everything it held; returns those bytes.
        For a client whose process keeps (or keeps for a while) what it holds
        on the GPU only: one that will re-declare it (daemon stopping)."""
        client = self._forget(client_id)
        client.group.used -= client.used
        return client.used

    def detach_held(self, client_id: str, public_id: str, now: float, wall: float) -> PendingReclaim | None:
        """Forget the client; what it held stays charged to its group until the
        driver frees it (see the module's rules). None when it held nothing."""
        client = self._forget(client_id)
        if not client.used:
            return None
        pending = PendingReclaim(client.group.name, client.pid, client.used, public_id, now, wall, 0.0,
                                 client.listed)
        client.group.pending += client.used
        self._pending.append(pending)
        return pending

    def _forget(self, client_id: str) -> _ClientMemory:
        client = self._client(client_id)
        client.group.clients.discard(client_id)
        del self._clients[client_id]
        return client

    # ------------------------------------------------------- pending reclaims

    def observe_gpu_processes(self, pids: Collection[int] | None, taken_at: float) -> list[Reclaimed]:
        """NVML's list of the processes on the GPU, queried at `taken_at`
        (monotonic, when the query began), or None when the query failed.
        Returns the reclaims that end: a pid NVML has listed and this list,
        taken after its process departed, does not; then those timed out."""
        if pids is not None:
            listed = set(pids)
            for client in self._clients.values():
                if client.pid in listed:
                    client.listed = True
            ended = []
            for pending in list(self._pending):
                if taken_at < pending.since:
                    continue  # a list from before the departure says nothing about the teardown
                if pending.pid in listed:
                    self._replace(pending, replace(pending, last_listed=max(pending.last_listed, taken_at),
                                                   seen_listed=True, lists_since=pending.lists_since + 1))
                elif pending.seen_listed:
                    ended.append(self._end_pending(pending, taken_at, "driver freed",
                                                   "NVML no longer lists the process"))
                else:
                    self._replace(pending, replace(pending, lists_since=pending.lists_since + 1))
            return ended + self.expire(taken_at)
        return self.expire(taken_at)

    def expire(self, now: float) -> list[Reclaimed]:
        """The reclaims whose timeout has passed at `now` end."""
        ended = []
        for pending in list(self._pending):
            if now >= pending.deadline(self.reclaim_timeout):
                if pending.last_listed:
                    why = (f"NVML listed pid {pending.pid} last {now - pending.last_listed:.3f} s ago and "
                           "gave no list since")
                elif pending.lists_since:
                    why = (f"NVML never listed pid {pending.pid} (another pid namespace, or no per-process "
                           "figures)")
                else:
                    why = "NVML gave no process list"
                ended.append(self._end_pending(pending, now, "timeout",
                                               f"reclaimed by timeout ({self.reclaim_timeout:g} s): {why}"))
        return ended

    def next_reclaim_deadline(self) -> float | None:
        """The earliest instant `expire` would end a reclaim; None when none is pending."""
        return min((p.deadline(self.reclaim_timeout) for p in self._pending), default=None)

    def pending_reclaims(self, group: str | None = None) -> list[PendingReclaim]:
        return [p for p in self._pending if group is None or p.group == group]

    def restore_pending(self, pending: PendingReclaim) -> None:
        """Charge a pending reclaim kept across a daemon restart to its group."""
        group = self._group(pending.group)
        _check_bytes("pending reclaim size", pending.nbytes, 1)
        group.used += pending.nbytes
        group.pending += pending.nbytes
        self._pending.append(pending)

    def _replace(self, old: PendingReclaim, new: PendingReclaim) -> None:
        self._pending[self._pending.index(old)] = new

    def _end_pending(self, pending: PendingReclaim, at: float, how: str, reason: str) -> Reclaimed:
        self._pending.remove(pending)
        group = self._groups[pending.group]
        group.used -= pending.nbytes
        group.pending -= pending.nbytes
        return Reclaimed(pending, at, how, reason)

    # ------------------------------------------------------------------ views

    def group_used(self, name: str) -> int:
        return self._group(name).used

    def group_quota(self, name: str) -> int:
        return self._group(name).quota

    def group_pending(self, name: str) -> int:
        """Bytes of the group's departed processes that the driver has not freed yet (part of group_used)."""
        return self._group(name).pending

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
