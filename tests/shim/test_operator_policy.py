"""Issue 9: the tenant's environment cannot turn enforcement looser than the
operator decided (finding 4), and the secret can come from a file instead of
a command line or the environment (finding 6)."""
from __future__ import annotations

import os
import signal
import time

import pytest

from shim_harness import GATE_CUT, assert_charged_for, group_env, parse_kv, wait_for_line
from test_lifecycle import read_stderr_until


def test_tenant_cannot_choose_to_run_unmetered_when_tokend_is_away(runner, tmp_path):
    """Before: GSLICE_ON_DAEMON_LOSS=open in the tenant's own environment ran
    every launch unmetered. Now the operator's policy (default wait) holds."""
    env = {"GSLICE_SOCKET": str(tmp_path / "none.sock"), "GSLICE_GROUP": "g", "GSLICE_ON_DAEMON_LOSS": "open"}
    p = runner.start("launch", "driver", 50, 10000, **env)
    try:
        text = read_stderr_until(p, "launches wait until it is back", timeout=20)
        assert "GSLICE_ON_DAEMON_LOSS=open is ignored" in text
        assert "UNMETERED" not in text
        assert p.poll() is None  # waiting, not running unmetered
    finally:
        p.kill()
        p.wait()


def test_operator_open_policy_runs_unmetered_after_tokend_is_lost(runner, tokend):
    admin = tokend.admin()
    created = admin.create_group("g", request=0.5, limit=1.0, memory="1GiB")
    admin.update_group("g", on_daemon_loss="open")
    p = runner.start("loop", "driver", 4, 200_000, 0, **group_env(tokend, "g", created.secret))
    wait_for_line(p, "ready=", timeout=30)
    time.sleep(1.0)
    tokend.stop()
    kv = parse_kv(wait_for_line(p, "launched=", timeout=60, collect=True))
    p.wait(timeout=30)
    err = p.stderr.read()
    assert p.returncode == 0, err
    assert int(kv["launched"]) > 0
    assert "UNMETERED" in err


@pytest.mark.parametrize("shim_build", ["normal", GATE_CUT], indirect=True)
def test_secret_from_a_file(runner, tokend, tmp_path, shim_build):
    created = tokend.admin().create_group("g", request=0.5, memory="1GiB")
    secret_file = tmp_path / "secret"
    secret_file.write_text(created.secret + "\n")
    os.chmod(secret_file, 0o600)
    env = {"GSLICE_SOCKET": str(tokend.client_socket), "GSLICE_GROUP": "g",
           "GSLICE_GROUP_SECRET_FILE": str(secret_file), "GSLICE_DAEMON_WAIT_MS": "3000"}
    rc, out, err = runner.run("launch", "driver", 20, 10000, timeout=60, **env)
    assert rc == 0, err
    assert out["launched"] == "20"
    with shim_build.expect_feature():
        assert_charged_for(tokend.admin(), "g", 20 * 10000 / 1e9)   # attached with the file's secret: metered
    secret_file.write_text("wrong\n")
    p = runner.start("launch", "driver", 20, 10000, **env)
    try:
        # Refused, its launches wait (with the gate cut they run and it exits before the refusal).
        with shim_build.expect_feature():
            read_stderr_until(p, "refused Attach", timeout=20)
    finally:
        p.kill()
        p.wait()
