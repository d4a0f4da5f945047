"""Issue 9, finding 7: start-up never turns a state problem into a restart
loop (Restart=always) while every process on the GPU waits. Each test failed
before the fix (tokend refused to start)."""
from __future__ import annotations

import json
import subprocess
import sys

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
