"""The DRA plugin driven by a fake kubelet over its unix sockets, against a
real tokend on the simulated GPU and an in-memory API server."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from kubernetes.utils.quantity import parse_quantity

from gslice.client import Priority
from gslice.kubernetes.checkpoint import Checkpoint

import cdi_rules
from dra_node import GPU_MEMORY, NODE, Node, wait_for

GiB = 1024**3
MiB = 1024**2
HIGH = {"apiVersion": "gslice.dev/v1alpha1", "kind": "GroupConfig", "priority": "high"}


def _leftovers(node, uid: str) -> list[str]:
    """What of claim `uid` is still on the node (group, spec, secret, checkpoint)."""
    found = []
    if f"k8s-{uid}" in node.groups():
        found.append("group")
    found += [f"spec {p.name}" for p in node.config.cdi_dir.glob(f"*{uid}*")]
    if (node.config.claims_dir / uid).exists():
        found.append("claim dir")
    if Checkpoint(node.config.checkpoint_path).get(uid) is not None:
        found.append("checkpoint entry")
    return found


def test_registration_and_slice(node):
    info = node.kubelet.register()
    assert info.type == "DRAPlugin" and info.name == "gslice.dev"
    assert info.endpoint == str(node.config.dra_socket)
    assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
    assert node.plugin.registration.registered.is_set()
    from gslice.client import health_status
    assert health_status(info.endpoint) == "SERVING"

    [published] = node.cluster.list_slices("gslice.dev", NODE)
    spec = published["spec"]
    [owner] = published["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Node", NODE, node.cluster.nodes[NODE])
    assert spec["pool"] == {"name": NODE, "generation": 1, "resourceSliceCount": 1}
    [device] = spec["devices"]
    assert device["name"] == "gpu-0" and device["allowMultipleAllocations"] is True
    assert device["attributes"]["uuid"] == {"string": node.tokend.gpu_uuid}
    assert device["attributes"]["index"] == {"int": 0}
    # As the API server stores them: canonical quantities ("1000" is "1k").
    assert parse_quantity(device["capacity"]["compute"]["value"]) == 1000
    assert parse_quantity(device["capacity"]["memory"]["value"]) == GPU_MEMORY - 512 * MiB
    # Unchanged GPUs: the same slice, same generation.
    node.plugin.run_once()
    [again] = node.cluster.list_slices("gslice.dev", NODE)
    assert again["spec"]["pool"]["generation"] == 1


def test_gpu_whose_client_socket_sits_beside_admin_sock_is_not_offered(tmp_path, caplog):
    """Mounting that directory into pods would hand them the admin socket."""
    node = Node(tmp_path, own_client_dir=False)
    try:
        node.tokend.start()
        node.start_plugin()
        assert node.cluster.list_slices("gslice.dev", NODE) == []
        assert "Start tokend with --client-socket-dir" in caplog.text
    finally:
        node.close()


def test_prepare_and_unprepare_twice(node):
    node.kubelet.register()
    claim = node.cluster.allocate_claim("train", NODE, "gpu-0", compute="300", memory="8Gi", class_config=HIGH,
                                        claim_config={"apiVersion": "gslice.dev/v1alpha1", "kind": "GroupConfig",
                                                      "limit": "50%"})
    uid = claim["metadata"]["uid"]
    share_id = claim["status"]["allocation"]["devices"]["results"][0]["shareID"]

    answers = [node.kubelet.prepare([claim]) for _ in range(2)]
    answers.append(node.kubelet.prepare([claim], version="v1beta1.DRAPlugin"))
    for reply in answers:
        result = reply.claims[uid]
        assert result.error == ""
        [device] = result.devices
        assert list(device.cdi_device_ids) == [f"gslice.dev/claim={uid}"]
        assert (device.pool_name, device.device_name, list(device.request_names)) == (NODE, "gpu-0", ["gpu"])
    assert answers[0].claims[uid].devices[0].share_id == share_id

    group = node.groups()[f"k8s-{uid}"]
    assert group.request == pytest.approx(0.3) and group.limit == pytest.approx(0.5)
    assert group.memory_quota == 8 * GiB and group.priority == Priority.HIGH
    assert group.labels["gslice.dev/claim"] == "default/train"
    assert group.labels["gslice.dev/pods"] == "default/trainer"

    [spec_file] = node.config.cdi_dir.glob("*.json")
    spec = json.loads(spec_file.read_text())
    assert cdi_rules.problems(spec) == []
    env = dict(e.split("=", 1) for e in spec["devices"][0]["containerEdits"]["env"])
    assert env["GSLICE_GROUP"] == f"k8s-{uid}"
    secret_file = node.config.claims_dir / uid / "group-secret"
    with node.tokend.admin() as admin:
        assert secret_file.read_text() == admin.group_secret(f"k8s-{uid}") + "\n"
    mounts = {m["containerPath"]: m["hostPath"] for m in spec["devices"][0]["containerEdits"]["mounts"]}
    assert mounts["/run/gslice/socket"] == str(node.tokend.client_socket_dir)
    assert not (Path(mounts["/run/gslice/socket"]) / "admin.sock").exists()
    assert mounts["/run/gslice/group-secret"] == str(secret_file)
    # The preemption doorbell: the one file a tenant writes, mounted over its
    # name after (inside) the read-only socket directory.
    order = [m["containerPath"] for m in spec["devices"][0]["containerEdits"]["mounts"]]
    options = {m["containerPath"]: m["options"] for m in spec["devices"][0]["containerEdits"]["mounts"]}
    assert mounts["/run/gslice/socket/client.doorbell"] == str(node.tokend.client_socket_dir / "client.doorbell")
    assert order.index("/run/gslice/socket") < order.index("/run/gslice/socket/client.doorbell")
    assert "rw" in options["/run/gslice/socket/client.doorbell"] and "ro" in options["/run/gslice/socket"]
    assert Checkpoint(node.config.checkpoint_path).get(uid).state == "prepared"

    for _ in range(2):
        reply = node.kubelet.unprepare([claim])
        assert reply.claims[uid].error == ""
        assert _leftovers(node, uid) == []


def test_prepare_recreates_spec_lost_with_tmpfs(node):
    """After a reboot /var/run/cdi is empty; kubelet prepares again."""
    node.kubelet.register()
    claim = node.cluster.allocate_claim("infer", NODE, "gpu-0", compute="200", memory="2Gi")
    uid = claim["metadata"]["uid"]
    assert node.kubelet.prepare([claim]).claims[uid].error == ""
    shutil.rmtree(node.config.cdi_dir)
    assert node.kubelet.prepare([claim]).claims[uid].error == ""
    assert len(list(node.config.cdi_dir.glob("*.json"))) == 1
    assert node.groups()[f"k8s-{uid}"].request == pytest.approx(0.2)
    assert node.kubelet.unprepare([claim]).claims[uid].error == ""


@pytest.mark.parametrize("case", ["over 100%", "bad limit", "forged priority", "not allocated", "other uid",
                                  "unknown device"])
def test_refused_claim_leaves_nothing(node, case):
    node.kubelet.register()
    claim_config = None
    if case == "over 100%":
        with node.tokend.admin() as admin:
            admin.create_group("by-hand", request="80%", memory="1GiB")
    if case == "bad limit":
        claim_config = {"apiVersion": "gslice.dev/v1alpha1", "kind": "GroupConfig", "limit": "20%"}
    if case == "forged priority":
        claim_config = {"apiVersion": "gslice.dev/v1alpha1", "kind": "GroupConfig", "priority": "high"}
    device = "gpu-7" if case == "unknown device" else "gpu-0"
    claim = node.cluster.allocate_claim("big", NODE, device, compute="300", memory="4Gi",
                                        claim_config=claim_config)
    uid = claim["metadata"]["uid"]
    if case == "not allocated":
        del node.cluster.claims[("default", "big")]["status"]["allocation"]
    if case == "other uid":
        claim["metadata"]["uid"] = "0e4b3f7c-0000-4000-8000-000000000000"
        uid = claim["metadata"]["uid"]

    reply = node.kubelet.prepare([claim])
    error = reply.claims[uid].error
    expected = {"over 100%": "refused group", "bad limit": "limit 20% is below",
                "forged priority": "priority comes from the DeviceClass", "not allocated": "not allocated",
                "other uid": "deleted and re-created", "unknown device": "is tokend running for that GPU?"}[case]
    assert expected in error, error
    assert list(reply.claims[uid].devices) == []
    assert _leftovers(node, uid) == []
    assert list(node.config.cdi_dir.glob("*.json")) == []


def test_cleanup_after_reboot_removes_stale_claim(node):
    node.kubelet.register()
    gone = node.cluster.allocate_claim("gone", NODE, "gpu-0", compute="300", memory="1Gi", pods=("old",))
    kept = node.cluster.allocate_claim("kept", NODE, "gpu-0", compute="100", memory="1Gi", pods=("live",))
    for claim in (gone, kept):
        assert node.kubelet.prepare([claim]).claims[claim["metadata"]["uid"]].error == ""
    gone_uid, kept_uid = gone["metadata"]["uid"], kept["metadata"]["uid"]

    # The node goes down without any unprepare; meanwhile the claim is deleted.
    node.stop_plugin()
    node.tokend.stop()
    node.cluster.delete_claim("gone")
    shutil.rmtree(node.config.cdi_dir)  # /var/run/cdi is a tmpfs
    node.tokend.start()                 # groups come back from groups.json
    assert f"k8s-{gone_uid}" in node.groups()

    node.start_plugin()  # its first round cleans up
    assert _leftovers(node, gone_uid) == []
    assert f"k8s-{kept_uid}" in node.groups()
    assert Checkpoint(node.config.checkpoint_path).get(kept_uid).state == "prepared"

    # The API server being unreachable proves nothing: the clean-up keeps all.
    node.cluster.delete_claim("kept")
    node.cluster.unavailable = True
    node.plugin.run_once()
    assert f"k8s-{kept_uid}" in node.groups()
    node.cluster.unavailable = False
    node.plugin.run_once()
    assert _leftovers(node, kept_uid) == []


def test_cleanup_finds_groups_the_checkpoint_lost(node):
    node.kubelet.register()
    claim = node.cluster.allocate_claim("lost", NODE, "gpu-0", compute="300", memory="1Gi")
    uid = claim["metadata"]["uid"]
    assert node.kubelet.prepare([claim]).claims[uid].error == ""
    node.config.checkpoint_path.unlink()
    node.plugin.run_once()
    assert f"k8s-{uid}" in node.groups(), "a live claim's group must survive a lost checkpoint"
    node.cluster.delete_claim("lost")
    node.plugin.run_once()
    assert _leftovers(node, uid) == []


def test_gslice_cli_shows_claim_and_pod(node, capsys):
    from gslice.cli import main
    node.kubelet.register()
    claim = node.cluster.allocate_claim("web", NODE, "gpu-0", compute="250", memory="1Gi", pods=("web-0",))
    uid = claim["metadata"]["uid"]
    assert node.kubelet.prepare([claim]).claims[uid].error == ""
    assert main(["--admin-socket", str(node.tokend.admin_socket), "group", "ls"]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if f"k8s-{uid}" in line)
    assert "claim default/web, pod default/web-0" in line
    assert main(["--admin-socket", str(node.tokend.admin_socket), "status"]) == 0
    assert f"for: k8s-{uid}: claim default/web, pod default/web-0" in capsys.readouterr().out
    wait_for(lambda: node.kubelet.unprepare([claim]).claims[uid].error == "", what="unprepare")


def test_nvidia_cdi_device_is_answered_beside_ours(node):
    node.kubelet.register()
    nvidia_dir = node.config.nvidia_cdi_dirs[0]
    nvidia_dir.mkdir(parents=True)
    (nvidia_dir / "nvidia.json").write_text(json.dumps({
        "cdiVersion": "0.5.0", "kind": "nvidia.com/gpu",
        "devices": [{"name": node.tokend.gpu_uuid, "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}}]}))
    claim = node.cluster.allocate_claim("with-nvidia", NODE, "gpu-0", compute="100", memory="1Gi")
    uid = claim["metadata"]["uid"]
    [device] = node.kubelet.prepare([claim]).claims[uid].devices
    assert list(device.cdi_device_ids) == [f"gslice.dev/claim={uid}", f"nvidia.com/gpu={node.tokend.gpu_uuid}"]
    assert node.kubelet.unprepare([claim]).claims[uid].error == ""


def test_api_server_down_answers_prepared_claims_from_the_checkpoint(node):
    node.kubelet.register()
    ready = node.cluster.allocate_claim("ready", NODE, "gpu-0", compute="100", memory="1Gi")
    fresh = node.cluster.allocate_claim("fresh", NODE, "gpu-0", compute="100", memory="1Gi")
    ready_uid, fresh_uid = ready["metadata"]["uid"], fresh["metadata"]["uid"]
    first = node.kubelet.prepare([ready]).claims[ready_uid]
    node.cluster.unavailable = True
    reply = node.kubelet.prepare([ready, fresh])
    assert reply.claims[ready_uid] == first
    assert "cannot read claim default/fresh: API server unreachable" in reply.claims[fresh_uid].error
    assert _leftovers(node, fresh_uid) == []
    node.cluster.unavailable = False
    assert node.kubelet.unprepare([ready]).claims[ready_uid].error == ""


def test_failure_after_the_group_was_made_undoes_it(node, monkeypatch):
    """The CDI spec cannot be written (disk full, read-only /var/run/cdi): the
    group made a moment before is deleted again, and nothing else stays."""
    from gslice.kubernetes import cdi

    def disk_full(path, spec):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(cdi, "write_spec", disk_full)
    node.kubelet.register()
    claim = node.cluster.allocate_claim("full", NODE, "gpu-0", compute="100", memory="1Gi")
    uid = claim["metadata"]["uid"]
    error = node.kubelet.prepare([claim]).claims[uid].error
    assert "No space left on device" in error and "default/full" in error
    assert _leftovers(node, uid) == []


def test_crash_mid_prepare_is_undone_by_the_cleanup(node):
    """A plugin that died after creating the group (checkpoint still
    'preparing'): once the claim is gone, the clean-up deletes the group."""
    from gslice.kubernetes.checkpoint import ClaimEntry, DeviceEntry
    node.kubelet.register()
    claim = node.cluster.allocate_claim("crashed", NODE, "gpu-0", compute="100", memory="1Gi")
    uid = claim["metadata"]["uid"]
    Checkpoint(node.config.checkpoint_path).put(ClaimEntry(
        uid=uid, namespace="default", name="crashed", state="preparing",
        devices=[DeviceEntry(group=f"k8s-{uid}", admin_socket=str(node.tokend.admin_socket))],
        spec_file=str(node.config.cdi_dir / "none.json"),
        claim_dir=str(node.config.claims_dir / uid)))
    with node.tokend.admin() as admin:
        admin.create_group(f"k8s-{uid}", request="10%", memory="1GiB",
                           labels={"gslice.dev/claim-uid": uid, "gslice.dev/managed-by": "gslice-dra"})
    node.plugin.run_once()
    assert f"k8s-{uid}" in node.groups(), "the claim still exists: kubelet will prepare it again"
    assert node.kubelet.prepare([claim]).claims[uid].error == ""  # converges the half-made group
    assert node.groups()[f"k8s-{uid}"].labels["gslice.dev/claim-uid"] == uid
    node.cluster.delete_claim("crashed")
    node.plugin.run_once()
    assert _leftovers(node, uid) == []


def test_claim_with_two_requests_gets_a_group_and_cdi_device_each(node):
    """E.g. two containers of a pod on the same GPU (constraints: matchAttribute
    gslice.dev/uuid), each naming its request: separate shares, one claim."""
    node.kubelet.register()
    claim = node.cluster.allocate_claim("pair", NODE, "gpu-0", compute="200", memory="1Gi", request="reader")
    stored = node.cluster.claims[("default", "pair")]
    [first] = stored["status"]["allocation"]["devices"]["results"]
    stored["status"]["allocation"]["devices"]["results"].append(
        {**first, "request": "writer", "shareID": "b7f0c1d2-0000-4000-8000-000000000002",
         "consumedCapacity": {"compute": "500", "memory": "2Gi"}})
    uid = claim["metadata"]["uid"]
    for _ in range(2):
        result = node.kubelet.prepare([claim]).claims[uid]
        assert result.error == ""
        assert [(list(d.request_names), list(d.cdi_device_ids)) for d in result.devices] == [
            (["reader"], [f"gslice.dev/claim={uid}-0"]), (["writer"], [f"gslice.dev/claim={uid}-1"])]
    groups = node.groups()
    assert groups[f"k8s-{uid}-0"].request == pytest.approx(0.2) and groups[f"k8s-{uid}-0"].memory_quota == GiB
    assert groups[f"k8s-{uid}-1"].request == pytest.approx(0.5) and groups[f"k8s-{uid}-1"].memory_quota == 2 * GiB
    [spec_file] = node.config.cdi_dir.glob("*.json")
    spec = json.loads(spec_file.read_text())
    assert cdi_rules.problems(spec) == [] and [d["name"] for d in spec["devices"]] == [f"{uid}-0", f"{uid}-1"]
    assert node.kubelet.unprepare([claim]).claims[uid].error == ""
    assert [g for g in node.groups() if uid in g] == []
    assert _leftovers(node, uid) == []


def test_refused_second_group_takes_the_first_back(node):
    node.kubelet.register()
    with node.tokend.admin() as admin:
        admin.create_group("by-hand", request="50%", memory="1GiB")
    claim = node.cluster.allocate_claim("pair", NODE, "gpu-0", compute="200", memory="1Gi", request="a")
    stored = node.cluster.claims[("default", "pair")]
    [first] = stored["status"]["allocation"]["devices"]["results"]
    stored["status"]["allocation"]["devices"]["results"].append(
        {**first, "request": "b", "consumedCapacity": {"compute": "400", "memory": "1Gi"}})
    uid = claim["metadata"]["uid"]
    error = node.kubelet.prepare([claim]).claims[uid].error
    assert f"refused group k8s-{uid}-1" in error, error
    assert _leftovers(node, uid) == [] and [g for g in node.groups() if uid in g] == []
