"""tokend's side of the preemption doorbell: the shared page beside
client.sock through which a waiting client of a higher class tells the
token's holder to stop submitting before the Revoke reaches it.

The protocol and the page's layout are hook/preempt_doorbell.h's; this
module mirrors the layout. tokend owns the page: it writes the holder's
group slot and, per group slot, whether a client of that group asking now
would preempt the holder (``Scheduler.preemptors``), and when such a group
is expected to ask next (``Scheduler.expected_preemption``). The shims ring and
listen; tokend never reads the rings (the shims count them).

The file is opened, never replaced: a container that bind-mounts it keeps
the same inode across daemon restarts. It is mode 0666 like client.sock:
any tenant can ring (see docs/security.md for what that allows).
"""
from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

from gslice.paths import DOORBELL_FILE_NAME as FILE_NAME  # one name for tokend, the CDI specs and tests

MAGIC = 0x42445347  # "GSDB" little-endian
VERSION = 1
SIZE = 4096
FLAGS_OFFSET = 64
# The last 64 bytes carry the handback (hook/gate_handback.c): tokend writes
# the group it grants when the holder releases (`next_slot`) and which of its
# waiters (`next_client`); a holder whose slice ends writes its slot and
# times there. The header's `slots` says how
# many flags are in use, so a shim reads no flag there.
HANDBACK_OFFSET = 4032
SLOTS = HANDBACK_OFFSET - FLAGS_OFFSET
_NEXT_SLOT_OFFSET = HANDBACK_OFFSET
# The waiter that group's slot names (AttachReply.doorbell_client; 0: any of
# its waiters, as from a daemon older than the field).
_NEXT_CLIENT_OFFSET = HANDBACK_OFFSET + 24
# 1: the holder is the only client attached and its group has no limit:
# nobody waits behind what it queues, so it may queue deeper
# (hook/queue_bound.c). Reserved zeros before it existed: bound as before.
_HOLDER_ALONE_OFFSET = HANDBACK_OFFSET + 28
_HEADER = struct.Struct("<III")         # magic, version, slots
_U32 = struct.Struct("<I")
# 1: every group waiting is of a lower class than the holder's (tokend renews
# it past them and they never preempt it) and no preemptor is flagged or
# expected: the holder need not bound what it queues (hook/queue_bound.c).
# Padding before it existed: an older daemon's page says 0, bound as before.
_HOLDER_OUTRANKS_OFFSET = 12
_HOLDER_SLOT_OFFSET = 32  # then ring_priority (u32) at 36, written by the shims
_CONTENDED_OFFSET = 40
# 1: tokend grants a preemptor's ask on arrival (at-once handover), so its
# shim may launch at its ring (hook/gate_head_start.c). Padding before it
# existed: an older daemon's page says 0, no head start.
_GRANTS_AT_ONCE_OFFSET = 44
# The expected preemption's window, CLOCK_MONOTONIC ns (0, 0: none). Padding
# before they existed, so an older daemon's page (zeros) expects nothing.
_EXPECTED_OFFSET = 48
_WINDOW = struct.Struct("<QQ")


