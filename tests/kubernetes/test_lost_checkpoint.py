"""After the checkpoint is lost (moved away, as its own error message tells
operators to do), the clean-up still keeps what live claims need: their CDI
specs and secret folders, without which a container restart fails with
"unresolvable CDI device". A claim's files go only once the API server says
the claim is gone, and nothing goes while it cannot be asked."""
from __future__ import annotations

import json

from dra_node import NODE

CLAIM_REF_FILE_NAME = "claim.json"  # as docs/kubernetes.md names it


def _prepared(node, name: str) -> str:
    claim = node.cluster.allocate_claim(name, NODE, "gpu-0", compute="100", memory="1Gi")
    uid = claim["metadata"]["uid"]
    assert node.kubelet.prepare([claim]).claims[uid].error == ""
    return uid


def _files(node, uid: str) -> list[str]:
    found = [p.name for p in node.config.cdi_dir.glob(f"*{uid}*")]
    if (node.config.claims_dir / uid).is_dir():
        found.append("claim folder")
    return found


def _lose_checkpoint(node) -> None:
    node.config.checkpoint_path.rename(node.config.checkpoint_path.with_name("checkpoint.json.moved-away"))


def test_a_lost_checkpoint_keeps_live_claims_files(node):
    node.kubelet.register()
    live, gone = _prepared(node, "live"), _prepared(node, "gone")
    _lose_checkpoint(node)
    node.cluster.delete_claim("gone")
    node.plugin.run_once()
    assert len(_files(node, live)) == 2, "a live claim's CDI spec or secret folder was deleted"
    assert f"k8s-{live}" in node.groups()
    assert _files(node, gone) == [] and f"k8s-{gone}" not in node.groups()


def test_a_gone_claim_without_a_group_is_found_by_its_folder(node):
    """Its group was deleted by hand: the claim folder's claim.json names the claim."""
    node.kubelet.register()
    live, gone = _prepared(node, "live"), _prepared(node, "gone")
    assert json.loads((node.config.claims_dir / gone / CLAIM_REF_FILE_NAME).read_text()) == {
        "namespace": "default", "name": "gone", "uid": gone}
    _lose_checkpoint(node)
    with node.tokend.admin() as admin:
        admin.delete_group(f"k8s-{live}")
        admin.delete_group(f"k8s-{gone}")
    node.plugin.run_once()
    assert len(_files(node, gone)) == 2, "the files of a claim that still exists were deleted"
    node.cluster.delete_claim("gone")
    node.plugin.run_once()
    assert _files(node, gone) == []
    assert len(_files(node, live)) == 2


def test_nothing_goes_while_the_api_server_cannot_be_asked(node):
    node.kubelet.register()
    gone = _prepared(node, "gone")
    _lose_checkpoint(node)
    node.cluster.delete_claim("gone")
    node.cluster.unavailable = True
    node.plugin.run_once()
    assert len(_files(node, gone)) == 2 and f"k8s-{gone}" in node.groups()
    node.cluster.unavailable = False
    node.plugin.run_once()
    assert _files(node, gone) == [] and f"k8s-{gone}" not in node.groups()


def test_files_that_name_no_claim_are_kept_and_reported(node, caplog):
    """Neither a group nor claim.json says which claim they belong to: kept, with what to do."""
    node.kubelet.register()
    uid = _prepared(node, "c")
    _lose_checkpoint(node)
    with node.tokend.admin() as admin:
        admin.delete_group(f"k8s-{uid}")
    (node.config.claims_dir / uid / CLAIM_REF_FILE_NAME).unlink()
    node.plugin.run_once()
    node.plugin.run_once()
    assert len(_files(node, uid)) == 2
    [report] = [r.getMessage() for r in caplog.records if uid in r.getMessage() and "by hand" in r.getMessage()]
    assert str(node.config.claims_dir / uid) in report
