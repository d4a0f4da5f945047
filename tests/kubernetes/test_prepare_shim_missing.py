"""A claim prepared on a node where the shim is not in the folder the CDI spec
would mount (the init step did not run, or wrote another --shim-root or
version) fails the prepare with a message that names the missing file and
the versions that are installed, and leaves nothing behind. Without the
check the runtime fails later, at container creation, on a bind mount of a
folder that does not exist (or the pod runs unmetered)."""
from __future__ import annotations

import shutil

from dra_node import NODE

from test_kubelet_plugin import _leftovers


def test_prepare_refuses_a_claim_when_the_shim_is_not_installed(node):
    node.kubelet.register()
    lib_dir = node.config.shim_lib_dir()
    shutil.rmtree(lib_dir.parent)
    (node.config.shim_root / "0.0.9" / "lib").mkdir(parents=True)
    (node.config.shim_root / "0.0.9" / "lib" / "libgslice.so").write_bytes(b"old")
    claim = node.cluster.allocate_claim("noshim", NODE, "gpu-0", compute="300", memory="1Gi")
    uid = claim["metadata"]["uid"]
    error = node.kubelet.prepare([claim]).claims[uid].error
    assert str(lib_dir / "libgslice.so") in error, error
    assert "gslice-dra install-shim" in error and "installed: 0.0.9" in error, error
    assert _leftovers(node, uid) == []
