"""gslice.atomic_file: the one atomic replace behind the CDI specs, the DRA
checkpoint, the claims' secret files and the installed shim."""
from __future__ import annotations

import os
import stat

import pytest

from gslice.atomic_file import write_atomically


def test_writes_with_the_mode_and_replaces_by_rename(tmp_path):
    target = tmp_path / "spec.json"
    write_atomically(target, b"one\n", mode=0o444)
    assert target.read_bytes() == b"one\n" and stat.S_IMODE(target.stat().st_mode) == 0o444
    reader = open(target, "rb")   # a reader of the old file keeps the old content
    old_inode = target.stat().st_ino
    write_atomically(target, b"two\n", mode=0o600, sync_dir=True)
    assert target.read_bytes() == b"two\n" and stat.S_IMODE(target.stat().st_mode) == 0o600
    assert target.stat().st_ino != old_inode and reader.read() == b"one\n"
    reader.close()
    assert os.listdir(tmp_path) == ["spec.json"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "checkpoint.json"
    write_atomically(target, b"old")
    with pytest.raises(TypeError):
        write_atomically(target, "not bytes")   # fails after the temporary exists
    assert target.read_bytes() == b"old" and os.listdir(tmp_path) == ["checkpoint.json"]