class PreemptDoorbell:
    """The page, and the group -> slot numbering (slot + 1 on the wire)."""

    def __init__(self, path: Path, grants_at_once: bool = True) -> None:
        self.path = Path(path)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            os.fchmod(fd, 0o666)  # the umask must not keep tenants of other uids out
            if os.fstat(fd).st_size < SIZE:
                os.ftruncate(fd, SIZE)
            self._map = mmap.mmap(fd, SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        # A previous daemon's flags and holder mean nothing now; the ring
        # counter is left alone (listeners compare it with what they saw).
        self._clear()
        self._map[_GRANTS_AT_ONCE_OFFSET:_GRANTS_AT_ONCE_OFFSET + 4] = _U32.pack(int(grants_at_once))
        self._map[0:_HEADER.size] = _HEADER.pack(MAGIC, VERSION, SLOTS)
        self._slots: dict[str, int] = {}
        self._free: list[int] = []
        self._next = 0
        self._flagged: set[int] = set()
        self._holder = 0
        self._contended = False
        self._outranks = False
        self._expected = (0, 0)
        self._next_slot = 0
        self._next_client = 0
        self._alone = False

    def _clear(self) -> None:
        """Holder, contended, holder-outranks, grants-at-once, the expected
        window and every flag to 0 (the ring fields are the shims')."""
        self._map[_HOLDER_SLOT_OFFSET:_HOLDER_SLOT_OFFSET + 4] = bytes(4)
        self._map[_HOLDER_OUTRANKS_OFFSET:_HOLDER_OUTRANKS_OFFSET + 4] = bytes(4)
        self._map[_GRANTS_AT_ONCE_OFFSET:_GRANTS_AT_ONCE_OFFSET + 4] = bytes(4)
        self._map[_CONTENDED_OFFSET:_CONTENDED_OFFSET + 4] = bytes(4)
        self._map[_EXPECTED_OFFSET:_EXPECTED_OFFSET + _WINDOW.size] = bytes(_WINDOW.size)
        self._map[FLAGS_OFFSET:SIZE] = bytes(SIZE - FLAGS_OFFSET)  # flags, next slot, the last handback, alone

    def slot(self, group: str) -> int:
        """The group's slot + 1 (stable while the group exists); 0 when the
        page is full (that group's clients then never ring)."""
        index = self._slots.get(group)
        if index is None:
            if self._free:
                index = self._free.pop()
            elif self._next < SLOTS:
                index = self._next
                self._next += 1
            else:
                return 0
            self._slots[group] = index
        return index + 1

    def forget(self, group: str) -> None:
        index = self._slots.pop(group, None)
        if index is not None:
            self._map[FLAGS_OFFSET + index] = 0
            self._flagged.discard(index)
            self._free.append(index)

    def publish(self, holder_group: str | None, preemptors: frozenset[str], others_waiting: bool = False,
                expected: tuple[float, float] | None = None, holder_outranks: bool = False,
                next_group: str | None = None, next_client: int = 0, holder_alone: bool = False) -> None:
        """The holder's group, the groups that would preempt it now, whether
        another group waits (with a preemptor: `contended`), the window
        (time.monotonic seconds) in which a preemptor is expected to ask,
        whether the holder outranks every waiting group (written only with
        no preemptor flagged or expected), and the group granted if the
        holder released now with the number of its waiter that is granted
        (that process may start at the holder's handback), and whether the
        holder is alone on the GPU (the only client attached, no limit)."""
        holder = self.slot(holder_group) if holder_group is not None else 0
        flagged = {self._slots[name] for name in preemptors if self.slot(name)}
        # Flags first, then the holder, so a shim usually sees the flags that
        # go with the holder it reads. Not guaranteed (plain stores, no
        # fence): the page is a hint, and a mismatched read costs at most one
        # bounded pause or one ring not sent.
        for index in self._flagged - flagged:
            self._map[FLAGS_OFFSET + index] = 0
        for index in flagged - self._flagged:
            self._map[FLAGS_OFFSET + index] = 1
        self._flagged = flagged
        if holder != self._holder:
            self._map[_HOLDER_SLOT_OFFSET:_HOLDER_SLOT_OFFSET + 4] = _U32.pack(holder)
            self._holder = holder
        contended = bool(flagged) or others_waiting
        if contended != self._contended:
            self._map[_CONTENDED_OFFSET:_CONTENDED_OFFSET + 4] = _U32.pack(int(contended))
            self._contended = contended
        window = (0, 0) if expected is None else (int(expected[0] * 1e9), int(expected[1] * 1e9))
        outranks = bool(holder and holder_outranks and not flagged and window == (0, 0))
        if outranks != self._outranks:
            self._map[_HOLDER_OUTRANKS_OFFSET:_HOLDER_OUTRANKS_OFFSET + 4] = _U32.pack(int(outranks))
            self._outranks = outranks
        next_slot = self.slot(next_group) if next_group is not None and holder else 0
        next_client = next_client if next_slot else 0
        if next_client != self._next_client:  # before the slot: a reader pairs a new slot with its waiter
            self._map[_NEXT_CLIENT_OFFSET:_NEXT_CLIENT_OFFSET + 4] = _U32.pack(next_client)
            self._next_client = next_client
        if next_slot != self._next_slot:
            self._map[_NEXT_SLOT_OFFSET:_NEXT_SLOT_OFFSET + 4] = _U32.pack(next_slot)
            self._next_slot = next_slot
        alone = bool(holder and holder_alone and not contended)
        if alone != self._alone:
            self._map[_HOLDER_ALONE_OFFSET:_HOLDER_ALONE_OFFSET + 4] = _U32.pack(int(alone))
            self._alone = alone
        if window != self._expected:
            # Two plain stores: a shim reading between them pairs the new end
            # with the old start (a hint either way, its pause is bounded).
            self._map[_EXPECTED_OFFSET + 8:_EXPECTED_OFFSET + 16] = window[1].to_bytes(8, "little")
            self._map[_EXPECTED_OFFSET:_EXPECTED_OFFSET + 8] = window[0].to_bytes(8, "little")
            self._expected = window

    def close(self) -> None:
        """Leave the file (a container may hold it mounted); clear what it says."""
        self._clear()
        self._map.close()

    def read_ring(self) -> tuple[int, int, int]:
        """(ring_seq, ring_slot, ring_ns) as the shims left them (tests, status)."""
        return struct.unpack_from("<IIQ", self._map, 16)

    def read_grants_at_once(self) -> bool:
        """What the page tells the shims about head starts (tests)."""
        return _U32.unpack_from(self._map, _GRANTS_AT_ONCE_OFFSET)[0] == 1

    def read_next_slot(self) -> int:
        """The group slot + 1 published as next on release (tests)."""
        return _U32.unpack_from(self._map, _NEXT_SLOT_OFFSET)[0]

    def read_next_client(self) -> int:
        """The waiter published as next on release, by its doorbell number (tests)."""
        return _U32.unpack_from(self._map, _NEXT_CLIENT_OFFSET)[0]

    def read_handback(self) -> tuple[int, int, int]:
        """(slot + 1, handback_ns, free_ns) of the last handback (tests)."""
        return struct.unpack_from("<IQQ", self._map, _NEXT_SLOT_OFFSET + 4)

    def read_holder_alone(self) -> bool:
        """What the page says of the holder being alone (tests)."""
        return _U32.unpack_from(self._map, _HOLDER_ALONE_OFFSET)[0] == 1

    def read_expected(self) -> tuple[int, int]:
        """(start_ns, end_ns) of the expected preemption as published (tests)."""
        return _WINDOW.unpack_from(self._map, _EXPECTED_OFFSET)
