"""The preemption doorbell page as the real tokend keeps it: group slots in
AttachReply, the file beside client.sock, the holder and per-group flags it
publishes after each scheduler event (read through a mapping of our own,
as a shim reads them), --preempt-doorbell off, and a restart on the same
socket directory (hook/preempt_doorbell.h, tokend/preempt_doorbell.py)."""
from __future__ import annotations

import mmap
import stat
import struct
import threading
import time

from gslice.tokend import preempt_doorbell

HOLDER_SLOT_OFFSET = 32  # gs_doorbell_page.holder_slot (tests/unit/test_preempt_doorbell_page.py checks it)
LONG_GRACE = ["--grace-ms", "60000"]  # no expiry ends a holding during a test


def _doorbell_path(tokend):
    return tokend.client_socket.parent / preempt_doorbell.FILE_NAME


def _page(tokend) -> bytes:
    with open(_doorbell_path(tokend), "rb") as file, \
            mmap.mmap(file.fileno(), preempt_doorbell.SIZE, prot=mmap.PROT_READ) as page:
        return bytes(page)


def _holder_slot(page: bytes) -> int:
    return struct.unpack_from("<I", page, HOLDER_SLOT_OFFSET)[0]


def _flag(page: bytes, slot: int) -> int:
    assert slot > 0, "no doorbell slot"
    return page[preempt_doorbell.FLAGS_OFFSET + slot - 1]


def _low_and_high(tokend):
    admin = tokend.admin()
    low = admin.create_group("low", request=0.3, limit=1.0, memory="1GiB", priority="low")
    high = admin.create_group("high", request=0.3, limit=1.0, memory="1GiB", priority="high")
    return admin, low, high


def test_each_group_gets_one_slot_and_the_file_sits_beside_client_sock(tokend_factory):
    tokend = tokend_factory()
    _, low, high = _low_and_high(tokend)
    first = tokend.shim_client("low", low.secret).attach_reply.doorbell_slot
    second = tokend.shim_client("low", low.secret).attach_reply.doorbell_slot
    other = tokend.shim_client("high", high.secret).attach_reply.doorbell_slot
    assert first > 0 and other > 0
    assert first == second
    assert other != first
    info = _doorbell_path(tokend).stat()
    assert stat.S_ISREG(info.st_mode)
    assert stat.S_IMODE(info.st_mode) == 0o666
    assert info.st_size == preempt_doorbell.SIZE
    assert _page(tokend)[:4] == b"GSDB"


def test_the_page_flags_a_higher_class_while_a_lower_one_holds(tokend_factory):
    tokend = tokend_factory(extra_args=LONG_GRACE)
    _, low, high = _low_and_high(tokend)
    holder = tokend.shim_client("low", low.secret)
    token = holder.acquire()
    urgent = tokend.shim_client("high", high.secret)  # attached, not asking
    low_slot = holder.attach_reply.doorbell_slot
    high_slot = urgent.attach_reply.doorbell_slot
    page = _page(tokend)
    assert _holder_slot(page) == low_slot
    assert _flag(page, high_slot) == 1
    assert _flag(page, low_slot) == 0
    # The high client asks: the token is handed over to it at once.
    granted: list[int] = []
    asking = threading.Thread(target=lambda: granted.append(urgent.acquire(timeout_ms=20000)))
    asking.start()
    asking.join(timeout=30)
    assert granted and granted[0] > token
    page = _page(tokend)
    assert _holder_slot(page) == high_slot
    assert _flag(page, high_slot) == 0
    assert _flag(page, low_slot) == 0


def test_a_deleted_groups_flag_is_cleared_and_its_slot_reused(tokend_factory):
    tokend = tokend_factory(extra_args=LONG_GRACE)
    admin, low, high = _low_and_high(tokend)
    tokend.shim_client("low", low.secret).acquire()
    urgent = tokend.shim_client("high", high.secret)
    slot = urgent.attach_reply.doorbell_slot
    assert _flag(_page(tokend), slot) == 1
    urgent.detach()
    admin.delete_group("high")
    assert _flag(_page(tokend), slot) == 0
    newcomer = admin.create_group("newcomer", request=0.3, limit=1.0, memory="1GiB", priority="high")
    assert tokend.shim_client("newcomer", newcomer.secret).attach_reply.doorbell_slot == slot
    assert _flag(_page(tokend), slot) == 1  # the newcomer's own flag: it would preempt "low"


