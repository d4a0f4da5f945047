"""Where the CLI and API look for tokend's sockets."""
from __future__ import annotations

from pathlib import Path

from gslice import paths


def test_client_socket_order_of_precedence(monkeypatch):
    monkeypatch.delenv(paths.ENV_SOCKET, raising=False)
    monkeypatch.delenv(paths.ENV_ADMIN_SOCKET, raising=False)
    assert paths.client_socket() == paths.DEFAULT_CLIENT_SOCKET
    # A daemon keeps both sockets in its --socket-dir: follow the admin socket in use.
    assert paths.client_socket(None, "/tmp/gs/run/admin.sock") == Path("/tmp/gs/run/client.sock")
    monkeypatch.setenv(paths.ENV_ADMIN_SOCKET, "/srv/gpu1/admin.sock")
    assert paths.client_socket() == Path("/srv/gpu1/client.sock")
    monkeypatch.setenv(paths.ENV_SOCKET, "/mnt/gslice.sock")
    assert paths.client_socket(None, "/tmp/gs/run/admin.sock") == Path("/mnt/gslice.sock")
    assert paths.client_socket("/explicit.sock") == Path("/explicit.sock")
