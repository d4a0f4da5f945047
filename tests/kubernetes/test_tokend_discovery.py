"""The plugin finds tokends by a glob of admin sockets. A glob that matches
nothing (a wrong --tokend-admin-sockets, or tokend not started yet) leaves
the node without a ResourceSlice: the plugin's log must say so, with the glob
and what it expects, not stay silent."""
from __future__ import annotations

import logging

from gslice.kubernetes.tokends import discover


def test_a_glob_that_matches_nothing_is_logged(tmp_path, caplog):
    pattern = str(tmp_path / "gpu*" / "admin.sock")
    with caplog.at_level(logging.WARNING, logger="gslice.dra"):
        assert discover(pattern) == []
    assert pattern in caplog.text and "--socket-dir" in caplog.text, caplog.text


def test_a_socket_that_does_not_answer_is_logged(tmp_path, caplog):
    (tmp_path / "gpu0").mkdir()
    (tmp_path / "gpu0" / "admin.sock").write_text("")   # a stale file, no daemon
    with caplog.at_level(logging.WARNING, logger="gslice.dra"):
        assert discover(str(tmp_path / "gpu*" / "admin.sock")) == []
    assert f"GPU of {tmp_path / 'gpu0' / 'admin.sock'} not offered" in caplog.text, caplog.text
