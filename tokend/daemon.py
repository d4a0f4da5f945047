"""Assembles one tokend: discovers the GPU, loads the groups, serves
ClientService on SOCKET_DIR/client.sock (0666: processes of any uid in any
container connect and prove membership with the group secret) and
AdminService on SOCKET_DIR/admin.sock (0600: the owner only), both with
grpc.health.v1, on one asyncio loop; stops gracefully on SIGTERM/SIGINT."""
from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import time
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from gslice.paths import ADMIN_SOCKET_NAME, CALLS_SOCKET_NAME, CLIENT_SOCKET_NAME, PID_FILE_NAME
from gslice.v1 import admin_pb2, client_pb2

from .client_service import ClientService
from .admin_service import AdminService
from .coordinator import DEFAULT_CONTROL_OPEN_TIMEOUT, Coordinator
from .calls_socket import CallsSocket
from .preempt_doorbell import FILE_NAME as DOORBELL_FILE_NAME
from .preempt_doorbell import PreemptDoorbell
from .gpu_discovery import GpuInfo, discover
from .limits import Limits
from .memory_ledger import DEFAULT_RECLAIM_TIMEOUT
from .process_watch import list_gpu_processes
from .metrics import TokendMetrics
from .rpc_guard import GRPC_MAX_RECEIVE_BYTES, RpcGuard
from .scheduler import SchedulerConfig
from .state_store import GroupStore

log = logging.getLogger("gslice.tokend")

GAUGE_REFRESH_SECONDS = 1.0
ACCOUNTING_SAVE_SECONDS = 1.0  # what a crash can lose of the groups' charges (state_store.AccountingStore)
# While memory of departed processes awaits the driver, NVML's process list
# is read this often: the memory is back within this (plus one query) of
# NVML no longer listing the process (target: 50 ms).
RECLAIM_POLL_SECONDS = 0.01
RECLAIM_QUERY_PATIENCE = 0.1  # how long a slow NVML query may hold up the reclaims' timeouts
STOP_GRACE_SECONDS = 1.0


class StartupError(Exception):
    """tokend cannot start; the message says what to fix."""


@dataclass
class DaemonOptions:
    state_dir: Path
    socket_dir: Path
    # client.sock in a directory of its own (containers mount the directory,
    # which survives restarts, and never see admin.sock); None: socket_dir.
    client_socket_dir: Path | None = None
    gpu: str | None = None
    fake_gpu: GpuInfo | None = None  # tests without NVML
    metrics_port: int = 0  # 0: no HTTP metrics endpoint
    metrics_address: str = "127.0.0.1"  # 0.0.0.0 in a pod, for Prometheus on the pod's address
    scheduler: SchedulerConfig = SchedulerConfig()
    control_open_timeout: float = DEFAULT_CONTROL_OPEN_TIMEOUT
    limits: Limits = Limits()
    bypass_policy: str = "warn"   # none | warn | kill: processes on the GPU that escape gslice
    process_watch_seconds: float = 5.0  # 0: no NVML process watch
    preempt_doorbell: bool = True  # client.doorbell beside client.sock (tokend/preempt_doorbell.py)
    calls_socket: bool = True  # client.calls beside client.sock (tokend/calls_socket.py)
    reclaim_timeout: float = DEFAULT_RECLAIM_TIMEOUT  # s: a departed process's memory, when NVML cannot tell


def _server_options(limits: Limits) -> list[tuple[str, int]]:
    return [
        ("grpc.max_receive_message_length", GRPC_MAX_RECEIVE_BYTES),
        ("grpc.max_send_message_length", 16 * 1024 * 1024),
        ("grpc.so_reuseport", 0),
        *limits.server_options(),
    ]


