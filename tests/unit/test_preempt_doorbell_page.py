"""tokend's side of the preemption doorbell (tokend/preempt_doorbell.py) on a
file in tmp_path: the page's layout against hook/preempt_doorbell.h, the
file's mode and size, group slot numbering, and what publish, a re-open
and close leave on the page (read through a mapping of our own, as a shim
reads it)."""
from __future__ import annotations

import mmap
import os
import re
import stat
import struct
from pathlib import Path

import pytest

from gslice.tokend import preempt_doorbell
from gslice.tokend.preempt_doorbell import PreemptDoorbell

HEADER_FILE = Path(__file__).resolve().parents[2] / "hook" / "preempt_doorbell.h"


def _c_layout() -> tuple[dict[str, str], dict[str, int]]:
    """The header's #defines, and each page field's offset from the comment
    that opens its line's comment (`uint32_t magic; /* 0  ...`)."""
    text = HEADER_FILE.read_text()
    defines = dict(re.findall(r"^#define (GS_DOORBELL_\w+) (\S+)", text, re.M))
    page = re.search(r"typedef struct gs_doorbell_page \{(.*?)\} gs_doorbell_page;", text, re.S).group(1)
    offsets = {name: int(offset) for name, offset in re.findall(r"(\w+)(?:\[\w+\])?;\s*/\*\s*(\d+)\b", page)}
    return defines, offsets


DEFINES, OFFSETS = _c_layout()


def _c_int(token: str) -> int:
    return int(token.rstrip("uUlL"), 0)


def _page(path: Path) -> bytes:
    """The page as another process mapping the file sees it."""
    with open(path, "rb") as file, mmap.mmap(file.fileno(), preempt_doorbell.SIZE, prot=mmap.PROT_READ) as page:
        return bytes(page)


def _u32(page: bytes, field: str) -> int:
    return struct.unpack_from("<I", page, OFFSETS[field])[0]


def _flag(page: bytes, slot: int) -> int:
    """The may_preempt byte of a group slot as AttachReply gives it (slot + 1)."""
    return page[OFFSETS["may_preempt"] + slot - 1]


def _ring(path: Path, seq: int, slot: int, ns: int) -> None:
    """Write a ring the way a shim does (ring_slot, ring_ns, then ring_seq)."""
    with open(path, "r+b") as file, mmap.mmap(file.fileno(), preempt_doorbell.SIZE) as page:
        struct.pack_into("<I", page, OFFSETS["ring_slot"], slot)
        struct.pack_into("<Q", page, OFFSETS["ring_ns"], ns)
        struct.pack_into("<I", page, OFFSETS["ring_seq"], seq)


@pytest.fixture
def doorbell(tmp_path):
    made = PreemptDoorbell(tmp_path / preempt_doorbell.FILE_NAME)
    yield made
    made.close()


def test_python_constants_mirror_the_c_header():
    assert DEFINES["GS_DOORBELL_FILE_NAME"] == f'"{preempt_doorbell.FILE_NAME}"'
    assert _c_int(DEFINES["GS_DOORBELL_MAGIC"]) == preempt_doorbell.MAGIC
    assert _c_int(DEFINES["GS_DOORBELL_VERSION"]) == preempt_doorbell.VERSION
    assert _c_int(DEFINES["GS_DOORBELL_SIZE"]) == preempt_doorbell.SIZE
    assert _c_int(DEFINES["GS_DOORBELL_FLAGS_OFFSET"]) == preempt_doorbell.FLAGS_OFFSET
    assert _c_int(DEFINES["GS_DOORBELL_HANDBACK_OFFSET"]) == preempt_doorbell.HANDBACK_OFFSET
    assert preempt_doorbell.SLOTS == preempt_doorbell.HANDBACK_OFFSET - preempt_doorbell.FLAGS_OFFSET
    assert OFFSETS == {"magic": 0, "version": 4, "slots": 8, "holder_outranks": 12, "ring_seq": 16, "ring_slot": 20,
                       "ring_ns": 24, "holder_slot": 32, "ring_priority": 36, "contended": 40, "grants_at_once": 44,
                       "expected_start_ns": 48, "expected_end_ns": 56,
                       "may_preempt": preempt_doorbell.FLAGS_OFFSET, "next_slot": preempt_doorbell.HANDBACK_OFFSET,
                       "handback_slot": 4036, "handback_ns": 4040, "handback_free_ns": 4048, "next_client": 4056,
                       "holder_alone": 4060, "reserved": 4064}
    assert preempt_doorbell._EXPECTED_OFFSET == OFFSETS["expected_start_ns"]
    assert preempt_doorbell._GRANTS_AT_ONCE_OFFSET == OFFSETS["grants_at_once"]
    assert preempt_doorbell._HOLDER_OUTRANKS_OFFSET == OFFSETS["holder_outranks"]
    assert preempt_doorbell._NEXT_CLIENT_OFFSET == OFFSETS["next_client"]
    assert preempt_doorbell._HOLDER_ALONE_OFFSET == OFFSETS["holder_alone"]


