"""The plugin's settings. Paths are host paths: the DaemonSet mounts each one
at the same path in the plugin's container, so what the plugin writes into a
CDI spec is what the container runtime on the host finds."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from . import DRIVER_NAME

KUBELET_REGISTRY_DIR = Path("/var/lib/kubelet/plugins_registry")
KUBELET_PLUGINS_DIR = Path("/var/lib/kubelet/plugins")
CDI_DIR = Path("/var/run/cdi")
# Where NVIDIA's own CDI specs may be (nvidia-ctk cdi generate).
CDI_SPEC_DIRS = (Path("/etc/cdi"), Path("/var/run/cdi"))
STATE_DIR = Path("/var/lib/gslice-dra")
SHIM_ROOT = Path("/opt/gslice")
TOKEND_ADMIN_SOCKETS = "/run/gslice/gpu*/admin.sock"


@dataclass
class PluginConfig:
    node_name: str
    driver_name: str = DRIVER_NAME
    registry_dir: Path = KUBELET_REGISTRY_DIR
    plugins_dir: Path = KUBELET_PLUGINS_DIR
    cdi_dir: Path = CDI_DIR
    nvidia_cdi_dirs: tuple[Path, ...] = CDI_SPEC_DIRS
    state_dir: Path = STATE_DIR
    shim_root: Path = SHIM_ROOT
    shim_version: str = ""  # "" = this package's version
    tokend_admin_sockets: str = TOKEND_ADMIN_SOCKETS  # a glob
    memory_reserve: int = 512 * 1024**2  # bytes of each GPU kept out of the slice (driver, contexts)
    cleanup_interval: float = 60.0  # seconds between stale-claim clean-ups / slice refreshes
    extra_labels: dict[str, str] = field(default_factory=dict)

    @property
    def plugin_dir(self) -> Path:
        return self.plugins_dir / self.driver_name

    @property
    def dra_socket(self) -> Path:
        return self.plugin_dir / "dra.sock"

    @property
    def registration_socket(self) -> Path:
        return self.registry_dir / f"{self.driver_name}-reg.sock"

    @property
    def checkpoint_path(self) -> Path:
        return self.state_dir / "checkpoint.json"

    @property
    def claims_dir(self) -> Path:
        """Per-claim files (the group secret) that CDI mounts into containers."""
        return self.state_dir / "claims"

    def resolved_shim_version(self) -> str:
        if self.shim_version:
            return self.shim_version
        from gslice import __version__
        return __version__

    def shim_lib_dir(self) -> Path:
        return self.shim_root / self.resolved_shim_version() / "lib"
