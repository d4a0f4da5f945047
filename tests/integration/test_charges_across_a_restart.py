"""A daemon restart loses nothing of what a group was charged: its window
(a capped group's cap spans the restart, or it would get a fresh window's
worth right after) and the counters `gslice status` reports since the group
was created. Before: both started from zero at every start."""
from __future__ import annotations

import json
import time

import pytest

from tokend.state_store import pack_intervals, unpack_intervals


def _use(client, seconds_each: float, times: int) -> None:
    """`times` slices of `seconds_each` of GPU time, as a shim reports them."""
    for _ in range(times):
        token = client.acquire()
        time.sleep(seconds_each)
        client.release(token, used_us=int(seconds_each * 1e6))


@pytest.mark.parametrize("how", ["stopped", "killed"])
def test_window_and_counters_carry_over_a_restart(tokend_factory, how):
    tokend = tokend_factory(gpu="fake", window=30)
    admin = tokend.admin()
    admin.create_group("capped", request=0.1, limit=0.3, memory="1GiB")
    client = tokend.shim_client("capped", admin.group_secret("capped"))
    _use(client, 0.05, 10)  # 0.5 s charged in a 30 s window
    before = admin.status().group("capped")
    assert before.charged_seconds == pytest.approx(0.5, abs=0.05)
    if how == "killed":
        time.sleep(1.6)  # a crash loses at most the last second: this run's charges are saved by now
        tokend.kill()
        tokend.start()
    else:
        tokend.restart()
    after = tokend.admin().status().group("capped")
    assert after.charged_seconds == pytest.approx(before.charged_seconds, abs=1e-6)
    assert after.tokens_granted == before.tokens_granted == 10
    # The window still holds the charges (0.5 s / 30 s), less what a few seconds of restart let slide out: none.
    assert after.share == pytest.approx(before.share, abs=0.002) and after.share > 0.015


FIELDS = {"pace_until": 0.0, "charged_total": 1.0, "tokens_granted": 1, "preemptions": 0, "expiries": 0}


@pytest.mark.parametrize("entry", [
    {"intervals_f64le": pack_intervals([[5, 1, 0]])},  # fields missing
    {"intervals_f64le": pack_intervals([[5.0, 1.0, 0.0]]), **FIELDS},  # an interval ending before it starts
    {"intervals_f64le": "not base64 !", **FIELDS},
    {"intervals_f64le": pack_intervals([[1.0, 2.0, 0.0]])[:-8], **FIELDS},  # a torn triple
    {"intervals": [[1.0, 2.0, 0.0]], **FIELDS},  # version 1's lists in a version 2 file
], ids=["fields_missing", "interval_reversed", "not_base64", "torn_triple", "lists_in_version_2"])
def test_an_unusable_charges_file_is_reported_and_the_groups_start_afresh(tokend_factory, entry):
    tokend = tokend_factory(gpu="fake", window=30)
    admin = tokend.admin()
    admin.create_group("a", request=0.2, memory="1GiB")
    _use(tokend.shim_client("a", admin.group_secret("a")), 0.02, 3)
    tokend.stop()
    state = json.loads((tokend.state_dir / "accounting.json").read_text())
    state["groups"]["a"] = entry  # a hand edit: the same boot, the rest of the file as written
    (tokend.state_dir / "accounting.json").write_text(json.dumps(state))
    tokend.start()  # before: the reversed interval's InvalidArgument stopped the start
    status = tokend.admin().status().group("a")
    assert status.charged_seconds == 0.0 and status.tokens_granted == 0
    assert "charges of group 'a'" in tokend.log_tail(80)


def test_charges_saved_by_the_previous_format_carry_over(tokend_factory):
    """Version 1 wrote each group's intervals as JSON lists (a save of them
    held the GIL from tokend's loop for milliseconds: the state_store
    comment); a daemon upgraded in place reads them, and saves version 2."""
    tokend = tokend_factory(gpu="fake", window=30)
    admin = tokend.admin()
    admin.create_group("a", request=0.2, memory="1GiB")
    _use(tokend.shim_client("a", admin.group_secret("a")), 0.05, 4)
    before = admin.status().group("a")
    tokend.stop()
    path = tokend.state_dir / "accounting.json"
    state = json.loads(path.read_text())
    assert state["version"] == 2 and "intervals" not in state["groups"]["a"]
    entry = state["groups"]["a"]
    entry["intervals"] = unpack_intervals(entry.pop("intervals_f64le"))
    assert len(entry["intervals"]) == 4
    state["version"] = 1
    path.write_text(json.dumps(state))
    tokend.start()
    after = tokend.admin().status().group("a")
    assert after.charged_seconds == pytest.approx(before.charged_seconds, abs=1e-6)
    assert after.tokens_granted == before.tokens_granted == 4
    assert after.share == pytest.approx(before.share, abs=0.002) and after.share > 0.005