def test_new_page_has_the_header_and_nothing_else(doorbell):
    page = _page(doorbell.path)
    assert len(page) == preempt_doorbell.SIZE
    assert page[:4] == b"GSDB"
    assert _u32(page, "magic") == preempt_doorbell.MAGIC
    assert _u32(page, "version") == preempt_doorbell.VERSION
    assert _u32(page, "slots") == preempt_doorbell.SLOTS
    header_end = OFFSETS["holder_outranks"]
    # At-once handover (the default): the shims may start at their ring.
    assert _u32(page, "grants_at_once") == 1 and doorbell.read_grants_at_once()
    rest = bytearray(page[header_end:])
    at = OFFSETS["grants_at_once"] - header_end
    rest[at:at + 4] = bytes(4)
    assert rest == bytes(preempt_doorbell.SIZE - header_end)
    assert doorbell.read_ring() == (0, 0, 0)


def test_a_daemon_that_hands_over_at_release_tells_the_shims_not_to_start_early(tmp_path):
    # hook/gate_head_start.c: with at-release the grant waits for the
    # holder's release, so a head start would run two tenants at once.
    path = tmp_path / preempt_doorbell.FILE_NAME
    PreemptDoorbell(path).close()   # an at-once daemon before it
    at_release = PreemptDoorbell(path, grants_at_once=False)
    assert _u32(_page(path), "grants_at_once") == 0 and not at_release.read_grants_at_once()
    at_release.close()
    at_once = PreemptDoorbell(path)
    at_once.close()   # a stopped daemon grants nothing
    assert _u32(_page(path), "grants_at_once") == 0


def test_file_is_one_page_with_mode_0666_under_a_restrictive_umask(tmp_path):
    path = tmp_path / preempt_doorbell.FILE_NAME
    old = os.umask(0o077)
    try:
        PreemptDoorbell(path).close()
    finally:
        os.umask(old)
    info = path.stat()
    assert stat.S_ISREG(info.st_mode)
    assert stat.S_IMODE(info.st_mode) == 0o666
    assert info.st_size == preempt_doorbell.SIZE


def test_an_existing_short_private_file_is_grown_and_opened_up(tmp_path):
    path = tmp_path / preempt_doorbell.FILE_NAME
    path.write_bytes(b"old")
    path.chmod(0o600)
    PreemptDoorbell(path).close()
    info = path.stat()
    assert stat.S_IMODE(info.st_mode) == 0o666
    assert info.st_size == preempt_doorbell.SIZE
    assert _u32(_page(path), "magic") == preempt_doorbell.MAGIC


def test_slots_are_one_based_and_stable_per_group(doorbell):
    assert doorbell.slot("a") == 1
    assert doorbell.slot("b") == 2
    assert doorbell.slot("a") == 1
    assert doorbell.slot("c") == 3
    assert doorbell.slot("b") == 2


def test_a_forgotten_groups_slot_goes_to_the_next_new_group(doorbell):
    for name in ("a", "b", "c"):
        doorbell.slot(name)
    doorbell.forget("b")
    doorbell.forget("never-had-one")  # nothing to forget: no error, no slot freed
    assert doorbell.slot("d") == 2
    assert doorbell.slot("e") == 4
    assert doorbell.slot("b") == 5  # back again: a new slot, not its old one


def test_a_full_page_gives_slot_0_until_a_group_is_forgotten(doorbell):
    for index in range(preempt_doorbell.SLOTS):
        assert doorbell.slot(f"g{index}") == index + 1
    assert doorbell.slot("late") == 0
    # Without a slot the group can be neither flagged nor named as the holder.
    doorbell.publish("late", frozenset({"late", "g0"}))
    page = _page(doorbell.path)
    assert _u32(page, "holder_slot") == 0
    assert _flag(page, 1) == 1
    assert sum(page[OFFSETS["may_preempt"]:]) == 1
    doorbell.forget("g41")
    assert doorbell.slot("late") == 42


