"""A hung or slow API server holds up only the prepare that waits for it:
the claim is read before the driver's lock is taken, so the other prepares
and unprepares on the node go on (kubelet's calls are not all stuck behind
one read)."""
from __future__ import annotations

import threading

import pytest

from gslice.kubernetes.config import PluginConfig
from gslice.kubernetes.driver import Driver, PrepareError
from gslice.kubernetes.fake_cluster import InMemoryCluster


class HungCluster(InMemoryCluster):
    """Reading claim "hung" waits until released, as on a connection that never answers."""

    def __init__(self):
        super().__init__()
        self.reading = threading.Event()
        self.release = threading.Event()

    def read_claim(self, namespace: str, name: str) -> dict | None:
        if name == "hung":
            self.reading.set()
            self.release.wait(30)
        return super().read_claim(namespace, name)


def test_a_hung_claim_read_does_not_hold_up_other_calls(tmp_path):
    config = PluginConfig(node_name="node-a", registry_dir=tmp_path / "registry", plugins_dir=tmp_path / "plugins",
                          cdi_dir=tmp_path / "cdi", nvidia_cdi_dirs=(), state_dir=tmp_path / "state",
                          shim_root=tmp_path / "opt", tokend_admin_sockets=str(tmp_path / "gpu*/admin.sock"))
    cluster = HungCluster()
    driver = Driver(config, cluster, discover=lambda sockets: [])
    failed = []

    def prepare_hung():
        try:
            driver.prepare("default", "hung", "uid-hung")
        except PrepareError as exc:  # the claim does not exist: fine, it only has to end
            failed.append(exc)

    hung = threading.Thread(target=prepare_hung, daemon=True)
    hung.start()
    try:
        assert cluster.reading.wait(5)
        unprepared = threading.Event()
        other = threading.Thread(target=lambda: (driver.unprepare("uid-other"), unprepared.set()), daemon=True)
        other.start()
        assert unprepared.wait(5), "an unprepare waited for another claim's API read"
    finally:
        cluster.release.set()
        hung.join(10)
    assert not hung.is_alive() and failed and "does not exist" in str(failed[0])
