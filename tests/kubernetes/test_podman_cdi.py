"""A real container: podman (runc) applies the CDI spec the plugin wrote for a
claim; a CUDA program inside, on the simulated GPU, is metered by tokend
through the mounted socket directory and keeps working across a tokend
restart. Needs root, podman and runc (scripts/bootstrap.sh installs them on
Debian/Ubuntu when run as root); skipped otherwise."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from gslice.shim_install import install_shim

from dra_node import NODE, Node, wait_for

ROOT = Path(__file__).resolve().parents[2]
SHIM = ROOT / "python" / "gslice" / "lib" / "libgslice.so"
CDI_DIR = Path("/var/run/cdi")  # where podman 4.3 looks (with /etc/cdi); files are per-claim, removed after

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("podman") or not shutil.which("runc"),
    reason="needs root, podman and runc (apt-get install podman runc; scripts/bootstrap.sh does it as root)")


def _copy_with_libraries(rootfs: Path, binary: Path, target: str) -> None:
    """Put `binary` at `target` in rootfs, with every library ldd names at its host path."""
    destination = rootfs / target.lstrip("/")
    destination.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(binary, destination)
    env = dict(os.environ, LD_LIBRARY_PATH=str(binary.parent))
    out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=True, env=env).stdout
    for line in out.splitlines():
        parts = line.split()
        path = parts[2] if "=>" in parts and len(parts) > 2 else parts[0]
        if path.startswith("/") and Path(path).exists():
            copy = rootfs / path.lstrip("/")
            if not copy.exists():
                copy.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, copy)


@pytest.fixture
def rootfs(tmp_path):
    """A minimal root filesystem: cuda_probe, the simulated driver, their libraries."""
    import gslice.simgpu as simgpu
    if not SHIM.exists():
        pytest.skip(f"{SHIM} is not built (python tools/build_native.py hook)")
    sim = Path(simgpu.lib_dir())
    probe = tmp_path / "cuda_probe"
    subprocess.run(["gcc", "-O2", f"-I{ROOT / 'include'}", str(ROOT / "tests/shim/programs/cuda_probe.c"),
                    f"-L{sim}", "-l:libcuda.so.1", "-ldl", "-o", str(probe)], check=True)
    root = tmp_path / "rootfs"
    _copy_with_libraries(root, probe, "/probe/cuda_probe")
    for name in ("libcuda.so.1", "libnvidia-ml.so.1"):
        _copy_with_libraries(root, sim / name, f"/simgpu/{name}")
    _copy_with_libraries(root, SHIM, "/host-libs-for-shim/libgslice.so")  # only its dependencies matter
    for folder in ("dev", "proc", "sys", "tmp", "run", "etc"):
        (root / folder).mkdir(exist_ok=True)
    return root


def _group_status(node, group: str):
    with node.tokend.admin() as admin:
        return admin.status().group(group)


def test_container_metered_through_cdi_across_tokend_restart(tmp_path, rootfs):
    node = Node(tmp_path, cdi_dir=CDI_DIR)
    container = f"gslice-cdi-{uuid.uuid4().hex[:8]}"
    podman = None
    uid = ""
    try:
        node.tokend.start()
        node.start_plugin()
        node.kubelet.register()
        install_shim(node.config.shim_root, source=SHIM, version=node.config.resolved_shim_version())
        claim = node.cluster.allocate_claim("pod-claim", NODE, "gpu-0", compute="500", memory="2Gi")
        uid = claim["metadata"]["uid"]
        reply = node.kubelet.prepare([claim])
        assert reply.claims[uid].error == ""
        [device_id] = reply.claims[uid].devices[0].cdi_device_ids
        group = f"k8s-{uid}"

        command = ["podman", "--runtime", "runc", "--cgroup-manager=cgroupfs", "run", "--rm", "--name", container,
                   "--network=none", "--ipc=host", "--device", device_id,
                   # this sandbox refuses runc's default rlimits
                   "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024",
                   # the simulated GPU's shared segment is tokend's (same UUID), via the host's /dev/shm
                   "--env", "LD_LIBRARY_PATH=/simgpu", "--env", f"GSLICE_SIM_NAME={node.tokend.sim_name}",
                   "--env", "GSLICE_LOG_LEVEL=info",
                   "--rootfs", str(rootfs), "/probe/cuda_probe", "loop", "driver", "12", "1000000", "0"]
        podman = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        def metered():
            if podman.poll() is not None:
                raise AssertionError(f"container exited early ({podman.returncode}): {podman.communicate()}")
            status = _group_status(node, group)
            # Charged for its launches: not tokens_granted, which a lease at
            # start (a token at attach, before any launch) makes nonzero.
            return status.clients == 1 and status.share > 0
        wait_for(metered, timeout=60, what="the container's process metered in the claim's group")

        node.tokend.restart()  # a new client.sock in the same (mounted) directory
        wait_for(metered, timeout=60, what="the container's process metered again after the tokend restart")

        out, err = podman.communicate(timeout=120)
        assert podman.returncode == 0, f"container failed ({podman.returncode}):\n{out}\n{err}"
        assert "launched=" in out, out
        assert "GSLICE_GROUP_SECRET" not in json.dumps(json.loads(
            next(CDI_DIR.glob(f"*{uid}.json")).read_text())).replace("GSLICE_GROUP_SECRET_FILE", "")

        assert node.kubelet.unprepare([claim]).claims[uid].error == ""
        assert list(CDI_DIR.glob(f"*{uid}*")) == []
    finally:
        if podman is not None and podman.poll() is None:
            subprocess.run(["podman", "--runtime", "runc", "rm", "-f", container], capture_output=True)
            podman.kill()
            podman.communicate()
        for leftover in CDI_DIR.glob(f"gslice.dev-claim_{uid}*") if uid else []:
            leftover.unlink()
        node.close()
