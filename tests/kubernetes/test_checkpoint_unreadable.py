"""A checkpoint the plugin cannot read (a disk problem, a hand edit) fails
prepare and unprepare with its own message, which names the file and what
to do, rather than as a "plugin internal error" with a Python repr."""
from __future__ import annotations

from dra_node import NODE


def test_unreadable_checkpoint_is_reported_plainly(node):
    node.kubelet.register()
    node.config.checkpoint_path.parent.mkdir(parents=True, exist_ok=True)
    node.config.checkpoint_path.write_text("{not json")
    claim = node.cluster.allocate_claim("ck", NODE, "gpu-0", compute="100", memory="1Gi")
    uid = claim["metadata"]["uid"]
    for error in (node.kubelet.prepare([claim]).claims[uid].error,
                  node.kubelet.unprepare([claim]).claims[uid].error):
        assert str(node.config.checkpoint_path) in error and "move it away" in error, error
        assert "internal error" not in error and "CheckpointError(" not in error, error
    assert f"k8s-{uid}" not in node.groups()
