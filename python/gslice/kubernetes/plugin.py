"""The kubelet plugin process: the DRA service (v1 and v1beta1) on
<plugins_dir>/<driver>/dra.sock, the registration service on
<registry_dir>/<driver>-reg.sock, and one background loop that publishes the
node's ResourceSlice and cleans up stale claims every `cleanup_interval`."""
from __future__ import annotations

import logging
import os
import threading
from concurrent import futures
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from gslice.kubelet import dra_v1_pb2_grpc, dra_v1beta1_pb2_grpc, pluginregistration_v1_pb2_grpc

from .config import PluginConfig
from .dra_service import DraService
from .driver import Driver
from .registration import RegistrationService

log = logging.getLogger("gslice.dra")


# A unix socket's path: sun_path holds 108 bytes with the terminating NUL.
MAX_SOCKET_PATH = 107


class SocketSetupError(Exception):
    """One of the plugin's sockets cannot be made; the message says which and why."""


def _bind(server: grpc.Server, path: Path, what: str) -> None:
    """Listen on unix socket `path`; `what` names it and its flag for the error."""
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        raise SocketSetupError(f"cannot listen on {what} {path}: the path has {len(os.fsencode(path))} bytes, "
                               f"a unix socket's may have at most {MAX_SOCKET_PATH}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)  # a socket left by a previous run
    except OSError as exc:
        raise SocketSetupError(f"cannot make {what} {path}: {exc.strerror or exc}"
                               + (f" ({exc.filename})" if exc.filename else "")) from None
    try:
        port = server.add_insecure_port(f"unix://{path}")
    except RuntimeError:  # grpc raises (newer) or returns 0 (older)
        port = 0
    if port == 0:
        raise SocketSetupError(f"cannot listen on {what} {path}: the folder must be writable by the plugin and "
                               "the path free")


class KubeletPlugin:
    def __init__(self, config: PluginConfig, driver: Driver):
        self.config = config
        self.driver = driver
        self.registration = RegistrationService(config.driver_name, str(config.dra_socket))
        self._stop = threading.Event()
        self._loop_thread: threading.Thread | None = None
        self._servers: list[grpc.Server] = []
        self.loop_runs = 0

    def start(self) -> "KubeletPlugin":
        """Serves both sockets; on failure nothing is left serving or bound."""
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> "KubeletPlugin":
        # The DRA socket first: kubelet connects to it as soon as GetInfo names it.
        dra = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        # v1 and v1beta1 (same messages): kubelet picks one from GetInfo's versions.
        service = DraService(self.driver)
        dra_v1_pb2_grpc.add_DRAPluginServicer_to_server(service, dra)
        dra_v1beta1_pb2_grpc.add_DRAPluginServicer_to_server(service, dra)
        # grpc.health.v1 beside it, for whoever watches the plugin's liveness.
        self.health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, dra)
        _bind(dra, self.config.dra_socket, "the DRA socket (--plugins-dir)")
        dra.start()
        self._servers.append(dra)
        registration = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        pluginregistration_v1_pb2_grpc.add_RegistrationServicer_to_server(self.registration, registration)
        _bind(registration, self.config.registration_socket, "the registration socket (--registry-dir)")
        registration.start()
        self._servers.append(registration)
        self.health.set("", health_pb2.HealthCheckResponse.SERVING)
        self._loop_thread = threading.Thread(target=self._loop, name="gslice-dra-loop", daemon=True)
        self._loop_thread.start()
        log.info("driver %s on node %s: DRA service on %s, registration on %s", self.config.driver_name,
                 self.config.node_name, self.config.dra_socket, self.config.registration_socket)
        return self

    def run_once(self) -> None:
        """One round of the background loop: publish the slice, clean up."""
        try:
            self.driver.publish_slice()
        except Exception as exc:
            log.warning("publishing the ResourceSlice failed: %s", exc)
        try:
            self.driver.cleanup()
        except Exception:
            log.exception("clean-up failed")
        self.loop_runs += 1

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.run_once()
            self._stop.wait(self.config.cleanup_interval)

    def stop(self) -> None:
        self._stop.set()
        if self._loop_thread is not None:
            self._loop_thread.join(timeout=30)
        for server in reversed(self._servers):
            server.stop(grace=2).wait()
        self._servers.clear()
        # Kubelet notices the registration socket is gone and deregisters.
        for path in (self.config.registration_socket, self.config.dra_socket):
            if path.is_socket():
                os.unlink(path)

    def __enter__(self) -> "KubeletPlugin":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