def test_publish_writes_exactly_the_flags_the_holder_and_contended(doorbell):
    slots = {name: doorbell.slot(name) for name in ("low", "mid", "high", "other")}
    before = _page(doorbell.path)

    doorbell.publish("low", frozenset({"mid", "high"}))
    after = _page(doorbell.path)
    expected = bytearray(before)
    struct.pack_into("<I", expected, OFFSETS["holder_slot"], slots["low"])
    struct.pack_into("<I", expected, OFFSETS["contended"], 1)  # a group could preempt the holder
    expected[OFFSETS["may_preempt"] + slots["mid"] - 1] = 1
    expected[OFFSETS["may_preempt"] + slots["high"] - 1] = 1
    assert after == bytes(expected)

    doorbell.publish("mid", frozenset({"high"}))
    page = _page(doorbell.path)
    assert _u32(page, "holder_slot") == slots["mid"]
    assert [_flag(page, slots[name]) for name in ("low", "mid", "high", "other")] == [0, 0, 1, 0]

    # Nobody would preempt, but another group waits: still contended.
    doorbell.publish("mid", frozenset(), others_waiting=True)
    page = _page(doorbell.path)
    assert _u32(page, "contended") == 1 and _flag(page, slots["high"]) == 0
    doorbell.publish("mid", frozenset())
    assert _u32(_page(doorbell.path), "contended") == 0

    doorbell.publish(None, frozenset())
    assert _page(doorbell.path) == before


def test_holder_outranks_is_written_only_with_no_preemptor_flagged_or_expected(doorbell):
    # The holder's shim stops bounding its queue on this word
    # (hook/queue_bound.c): never while a preemptor could ask.
    doorbell.publish("high", frozenset(), others_waiting=True, holder_outranks=True)
    assert _u32(_page(doorbell.path), "holder_outranks") == 1
    doorbell.publish("high", frozenset({"top"}), others_waiting=True, holder_outranks=True)
    assert _u32(_page(doorbell.path), "holder_outranks") == 0
    doorbell.publish("high", frozenset(), others_waiting=True, holder_outranks=True)
    doorbell.publish("high", frozenset(), others_waiting=True, expected=(1.0, 1.5), holder_outranks=True)
    assert _u32(_page(doorbell.path), "holder_outranks") == 0
    doorbell.publish("high", frozenset(), others_waiting=True, holder_outranks=True)
    doorbell.publish(None, frozenset(), holder_outranks=True)  # no holder: nothing to outrank with
    assert _u32(_page(doorbell.path), "holder_outranks") == 0
    doorbell.publish("high", frozenset(), others_waiting=True, holder_outranks=True)
    doorbell.publish("high", frozenset(), others_waiting=True)
    assert _u32(_page(doorbell.path), "holder_outranks") == 0


def test_holder_alone_is_written_only_for_a_holder_nobody_contends_with(doorbell):
    # The holder's shim keeps more queued on this word (hook/queue_bound.c):
    # never with another group waiting or a preemptor flagged, nor with no holder.
    doorbell.publish("only", frozenset(), holder_alone=True)
    assert _u32(_page(doorbell.path), "holder_alone") == 1 and doorbell.read_holder_alone()
    doorbell.publish("only", frozenset(), others_waiting=True, holder_alone=True)
    assert _u32(_page(doorbell.path), "holder_alone") == 0
    doorbell.publish("only", frozenset(), holder_alone=True)
    doorbell.publish("only", frozenset({"high"}), holder_alone=True)
    assert _u32(_page(doorbell.path), "holder_alone") == 0
    doorbell.publish("only", frozenset(), holder_alone=True)
    doorbell.publish(None, frozenset(), holder_alone=True)
    assert _u32(_page(doorbell.path), "holder_alone") == 0
    doorbell.publish("only", frozenset(), holder_alone=True)
    doorbell.publish("only", frozenset())   # a second client attached
    assert _u32(_page(doorbell.path), "holder_alone") == 0 and not doorbell.read_holder_alone()


def _window(page: bytes) -> tuple[int, int]:
    return (struct.unpack_from("<Q", page, OFFSETS["expected_start_ns"])[0],
            struct.unpack_from("<Q", page, OFFSETS["expected_end_ns"])[0])


def test_publish_writes_the_expected_window_in_ns_and_clears_it(doorbell):
    before = _page(doorbell.path)
    doorbell.publish("low", frozenset({"high"}), expected=(12.5, 12.503))
    page = _page(doorbell.path)
    assert _window(page) == (12_500_000_000, 12_503_000_000) == doorbell.read_expected()
    # Nothing else moved but the holder, contended and the flag.
    expected = bytearray(before)
    struct.pack_into("<I", expected, OFFSETS["holder_slot"], doorbell.slot("low"))
    struct.pack_into("<I", expected, OFFSETS["contended"], 1)
    struct.pack_into("<QQ", expected, OFFSETS["expected_start_ns"], 12_500_000_000, 12_503_000_000)
    expected[OFFSETS["may_preempt"] + doorbell.slot("high") - 1] = 1
    assert page == bytes(expected)
    doorbell.publish("low", frozenset({"high"}))
    assert _window(_page(doorbell.path)) == (0, 0)


