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


def test_a_client_socket_folder_that_contains_an_admin_socket_is_not_offered(tmp_path, caplog):
    """--socket-dir /run/gslice/gpu0 --client-socket-dir /run/gslice: mounting
    the client folder would hand pods /run/gslice/gpu0/admin.sock (a subfolder),
    which the check for an admin.sock right beside client.sock missed."""
    from gslice.testing import TokendProcess
    tokend = TokendProcess(tmp_path, gpu="fake", metrics=False, log_level="info")
    root = tokend.socket_dir
    args = tokend.args
    args[args.index("--socket-dir") + 1] = str(root / "gpu0")
    tokend.args = args + ["--client-socket-dir", str(root)]
    tokend.admin_socket = root / "gpu0" / "admin.sock"
    tokend.client_socket = root / "client.sock"
    try:
        tokend.start()
        with caplog.at_level(logging.WARNING, logger="gslice.dra"):
            assert discover(str(root / "gpu*" / "admin.sock")) == []
        assert f"GPU of {tokend.admin_socket} not offered" in caplog.text
        assert str(tokend.admin_socket) in caplog.text and "--client-socket-dir" in caplog.text, caplog.text
    finally:
        tokend.close()


def test_a_client_socket_folder_the_plugin_cannot_see_is_named(tmp_path, caplog, monkeypatch):
    """E.g. the plugin's container does not mount it at the same path."""
    import gslice.kubernetes.tokends as tokends
    from gslice.testing import TokendProcess
    tokend = TokendProcess(tmp_path, gpu="fake", metrics=False, log_level="info", own_client_dir=True)
    try:
        tokend.start()

        def not_mounted(path):
            raise FileNotFoundError(2, "No such file or directory", str(path))
        with monkeypatch.context() as patch, caplog.at_level(logging.WARNING, logger="gslice.dra"):
            patch.setattr(tokends.os, "listdir", not_mounted)
            assert discover(str(tokend.admin_socket)) == []
        assert f"client socket at {tokend.client_socket}, which the plugin cannot see" in caplog.text, caplog.text
    finally:
        tokend.close()
