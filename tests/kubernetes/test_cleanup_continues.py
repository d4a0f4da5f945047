"""A stale claim the clean-up cannot undo now (its tokend unreachable, or
its group refused because processes are still attached) is logged and
retried next round: the other claims, the orphan groups and the stale CDI
specs are still cleaned up in the same round."""
from __future__ import annotations

import json

from gslice.kubernetes.checkpoint import Checkpoint, ClaimEntry, DeviceEntry

from dra_node import NODE, wait_for

# Sorts before any other UID: the checkpoint is walked in UID order.
STUCK_UID = "0-stuck-claim"
MANAGED = {"gslice.dev/managed-by": "gslice-dra"}


def _stuck_claim(node, admin_socket: str) -> None:
    """A claim deleted from the API server whose group lives on `admin_socket`."""
    Checkpoint(node.config.checkpoint_path).put(ClaimEntry(
        uid=STUCK_UID, namespace="default", name="stuck", state="prepared",
        devices=[DeviceEntry(group=f"k8s-{STUCK_UID}", admin_socket=admin_socket)],
        spec_file=str(node.config.cdi_dir / f"gslice.dev-claim_{STUCK_UID}.json"),
        claim_dir=str(node.config.claims_dir / STUCK_UID)))


def _stale_state(node) -> tuple[str, str, str]:
    """A prepared claim that is then deleted, a group whose claim was never
    checkpointed (gone too) and a CDI spec of no claim: all for the clean-up."""
    node.kubelet.register()
    gone = node.cluster.allocate_claim("gone", NODE, "gpu-0", compute="100", memory="1Gi")
    gone_uid = gone["metadata"]["uid"]
    assert node.kubelet.prepare([gone]).claims[gone_uid].error == ""
    node.cluster.delete_claim("gone")
    orphan_uid = "f-orphan-claim"
    with node.tokend.admin() as admin:
        admin.create_group(f"k8s-{orphan_uid}", request="10%", memory="1GiB",
                           labels={**MANAGED, "gslice.dev/claim-uid": orphan_uid, "gslice.dev/claim": "default/x"})
    [spec] = node.config.cdi_dir.glob(f"*{gone_uid}*")
    stale_spec = spec.with_name(spec.name.replace(gone_uid, "e-no-such-claim"))
    stale_spec.write_bytes(spec.read_bytes())
    # Its folder names a claim the API server does not have: known to be stale.
    (node.config.claims_dir / "e-no-such-claim").mkdir()
    (node.config.claims_dir / "e-no-such-claim" / "claim.json").write_text(
        json.dumps({"namespace": "default", "name": "never-was", "uid": "e-no-such-claim"}))
    return gone_uid, orphan_uid, stale_spec


def _cleaned(node, gone_uid, orphan_uid, stale_spec) -> None:
    groups = node.groups()
    assert f"k8s-{gone_uid}" not in groups, "a claim after the stuck one was not cleaned up"
    assert Checkpoint(node.config.checkpoint_path).get(gone_uid) is None
    assert f"k8s-{orphan_uid}" not in groups, "the orphan-group pass did not run"
    assert not stale_spec.exists(), "the CDI spec pruning did not run"
    assert not (node.config.claims_dir / "e-no-such-claim").exists()


def test_an_unreachable_tokend_holds_up_no_other_clean_up(node, caplog):
    gone_uid, orphan_uid, stale_spec = _stale_state(node)
    _stuck_claim(node, "/nonexistent/gpu9/admin.sock")
    node.plugin.run_once()
    _cleaned(node, gone_uid, orphan_uid, stale_spec)
    assert Checkpoint(node.config.checkpoint_path).get(STUCK_UID) is not None, "kept to be retried"
    assert "/nonexistent/gpu9/admin.sock" in caplog.text and "retried next round" in caplog.text


def test_a_group_with_attached_processes_holds_up_no_other_clean_up(node):
    gone_uid, orphan_uid, stale_spec = _stale_state(node)
    with node.tokend.admin() as admin:
        created = admin.create_group(f"k8s-{STUCK_UID}", request="10%", memory="1GiB",
                                     labels={**MANAGED, "gslice.dev/claim-uid": STUCK_UID})
    _stuck_claim(node, str(node.tokend.admin_socket))
    with node.tokend.shim_client(f"k8s-{STUCK_UID}", created.secret):   # delete refused: Conflict
        node.plugin.run_once()
        _cleaned(node, gone_uid, orphan_uid, stale_spec)
        assert f"k8s-{STUCK_UID}" in node.groups()
    # The processes are gone (tokend notices at once or soon): a later round deletes it.
    wait_for(lambda: node.plugin.run_once() or f"k8s-{STUCK_UID}" not in node.groups(),
             what="the clean-up of the claim whose processes left")
    assert Checkpoint(node.config.checkpoint_path).get(STUCK_UID) is None


def test_an_orphan_group_that_cannot_be_deleted_holds_up_no_other(node):
    """The same in the pass over groups the checkpoint does not know."""
    gone_uid, orphan_uid, stale_spec = _stale_state(node)
    busy = "k8s-0-busy-orphan"   # listed before the other orphan
    with node.tokend.admin() as admin:
        created = admin.create_group(busy, request="10%", memory="1GiB", labels={
            **MANAGED, "gslice.dev/claim-uid": "0-busy", "gslice.dev/claim": "default/y"})
    with node.tokend.shim_client(busy, created.secret):
        node.plugin.run_once()
        _cleaned(node, gone_uid, orphan_uid, stale_spec)
        assert busy in node.groups()
