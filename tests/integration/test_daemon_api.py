"""The daemon through the operator API and the client protocol: sockets,
health, group CRUD, persistence across restarts, events."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

import gslice
from gslice import paths
from gslice.client import health_status
from gslice.testing import TokendProcess

GiB = 1024**3


def test_socket_modes_and_health(tokend):
    assert stat.S_IMODE(os.stat(tokend.client_socket).st_mode) == 0o666
    assert stat.S_IMODE(os.stat(tokend.admin_socket).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tokend.state_dir).st_mode) == 0o700
    assert health_status(tokend.client_socket) == "SERVING"
    assert health_status(tokend.admin_socket) == "SERVING"
    for socket_path, service in ((tokend.client_socket, "gslice.v1.ClientService"),
                                 (tokend.admin_socket, "gslice.v1.AdminService")):
        with grpc.insecure_channel(paths.grpc_target(socket_path)) as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=service),
                                                               timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
    assert int((tokend.socket_dir / "tokend.pid").read_text()) == tokend.pid


def test_admin_service_is_not_served_on_the_client_socket(tokend):
    with gslice.Client(tokend.client_socket) as wrong:
        with pytest.raises(gslice.DaemonError, match="UNIMPLEMENTED"):
            wrong.list_groups()


def test_group_crud_with_units(tokend):
    admin = tokend.admin()
    created = admin.create_group("train", request="30%", limit="50%", memory="2GiB", priority="high")
    assert created.group == gslice.Group("train", 0.3, 0.5, 2 * GiB, gslice.Priority.HIGH)
    assert len(created.secret) >= 32
    assert admin.group_secret("train") == created.secret
    admin.create_group("infer", request=0.2, memory=512 * 1024**2)
    assert [g.name for g in admin.list_groups()] == ["infer", "train"]
    assert admin.get_group("infer").limit == pytest.approx(0.2)  # limit defaults to the request

    updated = admin.update_group("train", memory="3GiB")
    assert (updated.request, updated.limit, updated.memory_quota, updated.priority) == (0.3, 0.5, 3 * GiB,
                                                                                        gslice.Priority.HIGH)
    assert admin.group_secret("train") == created.secret
    admin.update_group("train", rotate_secret=True)
    rotated = admin.group_secret("train")
    assert rotated != created.secret

    admin.delete_group("infer")
    assert [g.name for g in admin.list_groups()] == ["train"]
    with pytest.raises(gslice.NotFound, match="infer"):
        admin.delete_group("infer")


def test_refusals_map_to_typed_errors(tokend):
    admin = tokend.admin()
    admin.create_group("a", request=0.6, memory="1GiB")
    with pytest.raises(gslice.AlreadyExists, match="'a'"):
        admin.create_group("a", request=0.1, memory="1GiB")
    with pytest.raises(gslice.Conflict, match="sum"):
        admin.create_group("b", request=0.5, memory="1GiB")
    updated = admin.update_group("a", request=1.0, limit=1.0)  # fine alone...
    assert (updated.request, updated.limit) == (1.0, 1.0)
    with pytest.raises(gslice.Conflict, match="sum"):
        admin.create_group("b", request=0.1, memory="1GiB")  # ...but no room left
    with pytest.raises(gslice.NotFound, match="nope"):
        admin.update_group("nope", request=0.1)
    with pytest.raises(gslice.InvalidValue, match="memory_quota"):
        admin.create_group("huge", request=0.1, memory="1TiB")  # more than the GPU has
    with pytest.raises(gslice.InvalidValue, match="limit"):
        admin.update_group("a", limit=0.5)  # below its request, checked by the daemon
    # Checked locally before sending:
    for bad in (dict(request="150%"), dict(request=0.1, memory="lots"), dict(request=0.1, priority="urgent"),
                dict(request=0.3, limit=0.2)):
        with pytest.raises(gslice.InvalidValue):
            admin.create_group("c", **{"memory": "1GiB", **bad})
    with pytest.raises(gslice.InvalidValue, match="group name"):
        admin.create_group("bad name!", request=0.1, memory="1GiB")
    assert [g.name for g in admin.list_groups()] == ["a"]


def test_unreachable_daemon_names_the_socket(tmp_path):
    missing = tmp_path / "admin.sock"
    with gslice.Client(missing) as admin:
        with pytest.raises(gslice.DaemonUnavailable) as info:
            admin.status()
    assert str(missing) in str(info.value)
    assert "gslice tokend" in str(info.value) and "GSLICE_ADMIN_SOCKET" in str(info.value)


def test_admin_socket_from_environment(tokend, monkeypatch):
    monkeypatch.setenv("GSLICE_ADMIN_SOCKET", str(tokend.admin_socket))
    with gslice.Client() as admin:
        assert admin.socket_path == tokend.admin_socket
        assert admin.status().gpu_uuid == tokend.gpu_uuid


def test_attach_reply_and_memory_protocol(tokend):
    admin = tokend.admin()
    created = admin.create_group("m", request=0.5, limit=0.8, memory="1GiB", priority="low")
    proc = tokend.shim_client("m", created.secret, reserved_bytes=100)
    reply = proc.attach_reply
    assert (reply.group, reply.gpu_uuid, reply.memory_quota, reply.memory_used) == ("m", tokend.gpu_uuid, GiB, 100)
    assert reply.physical_memory > GiB
    assert reply.priority == 1
    assert 0 < reply.quantum_min_us <= reply.quantum_max_us and reply.grace_us > 0
    assert proc.reserve(GiB - 100).granted
    refused = proc.reserve(1)
    assert (refused.granted, refused.used, refused.quota) == (False, GiB, GiB)
    assert proc.release_memory(GiB // 2).used == GiB - GiB // 2
    info = proc.memory_info()
    assert (info.quota, info.used, info.physical_total) == (GiB, GiB - GiB // 2, reply.physical_memory)
    assert admin.status().group("m").memory_used == GiB - GiB // 2


def test_restart_keeps_groups_and_secrets_and_counts_redeclared_memory_once(tokend):
    admin = tokend.admin()
    created = admin.create_group("keep", request=0.4, limit=0.9, memory="1GiB", priority="high")
    proc = tokend.shim_client("keep", created.secret)
    assert proc.reserve(300 * 1024**2).granted
    tokend.restart()
    admin = tokend.admin()
    assert admin.list_groups() == [created.group]
    assert admin.group_secret("keep") == created.secret
    assert admin.status().group("keep").memory_used == 0
    # The old client id is gone; the process re-attaches declaring what it holds.
    with pytest.raises(grpc.RpcError) as info:
        proc.memory_info()
    assert info.value.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNAVAILABLE)
    again = tokend.shim_client("keep", created.secret, reserved_bytes=300 * 1024**2)
    assert again.attach_reply.memory_used == 300 * 1024**2
    assert admin.status().group("keep").memory_used == 300 * 1024**2
    assert again.reserve(1024**3 - 300 * 1024**2).granted
    assert not again.reserve(1).granted


def test_state_file_is_private_and_readable(tokend):
    tokend.admin().create_group("p", request=0.1, memory="1GiB")
    groups_file = tokend.state_dir / "groups.json"
    assert stat.S_IMODE(os.stat(groups_file).st_mode) == 0o600
    stored = json.loads(groups_file.read_text())
    assert stored["groups"][0]["name"] == "p" and stored["groups"][0]["secret"]


def test_second_daemon_on_the_same_sockets_refuses(tokend, tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "gslice.tokend", "--state-dir", str(tmp_path / "other"), "--socket-dir",
         str(tokend.socket_dir), "--fake-gpu", "GPU-y,fake,1000000"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "another tokend" in result.stderr
    assert health_status(tokend.client_socket) == "SERVING"


def test_sigterm_removes_sockets(tokend):
    assert tokend.stop() == 0
    assert not tokend.client_socket.exists() and not tokend.admin_socket.exists()
    assert not (tokend.socket_dir / "tokend.pid").exists()


def test_watch_reports_events_in_order(tokend):
    admin = tokend.admin()
    with admin.watch() as events:
        created = admin.create_group("w", request=0.2, memory="1GiB")
        proc = tokend.shim_client("w", created.secret)
        assert not proc.reserve(2 * 1024**3).granted
        admin.update_group("w", memory="512MiB")
        proc.detach()
        kinds = []
        for event in events:
            kinds.append(event.kind)
            assert event.group == "w"
            if event.kind == "client_detached":
                break
    assert kinds == ["group_created", "client_attached", "memory_refused", "quota_changed", "group_updated",
                     "client_detached"]


def test_quota_change_reaches_clients_and_over_quota_is_explained(tokend):
    admin = tokend.admin()
    created = admin.create_group("q", request=0.2, memory="1GiB")
    proc = tokend.shim_client("q", created.secret)
    assert proc.reserve(600 * 1024**2).granted
    admin.update_group("q", memory="512MiB")
    event = proc.next_event(timeout=5)
    assert event.WhichOneof("event") == "quota_changed" and event.quota_changed.memory_quota == 512 * 1024**2
    group = admin.status().group("q")
    assert group.over_quota
    assert "512" in group.note or str(512 * 1024**2) in group.note
    assert not proc.reserve(1).granted
    proc.release_memory(200 * 1024**2)
    assert not admin.status().group("q").over_quota
    assert proc.reserve(1).granted


def test_delete_refused_while_clients_attached(tokend):
    admin = tokend.admin()
    created = admin.create_group("busy", request=0.2, memory="1GiB")
    proc = tokend.shim_client("busy", created.secret)
    with pytest.raises(gslice.Conflict, match="1 attached client"):
        admin.delete_group("busy")
    proc.detach()
    admin.delete_group("busy")
    assert admin.list_groups() == []


def test_client_without_control_stream_is_detached(tokend_factory):
    # --reclaim-timeout-ms 0: the test process is not on the GPU, its memory comes back at once.
    daemon = tokend_factory(extra_args=["--control-open-timeout", "0.5", "--reclaim-timeout-ms", "0"])
    admin = daemon.admin()
    created = admin.create_group("c", request=0.2, memory="1GiB")
    proc = daemon.shim_client("c", created.secret, open_control=False)
    assert proc.reserve(1000).granted
    deadline = time.monotonic() + 10
    while admin.status().clients and time.monotonic() < deadline:
        time.sleep(0.1)
    assert admin.status().clients == []
    assert admin.status().group("c").memory_used == 0
    with pytest.raises(grpc.RpcError) as info:
        proc.reserve(1)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND


def test_wrong_gpu_uuid_is_refused_naming_both(tokend):
    created = tokend.admin().create_group("g", request=0.2, memory="1GiB")
    with pytest.raises(grpc.RpcError) as info:
        tokend.shim_client("g", created.secret, gpu_uuid="GPU-elsewhere")
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "GPU-elsewhere" in info.value.details() and tokend.gpu_uuid in info.value.details()
    ok = tokend.shim_client("g", created.secret, gpu_uuid=tokend.gpu_uuid)
    assert ok.client_id


def test_fake_gpu_flag_needed_without_nvml(tmp_path):
    """Without NVML (and without --fake-gpu) the daemon explains how to use the simulated GPU."""
    env = dict(os.environ, LD_LIBRARY_PATH="/nonexistent")
    code = ("import pynvml\n"
            "try:\n    pynvml.nvmlInit()\nexcept pynvml.NVMLError_LibraryNotFound:\n    print('missing')\n"
            "else:\n    print('present')\n")
    probe = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    if probe.stdout.strip() != "missing":
        pytest.skip("NVML is installed on this machine")
    result = subprocess.run([sys.executable, "-m", "gslice.tokend", "--state-dir", str(tmp_path / "st"),
                             "--socket-dir", str(tmp_path / "so")], env=env, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 1
    assert "NVML not found" in result.stderr and "gslice.simgpu" in result.stderr


def test_bad_flag_fails_start_clearly_and_leaves_nothing(tmp_path):
    daemon = TokendProcess(tmp_path, extra_args=["--window", "-1"])
    with pytest.raises(RuntimeError, match=r"window -1\.0 s is invalid: expected > 0"):
        daemon.start()
    assert daemon.process.returncode == 1
    assert not daemon.socket_dir.exists()