def _socket_in_use(path: Path) -> bool:
    """True when something accepts connections on the unix socket `path`."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(0.5)
        probe.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        probe.close()


class TokenDaemon:
    def __init__(self, options: DaemonOptions):
        self.options = options
        self.socket_dir = Path(options.socket_dir)
        self.client_socket_dir = Path(options.client_socket_dir or options.socket_dir)
        self.client_socket = self.client_socket_dir / CLIENT_SOCKET_NAME
        self.admin_socket = self.socket_dir / ADMIN_SOCKET_NAME
        self.pid_file = self.socket_dir / PID_FILE_NAME
        self._stop = asyncio.Event()
        self.metrics_port: int | None = None

    def request_stop(self) -> None:
        self._stop.set()

    def _prepare(self) -> Coordinator:
        options = self.options
        options.scheduler.validate()
        gpu = options.fake_gpu or discover(options.gpu)
        store = GroupStore(options.state_dir)
        store.prepare()  # locks the state directory: one daemon per directory
        try:
            return self._prepare_with_state(gpu, store)
        except BaseException:
            store.close()
            raise

    def _prepare_with_state(self, gpu, store: GroupStore) -> Coordinator:
        options = self.options
        metrics = TokendMetrics(gpu.uuid)
        coordinator = Coordinator(gpu, options.scheduler, store, metrics, options.control_open_timeout,
                                  options.limits, reclaim_timeout=options.reclaim_timeout)
        coordinator.load_groups()
        coordinator.client_socket = str(self.client_socket.absolute())
        for directory in {self.socket_dir, self.client_socket_dir}:
            try:
                directory.mkdir(mode=0o755, parents=True, exist_ok=True)
            except OSError as exc:
                raise StartupError(f"cannot create socket directory {directory}: {exc.strerror}") from None
        for path in (self.client_socket, self.admin_socket):
            if path.exists() or path.is_symlink():
                if _socket_in_use(path):
                    raise StartupError(f"another tokend is serving on {path}; stop it or use another --socket-dir")
                path.unlink()  # stale, from a daemon that died
        if options.preempt_doorbell:
            doorbell_path = self.client_socket_dir / DOORBELL_FILE_NAME
            try:
                coordinator.doorbell = PreemptDoorbell(doorbell_path,
                                                       grants_at_once=options.scheduler.preempt_handover)
            except OSError as exc:
                log.warning("preemption doorbell %s not made (%s); preemptions reach the holder through its "
                            "Revoke only", doorbell_path, exc.strerror)
        log.info("serving GPU %s (%s, %d bytes) with state in %s", gpu.uuid, gpu.name, gpu.memory_total,
                 store.path)
        return coordinator

    async def _build_server(self, path: Path, mode: int, service, descriptor, guard: RpcGuard):
        server = grpc.aio.server(options=_server_options(self.options.limits))
        server.add_generic_rpc_handlers((guard.handlers(descriptor, service),))
        health_servicer = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        # Bind with a umask that leaves no window where others could connect
        # to the admin socket; then set the exact mode.
        old_umask = os.umask(0o177)
        try:
            if server.add_insecure_port(f"unix:{path}") == 0:
                raise StartupError(f"cannot listen on {path}")
        finally:
            os.umask(old_umask)
        os.chmod(path, mode)
        await server.start()
        await health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
        await health_servicer.set(descriptor.full_name, health_pb2.HealthCheckResponse.SERVING)
        return server, health_servicer

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        coordinator = self._prepare()
        coordinator.bind_loop(loop)
        guard = RpcGuard(lambda method, code: coordinator.metrics.bad_requests.labels(method, code.name).inc())
        client_descriptor = client_pb2.DESCRIPTOR.services_by_name["ClientService"]
        admin_descriptor = admin_pb2.DESCRIPTOR.services_by_name["AdminService"]
        servers = []
        metrics_http = None
        calls_socket = None
        try:
            client_service = ClientService(coordinator, guard)
            servers.append(await self._build_server(self.client_socket, 0o666, client_service,
                                                    client_descriptor, guard))
            if self.options.calls_socket:
                calls_socket = CallsSocket(self.client_socket_dir / CALLS_SOCKET_NAME, client_service, guard,
                                           self.options.limits.max_connections)
                try:
                    await calls_socket.start()
                    coordinator.calls_socket = True
                except OSError as exc:
                    log.warning("calls socket %s not made (%s); shims send their calls on the Calls stream",
                                calls_socket.path, exc.strerror)
                    calls_socket = None
            servers.append(await self._build_server(self.admin_socket, 0o600, AdminService(coordinator),
                                                    admin_descriptor, guard))
            if self.options.metrics_port:
                metrics_http, self.metrics_port = coordinator.metrics.serve(self.options.metrics_port,
                                                                            self.options.metrics_address)
                log.info("metrics on http://%s:%d/metrics", self.options.metrics_address, self.metrics_port)
            self.pid_file.write_text(f"{os.getpid()}\n")
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, self.request_stop)
            log.info("tokend ready: clients on %s, admin on %s", self.client_socket, self.admin_socket)
            refresher = asyncio.create_task(self._refresh_gauges(coordinator))
            accounting_saver = asyncio.create_task(self._save_accounting(coordinator))
            reclaim_watch = asyncio.create_task(self._watch_reclaims(coordinator))
            watcher = None
            if self.options.process_watch_seconds > 0 and self.options.fake_gpu is None:
                watcher = asyncio.create_task(self._watch_processes(coordinator))
            await self._stop.wait()
            log.info("stopping")
            refresher.cancel()
            accounting_saver.cancel()
            reclaim_watch.cancel()
            if watcher is not None:
                watcher.cancel()
            for _server, health_servicer in servers:
                await health_servicer.enter_graceful_shutdown()
            coordinator.shutdown()
            if calls_socket is not None:
                await calls_socket.close()
                calls_socket = None
            await asyncio.gather(*(server.stop(STOP_GRACE_SECONDS) for server, _ in servers))
            servers = []
        finally:
            if calls_socket is not None:
                await calls_socket.close()
            for server, _ in servers:
                await server.stop(None)
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(signum)
            if metrics_http is not None:
                metrics_http.shutdown()
                metrics_http.server_close()
            if coordinator.doorbell is not None:
                coordinator.doorbell.close()  # the file stays: containers may have it mounted
            for path in (self.client_socket, self.admin_socket, self.pid_file):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
            coordinator.store.close()  # last: the state is written
            log.info("stopped")

    async def _watch_processes(self, coordinator: Coordinator) -> None:
        """NVML's process list, every process_watch_seconds, checked for bypass
        (and seen by the ledger: which attached pids NVML lists)."""
        while True:
            try:
                taken_at = time.monotonic()
                processes = await asyncio.to_thread(list_gpu_processes, coordinator.gpu.uuid)
                coordinator.observe_gpu_processes([p.pid for p in processes], taken_at)
                coordinator.check_gpu_processes(processes, self.options.bypass_policy)
            except Exception as exc:
                log.warning("NVML process watch failed: %s", exc)
            await asyncio.sleep(self.options.process_watch_seconds)

    async def _watch_reclaims(self, coordinator: Coordinator) -> None:
        """While memory of departed processes awaits the driver: NVML's
        process list every RECLAIM_POLL_SECONDS, handed to the ledger (the
        rule is there); without NVML (--fake-gpu) only the timeouts run.
        An NVML call can hang (an Xid, a GPU reset): one query at a time,
        and the timeouts run while it is out, so a hung driver never keeps
        the memory from coming back after --reclaim-timeout-ms."""
        nvml = self.options.fake_gpu is None
        failures_logged = False
        query: asyncio.Future | None = None
        query_taken_at = 0.0
        while True:
            if not coordinator.has_pending_reclaims():
                coordinator.reclaims_changed.clear()
                await coordinator.reclaims_changed.wait()
                continue
            pids = None
            taken_at = time.monotonic()
            if nvml:
                if query is None:
                    query_taken_at = taken_at
                    query = asyncio.ensure_future(asyncio.to_thread(list_gpu_processes, coordinator.gpu.uuid))
                deadline = coordinator.ledger.next_reclaim_deadline() or taken_at
                await asyncio.wait({query}, timeout=min(RECLAIM_QUERY_PATIENCE, max(0.0, deadline - taken_at)))
                if query.done():
                    taken_at = query_taken_at
                    try:
                        pids = [p.pid for p in query.result()]
                        failures_logged = False
                    except Exception as exc:
                        if not failures_logged:
                            log.warning("NVML process list failed (%s): pending reclaims end by timeout", exc)
                            failures_logged = True
                    query = None
                else:
                    taken_at = time.monotonic()  # no list yet: only the timeouts run, as of now
            try:
                coordinator.observe_gpu_processes(pids, taken_at)
            except Exception:
                log.exception("observing GPU processes for pending reclaims failed")
            await asyncio.sleep(RECLAIM_POLL_SECONDS)

    @staticmethod
    async def _save_accounting(coordinator: Coordinator) -> None:
        while True:
            await asyncio.sleep(ACCOUNTING_SAVE_SECONDS)
            try:
                await coordinator.save_accounting()
            except Exception:
                log.exception("saving group charges failed")

    @staticmethod
    async def _refresh_gauges(coordinator: Coordinator) -> None:
        while True:
            try:
                coordinator.refresh_gauges()
            except Exception:
                log.exception("refreshing gauges failed")
            await asyncio.sleep(GAUGE_REFRESH_SECONDS)
