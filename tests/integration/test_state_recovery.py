"""Issue 9, finding 7: start-up never turns a state problem into a restart
loop (Restart=always) while every process on the GPU waits. Each test failed
before the fix (tokend refused to start)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

GiB = 1024**3


def test_corrupt_state_file_falls_back_to_the_last_good_table(tokend_factory):
    tokend = tokend_factory(gpu="fake")
    admin = tokend.admin()
    admin.create_group("a", request=0.2, memory="1GiB")
    admin.create_group("b", request=0.2, memory="1GiB")  # the save keeps the table with "a" as the backup
    secret_a = admin.group_secret("a")
    tokend.stop()
    state = tokend.state_dir
    assert (state / "groups.json.bak").exists()
    (state / "groups.json").write_text("{not json")
    (state / ".groups.abc123.tmp").write_text("half a save")
    tokend.start()
    status = tokend.admin().status()
    assert [g.group.name for g in status.groups] == ["a"]  # the backup's table
    assert "corrupt" in status.state_note and "groups.json.bak" in status.state_note
    assert list(state.glob("groups.json.corrupt-*"))  # kept for the operator
    assert not list(state.glob(".groups.*.tmp"))  # the interrupted save's temp file is gone
    assert tokend.shim_client("a", secret_a).attach_reply.client_id
    assert json.loads((state / "groups.json").read_text())["groups"][0]["name"] == "a"


def test_corrupt_state_without_backup_starts_with_no_groups_and_says_so(tmp_path, tokend_factory):
    tokend = tokend_factory(gpu="fake")
    tokend.stop()
    (tokend.state_dir / "groups.json").write_text("{not json")
    tokend.start()
    status = tokend.admin().status()
    assert status.groups == [] and "started with no groups" in status.state_note
    assert "corrupt" in tokend.log_tail(80)


def test_stored_quota_over_the_gpu_memory_starts_with_the_group_flagged(tokend_factory):
    """A driver upgrade or MIG change shrank the memory NVML reports."""
    tokend = tokend_factory(gpu="fake", fake_gpu_memory=8 * GiB)
    tokend.admin().create_group("big", request=0.2, memory="6GiB")
    tokend.stop()
    tokend.args[tokend.args.index("--fake-gpu") + 1] = f"{tokend.gpu_uuid},smaller,{4 * GiB}"
    tokend.start()
    admin = tokend.admin()
    big = admin.status().group("big")
    assert big.flagged and "exceeds the GPU" in big.note and big.group.memory_quota == 4 * GiB
    stored = json.loads((tokend.state_dir / "groups.json").read_text())["groups"][0]
    assert stored["memory_quota"] == 6 * GiB  # kept on disk until the operator decides
    admin.update_group("big", memory="3GiB")
    assert not admin.status().group("big").flagged


def test_flags_the_protocol_cannot_carry_are_refused(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "gslice.tokend", "--state-dir", str(tmp_path / "st"), "--socket-dir",
         str(tmp_path / "s"), "--fake-gpu", "GPU-x,fake,1000000", "--window", "100000",
         "--quantum-max-ms", "5000000"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "--quantum-max-ms" in result.stderr and "uint32" in result.stderr


def test_stored_limit_below_a_changed_minimum_starts_with_the_group_flagged(tokend_factory):
    """--quantum-min-ms raised since the group was stored: its limit now allows
    less than one minimal quantum per window. tokend refused to start (and
    under Restart=always never started again); now it enforces the minimum,
    says so, and keeps the operator's value on disk until they set one."""
    tokend = tokend_factory(gpu="fake", window=10)
    tokend.admin().create_group("tiny", request=0.001, limit=0.002, memory="1GiB")  # 20 ms per 10 s window
    tokend.stop()
    tokend.args += ["--quantum-min-ms", "50"]  # minimum limit now 50 ms / 10 s = 0.005
    tokend.start()
    admin = tokend.admin()
    tiny = admin.status().group("tiny")
    assert tiny.flagged and tiny.group.limit == pytest.approx(0.005)
    assert "stored limit 0.002" in tiny.note and "--quantum-min-ms" in tiny.note
    stored = json.loads((tokend.state_dir / "groups.json").read_text())["groups"][0]
    assert stored["limit"] == 0.002  # the operator's value, untouched by the daemon
    admin.update_group("tiny", memory="2GiB")  # another field: the limit stays flagged and kept
    assert admin.status().group("tiny").flagged
    assert json.loads((tokend.state_dir / "groups.json").read_text())["groups"][0]["limit"] == 0.002
    admin.update_group("tiny", limit=0.01)
    assert not admin.status().group("tiny").flagged
    assert json.loads((tokend.state_dir / "groups.json").read_text())["groups"][0]["limit"] == 0.01


