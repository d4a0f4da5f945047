"""The CLI against a tokend whose client socket is in a directory of its own
(--client-socket-dir, as the Kubernetes DaemonSet runs it): with only
GSLICE_ADMIN_SOCKET set, `gslice group create`, `gslice run` and `gslice
doctor` must name the socket the daemon really serves, not a client.sock
beside the admin socket that does not exist."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest


def _cli(tokend, *args, env=None):
    full_env = {k: v for k, v in os.environ.items() if k != "GSLICE_SOCKET"}
    full_env.update(GSLICE_ADMIN_SOCKET=str(tokend.admin_socket), **(env or {}))
    return subprocess.run([sys.executable, "-m", "gslice.cli", *args], capture_output=True, text=True,
                          env=full_env, timeout=60)


@pytest.fixture
def tokend_own_client_dir(tokend_factory):
    daemon = tokend_factory(own_client_dir=True)
    assert daemon.client_socket.parent != daemon.admin_socket.parent
    return daemon


def test_group_create_names_the_daemons_client_socket(tokend_own_client_dir):
    result = _cli(tokend_own_client_dir, "group", "create", "g", "--request", "20%", "--memory", "1GiB")
    assert result.returncode == 0, result.stderr
    assert f"GSLICE_SOCKET={tokend_own_client_dir.client_socket}\n" in result.stdout


def test_run_uses_the_daemons_client_socket(tokend_own_client_dir):
    tokend_own_client_dir.admin().create_group("r", request=0.2, memory="1GiB")
    result = _cli(tokend_own_client_dir, "run", "--group", "r", "--", "sh", "-c", 'echo "$GSLICE_SOCKET"')
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(tokend_own_client_dir.client_socket)
    # An explicit --socket still wins.
    result = _cli(tokend_own_client_dir, "run", "--group", "r", "--socket", "/elsewhere.sock", "--",
                  "sh", "-c", 'echo "$GSLICE_SOCKET"')
    assert result.stdout.strip() == "/elsewhere.sock"


def test_doctor_checks_the_daemons_client_socket(tokend_own_client_dir):
    result = _cli(tokend_own_client_dir, "doctor")
    line = next(l for l in result.stdout.splitlines() if "client socket" in l)
    assert line.startswith("[ok") and str(tokend_own_client_dir.client_socket) in line, result.stdout