def test_no_doorbell_is_offered_when_it_is_off(tokend_factory):
    tokend = tokend_factory(extra_args=["--preempt-doorbell", "off"])
    _, low, _ = _low_and_high(tokend)
    assert tokend.shim_client("low", low.secret).attach_reply.doorbell_slot == 0
    assert not _doorbell_path(tokend).exists()


def test_a_restart_keeps_the_files_inode_and_clears_what_it_said(tokend_factory):
    tokend = tokend_factory(extra_args=LONG_GRACE)
    _, low, high = _low_and_high(tokend)
    tokend.shim_client("low", low.secret).acquire()
    slot = tokend.shim_client("high", high.secret).attach_reply.doorbell_slot
    assert _flag(_page(tokend), slot) == 1
    inode = _doorbell_path(tokend).stat().st_ino
    tokend.restart()
    assert _doorbell_path(tokend).stat().st_ino == inode
    page = _page(tokend)
    assert _holder_slot(page) == 0
    assert page[preempt_doorbell.FLAGS_OFFSET:] == bytes(preempt_doorbell.SIZE - preempt_doorbell.FLAGS_OFFSET)
    # The groups came back from the state directory; their clients attach anew.
    assert tokend.shim_client("low", low.secret).attach_reply.doorbell_slot > 0


def test_the_flag_is_cleared_while_the_higher_class_waits_for_a_release(tokend_factory):
    # at-release: the holder keeps the token until it gives it back.
    tokend = tokend_factory(extra_args=LONG_GRACE + ["--preempt-handover", "at-release"])
    admin, low, high = _low_and_high(tokend)
    holder = tokend.shim_client("low", low.secret)
    token = holder.acquire()
    urgent = tokend.shim_client("high", high.secret)
    high_slot = urgent.attach_reply.doorbell_slot
    assert _flag(_page(tokend), high_slot) == 1
    granted: list[int] = []
    asking = threading.Thread(target=lambda: granted.append(urgent.acquire(timeout_ms=20000)))
    asking.start()
    try:
        event = holder.next_event(timeout=10)
        assert event is not None and event.WhichOneof("event") == "revoke"
        assert urgent.public_id in admin.status().waiting_client_ids
        page = _page(tokend)
        assert _holder_slot(page) == holder.attach_reply.doorbell_slot
        assert _flag(page, high_slot) == 0
    finally:
        holder.release(token, used_us=1000)
        asking.join(timeout=30)
    assert granted
    assert _holder_slot(_page(tokend)) == high_slot


CONTENDED_OFFSET = 40  # gs_doorbell_page.contended


def _contended(page: bytes) -> int:
    return struct.unpack_from("<I", page, CONTENDED_OFFSET)[0]


def test_contended_says_whether_anyone_else_wants_the_gpu(tokend_factory):
    tokend = tokend_factory(extra_args=LONG_GRACE)
    admin = tokend.admin()
    a = admin.create_group("a", request=0.3, limit=1.0, memory="1GiB")
    b = admin.create_group("b", request=0.3, limit=1.0, memory="1GiB")
    holder = tokend.shim_client("a", a.secret)
    token = holder.acquire()
    other = tokend.shim_client("b", b.secret)  # attached, equal class, not asking
    assert _contended(_page(tokend)) == 0  # the holder is alone: its shim need not pace long kernels
    granted: list[int] = []
    asking = threading.Thread(target=lambda: granted.append(other.acquire(timeout_ms=20000)))
    asking.start()
    deadline = time.monotonic() + 10
    while _contended(_page(tokend)) == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _contended(_page(tokend)) == 1  # "b" waits
    holder.release(token, used_us=1000)
    asking.join(timeout=30)
    assert granted and _contended(_page(tokend)) == 0  # "b" holds, nobody waits
