"""A prepare while the GPU's tokend is down (its container restarting) fails
with a message for the pod's events that says so, naming the GPU and the
socket, not that tokend "refused" the group or the operator CLI's
GSLICE_ADMIN_SOCKET hint; once tokend is back, kubelet's retry succeeds."""
from __future__ import annotations

from dra_node import NODE


def test_prepare_while_tokend_is_down_then_after_it_is_back(node):
    node.kubelet.register()
    claim = node.cluster.allocate_claim("during-restart", NODE, "gpu-0", compute="300", memory="1Gi")
    uid = claim["metadata"]["uid"]
    node.tokend.stop()
    try:
        error = node.kubelet.prepare([claim]).claims[uid].error
    finally:
        node.tokend.start()
    assert "not reachable" in error and str(node.tokend.admin_socket) in error, error
    assert "refused" not in error and "GSLICE_ADMIN_SOCKET" not in error, error
    assert list(node.config.cdi_dir.glob("*.json")) == []

    reply = node.kubelet.prepare([claim])
    assert reply.claims[uid].error == ""
    assert node.groups()[f"k8s-{uid}"].request == 0.3
    assert node.kubelet.unprepare([claim]).claims[uid].error == ""
