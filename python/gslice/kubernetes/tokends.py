"""The node's GPUs, as its tokends describe them (admin API status): no second
NVML reader. One tokend per GPU; each is found by its admin socket (a glob,
e.g. /run/gslice/gpu*/admin.sock)."""
from __future__ import annotations

import glob
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from gslice import paths
from gslice.client import Client
from gslice.errors import GsliceError

log = logging.getLogger("gslice.dra")
STATUS_TIMEOUT = 5.0


@dataclass(frozen=True)
class GpuTokend:
    index: int
    uuid: str
    product_name: str
    memory_total: int  # bytes
    admin_socket: Path
    client_socket: Path

    @property
    def device_name(self) -> str:
        """The device's name in the ResourceSlice (a DNS label)."""
        return f"gpu-{self.index}"

    @property
    def client_socket_dir(self) -> Path:
        return self.client_socket.parent

    def admin(self) -> Client:
        return Client(self.admin_socket, timeout=STATUS_TIMEOUT)


def read_tokend(admin_socket: Path) -> GpuTokend:
    """One tokend's GPU; GsliceError when it does not answer, ValueError when
    its client socket cannot be handed to containers safely."""
    with Client(admin_socket, timeout=STATUS_TIMEOUT) as admin:
        status = admin.status()
    client_socket = Path(status.client_socket) if status.client_socket else admin_socket.with_name(
        paths.CLIENT_SOCKET_NAME)
    if (client_socket.parent / paths.ADMIN_SOCKET_NAME).exists():
        raise ValueError(
            f"tokend of GPU {status.gpu_uuid} keeps its client socket beside its admin socket in "
            f"{client_socket.parent}; mounting that directory would give containers the admin socket. "
            "Start tokend with --client-socket-dir DIR (a directory of its own)")
    # CDI mounts the whole folder: anything else in it (an admin socket in a
    # subfolder, another GPU's sockets) would enter the pods too.
    try:
        others = sorted(set(os.listdir(client_socket.parent)) - {paths.CLIENT_SOCKET_NAME, paths.DOORBELL_FILE_NAME,
                                                                  paths.CALLS_SOCKET_NAME})
    except OSError as exc:
        raise ValueError(f"tokend of GPU {status.gpu_uuid} reports its client socket at {client_socket}, which "
                         f"the plugin cannot see ({exc.strerror}): mount that folder into the plugin's container "
                         "at the same path") from None
    if others:
        raise ValueError(
            f"tokend of GPU {status.gpu_uuid} has its client socket in {client_socket.parent}, which also holds "
            f"{', '.join(others[:5])}{' ...' if len(others) > 5 else ''}; mounting it would give containers those "
            f"too (its admin socket is {admin_socket}). Start tokend with --client-socket-dir DIR, a directory "
            f"that holds client.sock (and tokend's {paths.DOORBELL_FILE_NAME} and {paths.CALLS_SOCKET_NAME}) only")
    return GpuTokend(index=status.gpu_index, uuid=status.gpu_uuid, product_name=status.gpu_name,
                     memory_total=status.physical_memory, admin_socket=Path(admin_socket),
                     client_socket=client_socket)


def discover(pattern: str) -> list[GpuTokend]:
    """Every answering tokend matched by the glob, by GPU index. Unusable ones
    are logged and left out (their GPU is not offered)."""
    found: dict[int, GpuTokend] = {}
    matches = sorted(glob.glob(pattern))
    if not matches:
        log.warning("no tokend admin socket matches %s: no GPU offered. Expected one tokend per GPU with "
                    "--socket-dir DIR so that DIR/admin.sock matches (e.g. /run/gslice/gpu0); "
                    "is tokend running, and does --tokend-admin-sockets name its folder?", pattern)
    for socket_path in matches:
        try:
            tokend = read_tokend(Path(socket_path))
        except (GsliceError, ValueError) as exc:
            log.warning("GPU of %s not offered: %s", socket_path, exc)
            continue
        if tokend.index in found:
            log.warning("GPU of %s not offered: index %d is already served by %s", socket_path, tokend.index,
                        found[tokend.index].admin_socket)
            continue
        found[tokend.index] = tokend
    return [found[i] for i in sorted(found)]