def test_a_second_daemon_on_the_same_state_directory_is_refused_and_changes_nothing(tokend_factory, tmp_path):
    """Two GPUs' daemons left on the default --state-dir: the second loaded
    and then overwrote the first one's table (and removed its in-flight temp
    files) before failing, if it failed at all."""
    first = tokend_factory(gpu="fake")
    first.admin().create_group("a", request=0.2, memory="1GiB")
    in_flight = first.state_dir / ".groups.json.inflight.tmp"
    in_flight.write_text("a save of the first daemon, not yet renamed")
    table = (first.state_dir / "groups.json").read_bytes()
    result = subprocess.run(
        [sys.executable, "-m", "gslice.tokend", "--state-dir", str(first.state_dir), "--socket-dir",
         str(tmp_path / "other-sockets"), "--fake-gpu", "GPU-other,fake,1000000000"],
        capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert f"state directory {first.state_dir} is in use by another tokend (pid {first.pid})" in result.stderr
    assert in_flight.exists() and (first.state_dir / "groups.json").read_bytes() == table
    first.admin().create_group("b", request=0.2, memory="1GiB")  # the first daemon is unharmed
    first.restart()  # and its lock went with it
    assert [g.group.name for g in first.admin().status().groups] == ["a", "b"]


def test_a_table_lost_to_corruption_is_still_reported_after_the_next_restart(tokend_factory):
    tokend = tokend_factory(gpu="fake")
    tokend.stop()
    (tokend.state_dir / "groups.json").write_text("{not json")
    tokend.start()
    tokend.restart()  # before: the note was in memory only, and this start looked like a fresh node
    note = tokend.admin().status().state_note
    assert "groups.json.corrupt-" in note and "started with no groups" in note
    tokend.admin().create_group("a", request=0.2, memory="1GiB")  # the operator has acted
    tokend.restart()
    assert tokend.admin().status().state_note == ""


@pytest.mark.parametrize("pending", [{"x": 1}, [None], [{"group": "a", "pid": 7, "bytes": 0, "client": "c",
                                                        "since": 1.0, "since_wall": 1.0, "last_listed": 1.0,
                                                        "seen_listed": False, "lists_since": 0}]],
                         ids=["not_a_list", "an_entry_not_an_object", "an_entry_of_zero_bytes"])
def test_a_reclaim_table_of_the_wrong_shape_is_reported_and_the_daemon_starts(tokend_factory, pending):
    tokend = tokend_factory(gpu="fake")
    tokend.admin().create_group("a", request=0.2, memory="1GiB")
    tokend.stop()
    boot_id = open("/proc/sys/kernel/random/boot_id").read().strip()
    (tokend.state_dir / "reclaims.json").write_text(json.dumps({"version": 1, "boot_id": boot_id,
                                                                "pending": pending}))
    tokend.start()  # before: AttributeError or InvalidArgument, "cannot start"
    assert tokend.admin().status().group("a").memory_used == 0
    assert "reclaims.json is unusable" in tokend.log_tail(80)
