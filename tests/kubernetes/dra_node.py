"""Fixtures for the DRA plugin's tests (importable under a unique name; conftest
re-exports them). A node for the DRA plugin: a real tokend on the simulated GPU (client
socket in a directory of its own), the plugin's folders in a private temp
directory, an in-memory API server, and a fake kubelet."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from fake_kubelet import FakeKubelet

from gslice.kubernetes.config import PluginConfig
from gslice.kubernetes.driver import Driver
from gslice.kubernetes.fake_cluster import InMemoryCluster
from gslice.kubernetes.plugin import KubeletPlugin
from gslice.shim_install import install_shim
from gslice.testing import TokendProcess, wait_for  # noqa: F401 (wait_for: for the tests)

NODE = "node-a"
GPU_MEMORY = 16 * 1024**3


class Node:
    def __init__(self, tmp_path: Path, cdi_dir: Path | None = None, own_client_dir: bool = True):
        # Unix socket paths are limited to 108 bytes: a short root.
        self.root = Path(tempfile.mkdtemp(prefix="gsdra-", dir="/tmp"))
        self.tokend = TokendProcess(tmp_path, gpu="sim", own_client_dir=own_client_dir, fake_gpu_memory=GPU_MEMORY,
                                    log_level="info")
        self.cluster = InMemoryCluster()
        self.config = PluginConfig(
            node_name=NODE, registry_dir=self.root / "registry", plugins_dir=self.root / "plugins",
            cdi_dir=cdi_dir or self.root / "cdi", nvidia_cdi_dirs=(self.root / "etc-cdi",), state_dir=self.root / "state",
            shim_root=self.root / "opt", tokend_admin_sockets=str(self.tokend.admin_socket),
            cleanup_interval=3600.0)
        self.plugin: KubeletPlugin | None = None
        self.kubelet: FakeKubelet | None = None
        # What the DaemonSet's init step does: the shim in <shim root>/<version>/lib
        # (a stand-in file: only tests that start a container need the real one).
        stand_in = self.root / "libgslice.so"
        stand_in.write_bytes(b"\x7fELF stand-in for the shim")
        install_shim(self.config.shim_root, source=stand_in, version=self.config.resolved_shim_version())

    def start_plugin(self) -> KubeletPlugin:
        self.plugin = KubeletPlugin(self.config, Driver(self.config, self.cluster)).start()
        wait_for(lambda: self.plugin.loop_runs >= 1, what="the plugin's first slice/clean-up round")
        self.kubelet = FakeKubelet(self.config.registry_dir)
        return self.plugin

    def stop_plugin(self) -> None:
        if self.kubelet is not None:
            self.kubelet.close()
            self.kubelet = None
        if self.plugin is not None:
            self.plugin.stop()
            self.plugin = None

    def groups(self) -> dict:
        with self.tokend.admin() as admin:
            return {g.name: g for g in admin.list_groups()}

    def close(self) -> None:
        self.stop_plugin()
        self.tokend.close()
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def node(tmp_path):
    node = Node(tmp_path)
    try:
        node.tokend.start()
        node.start_plugin()
        yield node
    finally:
        node.close()