def test_publish_gives_a_slot_to_a_group_it_names_first(doorbell):
    doorbell.publish("holder", frozenset({"waiter"}))
    page = _page(doorbell.path)
    assert _u32(page, "holder_slot") == doorbell.slot("holder") == 1
    assert _flag(page, doorbell.slot("waiter")) == 1


def test_publish_leaves_the_shims_ring_fields_alone(doorbell):
    _ring(doorbell.path, seq=5, slot=3, ns=123_456_789)
    doorbell.publish("a", frozenset({"b"}))
    doorbell.publish(None, frozenset())
    assert doorbell.read_ring() == (5, 3, 123_456_789)


def test_forget_clears_the_forgotten_groups_flag(doorbell):
    doorbell.publish("low", frozenset({"high"}))
    high = doorbell.slot("high")
    doorbell.forget("high")
    assert _flag(_page(doorbell.path), high) == 0
    # Its slot, now another group's, is flagged again only when that group is.
    assert doorbell.slot("newcomer") == high
    doorbell.publish("low", frozenset())
    assert _flag(_page(doorbell.path), high) == 0
    doorbell.publish("low", frozenset({"newcomer"}))
    assert _flag(_page(doorbell.path), high) == 1


def test_reopening_keeps_the_inode_and_ring_count_and_clears_the_rest(tmp_path):
    path = tmp_path / preempt_doorbell.FILE_NAME
    first = PreemptDoorbell(path)
    first.publish("low", frozenset({"high"}), expected=(1.0, 1.002))
    _ring(path, seq=9, slot=first.slot("high"), ns=42)
    inode = path.stat().st_ino
    # A daemon that died without close(): its flags and holder are still there.
    second = PreemptDoorbell(path)
    try:
        assert path.stat().st_ino == inode
        page = _page(path)
        assert _u32(page, "magic") == preempt_doorbell.MAGIC
        assert _u32(page, "holder_slot") == 0 and _u32(page, "contended") == 0
        assert page[OFFSETS["may_preempt"]:] == bytes(preempt_doorbell.SIZE - preempt_doorbell.FLAGS_OFFSET)
        assert _window(page) == (0, 0)
        assert _u32(page, "ring_seq") == 9
        assert second.read_ring() == (9, 2, 42)  # "high" had slot 2
        assert second.slot("anyone") == 1  # numbering starts afresh
    finally:
        second.close()
        first.close()


def test_close_clears_flags_and_holder_and_leaves_the_file(tmp_path):
    path = tmp_path / preempt_doorbell.FILE_NAME
    doorbell = PreemptDoorbell(path)
    doorbell.publish("low", frozenset({"high", "mid"}), expected=(3.0, 3.001))
    _ring(path, seq=2, slot=doorbell.slot("high"), ns=7)
    doorbell.close()
    assert path.exists()
    page = _page(path)
    assert _u32(page, "magic") == preempt_doorbell.MAGIC
    assert _u32(page, "holder_slot") == 0 and _u32(page, "contended") == 0
    assert page[OFFSETS["may_preempt"]:] == bytes(preempt_doorbell.SIZE - preempt_doorbell.FLAGS_OFFSET)
    assert _window(page) == (0, 0)
    assert _u32(page, "ring_seq") == 2


def test_publish_writes_the_next_group_only_while_someone_holds(doorbell):
    page_path = doorbell.path
    doorbell.publish("a", frozenset(), others_waiting=True, next_group="b", next_client=7)
    assert _u32(_page(page_path), "next_slot") == doorbell.slot("b") == doorbell.read_next_slot()
    assert _u32(_page(page_path), "next_client") == 7 == doorbell.read_next_client()
    doorbell.publish("a", frozenset(), others_waiting=False, next_group=None, next_client=7)
    assert _u32(_page(page_path), "next_slot") == 0 and _u32(_page(page_path), "next_client") == 0
    doorbell.publish(None, frozenset(), next_group="b", next_client=7)  # no holder: a waiter is granted at once
    assert _u32(_page(page_path), "next_slot") == 0 and _u32(_page(page_path), "next_client") == 0
