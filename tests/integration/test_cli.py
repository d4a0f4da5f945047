"""The `gslice` command line against a real daemon (subprocesses)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest


def gslice_cli(tokend, *args, env=None, check=True):
    full_env = dict(os.environ, GSLICE_ADMIN_SOCKET=str(tokend.admin_socket), GSLICE_SOCKET=str(tokend.client_socket))
    full_env.update(env or {})
    result = subprocess.run([sys.executable, "-m", "gslice.cli", *args], capture_output=True, text=True,
                            env=full_env, timeout=60)
    if check:
        assert result.returncode == 0, (args, result.stdout, result.stderr)
    return result


def test_group_create_explains_how_processes_join(tokend):
    result = gslice_cli(tokend, "group", "create", "train", "--request", "30%", "--limit", "50%",
                        "--memory", "4GiB", "--priority", "high")
    secret = tokend.admin().group_secret("train")
    for expected in ("GSLICE_SOCKET=" + str(tokend.client_socket), "GSLICE_GROUP=train",
                     "GSLICE_GROUP_SECRET=" + secret, "LD_PRELOAD=$(gslice lib-path)",
                     "gslice run --group train -- COMMAND", "30%", "50%", "4GiB", "high"):
        assert expected in result.stdout
    group = tokend.admin().get_group("train")
    assert (group.request, group.limit, group.memory_quota) == (0.3, 0.5, 4 * 1024**3)


def test_group_set_ls_show_rm(tokend):
    gslice_cli(tokend, "group", "create", "a", "--request", "0.2", "--memory", "512MiB")
    old_secret = tokend.admin().group_secret("a")
    gslice_cli(tokend, "group", "set", "a", "--memory", "1GiB", "--priority", "low", "--rotate-secret")
    listing = json.loads(gslice_cli(tokend, "group", "ls", "--json").stdout)
    assert listing == [{"name": "a", "request": 0.2, "limit": 0.2, "memory_quota": 1024**3, "priority": "low"}]
    assert "a" in gslice_cli(tokend, "group", "ls").stdout.splitlines()[1]
    shown = json.loads(gslice_cli(tokend, "group", "show", "a", "--secret", "--json").stdout)
    assert shown["secret"] == tokend.admin().group_secret("a") != old_secret
    assert "secret" not in json.loads(gslice_cli(tokend, "group", "show", "a", "--json").stdout)
    gslice_cli(tokend, "group", "rm", "a")
    assert json.loads(gslice_cli(tokend, "group", "ls", "--json").stdout) == []


def test_status_json_table_and_top(tokend):
    created = tokend.admin().create_group("s", request=0.25, memory="1GiB")
    proc = tokend.shim_client("s", created.secret)
    proc.reserve(1024**2)
    status = json.loads(gslice_cli(tokend, "status", "--json").stdout)
    assert status["gpu_uuid"] == tokend.gpu_uuid
    assert status["groups"][0]["group"]["name"] == "s" and status["groups"][0]["memory_used"] == 1024**2
    assert status["clients"][0]["client_id"] == proc.public_id
    table = gslice_cli(tokend, "status").stdout
    assert "GROUP" in table and "1MiB/1GiB" in table and proc.public_id in table
    top = gslice_cli(tokend, "top", "--iterations", "2", "--interval", "0.1").stdout
    assert top.count("gslice top") == 2 and "1MiB/1GiB" in top


@pytest.mark.parametrize("args, message", [
    (("group", "create", "x", "--request", "150%", "--memory", "1GiB"), "share '150%' is out of range"),
    (("group", "create", "x", "--request", "10%", "--memory", "lots"), "memory size 'lots'"),
    (("group", "rm", "ghost"), "'ghost'"),
    (("group", "set", "ghost", "--request", "10%"), "'ghost'"),
])
def test_errors_are_one_line_with_exit_1(tokend, args, message):
    result = gslice_cli(tokend, *args, check=False)
    assert result.returncode == 1
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_usage_error_exits_2(tokend):
    assert gslice_cli(tokend, "group", "create", "x", check=False).returncode == 2
    assert gslice_cli(tokend, "frobnicate", check=False).returncode == 2


def test_daemon_down_message(tokend, tmp_path):
    result = gslice_cli(tokend, "status", env={"GSLICE_ADMIN_SOCKET": str(tmp_path / "none.sock")}, check=False)
    assert result.returncode == 1
    assert str(tmp_path / "none.sock") in result.stderr and "gslice tokend" in result.stderr


def test_run_sets_the_shim_environment(tokend, tmp_path):
    from gslice.cli_doctor import shim_library_path
    created = tokend.admin().create_group("r", request=0.1, memory="1GiB")
    if not shim_library_path().exists():
        result = gslice_cli(tokend, "run", "--group", "r", "--", "true", check=False)
        assert result.returncode == 1 and "libgslice.so is not built" in result.stderr
        pytest.skip("libgslice.so is not built")
    # The secret is fetched through the admin API when not given.
    code = "import os, json; print(json.dumps({k: os.environ.get(k) for k in " \
           "('LD_PRELOAD', 'GSLICE_SOCKET', 'GSLICE_GROUP', 'GSLICE_GROUP_SECRET')}))"
    env = {"GSLICE_GROUP_SECRET": ""}
    result = gslice_cli(tokend, "run", "--group", "r", "--", sys.executable, "-c", code, env=env)
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["LD_PRELOAD"].split(":")[0] == str(shim_library_path())
    assert (seen["GSLICE_SOCKET"], seen["GSLICE_GROUP"], seen["GSLICE_GROUP_SECRET"]) == (
        str(tokend.client_socket), "r", created.secret)


def test_lib_path(tokend):
    from gslice.cli_doctor import shim_library_path
    result = gslice_cli(tokend, "lib-path", check=False)
    if shim_library_path().exists():
        assert result.returncode == 0 and result.stdout.strip() == str(shim_library_path())
    else:
        assert result.returncode == 1 and "python tools/build_native.py hook" in result.stderr


def test_doctor_reports_each_check(tokend):
    tokend.admin().create_group("d", request=0.1, memory="1GiB")
    result = gslice_cli(tokend, "doctor", "--group", "d", check=False)
    lines = result.stdout.splitlines()
    assert any(line.startswith("[ok  ] client socket") for line in lines), result.stdout
    assert any(line.startswith("[ok  ] admin socket") for line in lines)
    assert any(line.startswith("[ok  ] group 'd'") for line in lines)
    failed = [line for line in lines if line.startswith("[FAIL]")]
    assert result.returncode == (1 if failed else 0)
    missing = gslice_cli(tokend, "doctor", "--group", "ghost", check=False)
    assert missing.returncode == 1 and "[FAIL] group 'ghost'" in missing.stdout


def test_cli_tokend_runs_the_daemon_until_sigint(tmp_path):
    import signal
    import tempfile
    import time

    from gslice.client import health_status
    socket_dir = tempfile.mkdtemp(prefix="gs-cli-", dir="/tmp")
    daemon = subprocess.Popen([sys.executable, "-m", "gslice.cli", "tokend", "--state-dir", str(tmp_path / "state"),
                               "--socket-dir", socket_dir, "--fake-gpu", "GPU-cli,fake,1000000000"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        client_socket = os.path.join(socket_dir, "client.sock")
        deadline = time.monotonic() + 30
        while health_status(client_socket) != "SERVING":
            assert daemon.poll() is None and time.monotonic() < deadline, daemon.stderr.read()
            time.sleep(0.05)
        daemon.send_signal(signal.SIGINT)
        assert daemon.wait(timeout=20) == 0
        # Sockets and pid file gone; the doorbell page stays (a pod may have
        # that file mounted: a new daemon opens the same inode).
        assert sorted(os.listdir(socket_dir)) == ["client.doorbell"]
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
        daemon.stderr.close()
        shutil.rmtree(socket_dir, ignore_errors=True)


def test_watch_prints_events_as_they_happen(tokend):
    env = dict(os.environ, GSLICE_ADMIN_SOCKET=str(tokend.admin_socket))
    watcher = subprocess.Popen([sys.executable, "-m", "gslice.cli", "watch", "--json", "--count", "2"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        # The watcher subscribes asynchronously: create groups until it has seen two events.
        for i in range(50):
            tokend.admin().create_group(f"w{i}", request=0.01, memory="1MiB")
            try:
                out, err = watcher.communicate(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                continue
        else:
            pytest.fail("gslice watch printed no events")
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait()
    assert watcher.returncode == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    assert len(events) == 2 and all(e["kind"] == "group_created" for e in events), events
    assert all(e["group"].startswith("w") for e in events)
