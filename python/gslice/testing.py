"""Test harness: a real tokend in a temp directory, and a Python stand-in for
the shim's side of the client protocol.

    from gslice.testing import TokendProcess
    with TokendProcess(tmp_path) as tokend:
        created = tokend.admin().create_group("a", request=0.3, memory="1GiB")
        with tokend.shim_client("a", created.secret) as proc:
            token = proc.acquire()
            proc.release(token, used_us=5000)

TokendProcess runs `python -m gslice.tokend` as a subprocess on real unix
sockets and always stops it (and removes its directories) on exit. Over the
simulated GPU (gslice.simgpu, when built) by default, else a fake GPU given
on the command line.

`python -m gslice.testing hold|share-worker ...` are stand-in client
processes for multi-process tests (kill -9, shares)."""
from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from contextlib import closing
from pathlib import Path

import grpc

from . import paths

# What a native library of ours may need at most: glibc's own libraries, present
# in every glibc image (the zig build for old glibc links libpthread/librt/libdl,
# which newer glibc folds into libc.so.6).
GLIBC_OWN_LIBRARIES = frozenset({"libc.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1", "libm.so.6",
                                 "ld-linux-x86-64.so.2"})
from .client import Client, health_status
from .v1 import client_pb2, client_pb2_grpc

FAKE_GPU_MEMORY = 16 * 1024**3
START_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0


def free_tcp_port() -> int:
    with closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for(predicate, timeout: float = 20.0, what: str = "condition", interval: float = 0.02):
    """Calls predicate until it returns something true (returned) or timeout
    seconds pass (AssertionError naming `what`)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def simgpu_env(name: str, memory: int | str | None = None) -> dict[str, str] | None:
    """Environment that puts a process on the simulated GPU `name` (shared by
    every process using the same name); None if the simulator is not built."""
    import gslice.simgpu as simgpu
    try:
        return simgpu.env(name, memory=memory)
    except simgpu.SimGpuNotBuilt:
        return None


class TokendProcess:
    """A real tokend subprocess in private directories.

    gpu: "auto" (simulated GPU if built, else fake), "sim", "fake", or
    "system" (whatever NVML finds: a real GPU). The simulated GPU is private to this daemon (GSLICE_SIM_NAME=.sim_name, its
    shared memory removed on close); .process_env(group, secret) gives CUDA
    processes the environment to run on it under the shim.
    The socket directory is a short path under /tmp (unix socket paths are
    limited to 108 bytes); the state directory lives under `base_dir`."""

    def __init__(self, base_dir: str | os.PathLike, gpu: str = "auto", extra_args: list[str] | tuple = (),
                 env: dict[str, str] | None = None, metrics: bool = True, window: float | None = None,
                 fake_gpu_memory: int = FAKE_GPU_MEMORY, log_level: str = "debug", own_client_dir: bool = False):
        self.base_dir = Path(base_dir)
        self.state_dir = self.base_dir / "tokend-state"
        self.socket_dir = Path(tempfile.mkdtemp(prefix="gs-", dir="/tmp"))
        # own_client_dir: client.sock in a directory of its own (--client-socket-dir), as on Kubernetes.
        self.client_socket_dir = self.socket_dir / "client" if own_client_dir else self.socket_dir
        self.client_socket = self.client_socket_dir / paths.CLIENT_SOCKET_NAME
        self.admin_socket = self.socket_dir / paths.ADMIN_SOCKET_NAME
        self.log_path = self.base_dir / f"tokend-{uuid.uuid4().hex[:8]}.log"
        self.metrics_port = free_tcp_port() if metrics else 0
        self.process: subprocess.Popen | None = None
        self._env = dict(os.environ)
        self._env.update(env or {})
        # A private simulated GPU per daemon: tests never share or leak one.
        self.sim_name = f"tokend-{uuid.uuid4().hex[:12]}"
        if gpu not in ("auto", "sim", "fake", "system"):
            raise ValueError(f"gpu {gpu!r} is not one of 'auto', 'sim', 'fake', 'system'")
        sim = simgpu_env(self.sim_name, fake_gpu_memory) if gpu in ("auto", "sim") else None
        if gpu == "sim" and sim is None:
            raise RuntimeError("gpu='sim' but the simulated GPU is not built (python tools/build_native.py simgpu)")
        self.gpu_uuid = None
        args = ["--state-dir", str(self.state_dir), "--socket-dir", str(self.socket_dir),
                "--metrics-port", str(self.metrics_port), "--log-level", log_level]
        if own_client_dir:
            args += ["--client-socket-dir", str(self.client_socket_dir)]
        self.sim_env = sim or {}
        if sim is not None:
            self._env.update(sim)
            self.simulated = True
        elif gpu == "system":
            self.sim_name = None
            self.simulated = False
        else:
            self.sim_name = None
            self.gpu_uuid = f"GPU-fake-{uuid.uuid4()}"
            args += ["--fake-gpu", f"{self.gpu_uuid},gslice fake GPU,{fake_gpu_memory}"]
            self.simulated = False
        if window is not None:
            args += ["--window", str(window)]
        self.args = args + list(extra_args)
        self._clients: list[ShimLikeClient] = []
        self._admins: list[Client] = []

    # -- lifecycle
    def start(self) -> "TokendProcess":
        if self.process is not None and self.process.poll() is None:
            raise RuntimeError(f"tokend already running as pid {self.process.pid}")
        self.base_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        # --parent-pid: the daemon exits with this process (a killed test run leaks none).
        self.process = subprocess.Popen([sys.executable, "-m", "gslice.tokend", *self.args,
                                         "--parent-pid", str(os.getpid())], env=self._env,
                                        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = self.log_tail()
                self.close()  # a failed start leaves nothing behind
                raise RuntimeError(f"tokend exited with {self.process.returncode} during start:\n{tail}")
            if (self.client_socket.exists() and self.admin_socket.exists()
                    and health_status(self.client_socket) == "SERVING" and health_status(self.admin_socket) == "SERVING"):
                if self.gpu_uuid is None:
                    with self.admin() as admin:
                        self.gpu_uuid = admin.status().gpu_uuid
                return self
            time.sleep(0.05)
        tail = self.log_tail()
        self.close()
        raise RuntimeError(f"tokend did not become healthy within {START_TIMEOUT} s:\n{tail}")

    def stop(self, timeout: float = STOP_TIMEOUT) -> int | None:
        """SIGTERM and wait; SIGKILL if it does not stop in time. Returns the exit status."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def restart(self) -> "TokendProcess":
        self.stop()
        return self.start()

    def close(self) -> None:
        for client in self._clients:
            client.close()
        for admin in self._admins:
            admin.close()
        self._clients.clear()
        self._admins.clear()
        self.stop()
        shutil.rmtree(self.socket_dir, ignore_errors=True)
        if self.sim_name:
            import gslice.simgpu as simgpu
            simgpu.unlink(self.sim_name)

    def __enter__(self) -> "TokendProcess":
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc) -> None:
        self.close()

    # -- access
    @property
    def pid(self) -> int:
        return self.process.pid

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    def admin(self) -> Client:
        """An operator API client on this daemon (closed with the daemon)."""
        admin = Client(self.admin_socket)
        self._admins.append(admin)
        return admin

    def shim_client(self, group: str, secret: str, **kwargs) -> "ShimLikeClient":
        """An attached stand-in shim (closed with the daemon)."""
        client = ShimLikeClient(self.client_socket, group, secret, **kwargs)
        self._clients.append(client)
        return client.attach()

    def process_env(self, group: str, secret: str, preload: bool = True) -> dict[str, str]:
        """Environment for a CUDA process in `group` on this daemon's GPU: the
        shim's variables, LD_PRELOAD of libgslice.so, and the simulated GPU's."""
        env = dict(self._env)
        env.update({paths.ENV_SOCKET: str(self.client_socket), paths.ENV_GROUP: group,
                    paths.ENV_GROUP_SECRET: secret})
        if preload:
            library = paths.shim_library()
            if not library.exists():
                raise RuntimeError(f"libgslice.so is not built at {library} (python tools/build_native.py hook)")
            env["LD_PRELOAD"] = paths.preload_with(library, env.get("LD_PRELOAD", ""), env)
        return env

    def metrics_text(self) -> str:
        if not self.metrics_port:
            raise RuntimeError("this TokendProcess was started with metrics=False")
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as reply:
            return reply.read().decode()

    def metric_value(self, name: str, **labels) -> float:
        """One sample from /metrics (0.0 when the series does not exist yet)."""
        from prometheus_client.parser import text_string_to_metric_families
        for family in text_string_to_metric_families(self.metrics_text()):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    return sample.value
        return 0.0


class ShimLikeClient:
    """What libgslice.so does over the client protocol, in Python: attach,
    a Control stream read by a background thread, tokens and memory."""

    def __init__(self, socket_path: str | os.PathLike, group: str, secret: str, reserved_bytes: int = 0,
                 open_control: bool = True, gpu_uuid: str = "", process_name: str = "shim-like"):
        self.socket_path = Path(socket_path)
        self.group, self.secret = group, secret
        self.reserved_bytes, self.open_control, self.gpu_uuid = reserved_bytes, open_control, gpu_uuid
        self.process_name = process_name
        self.channel = grpc.insecure_channel(paths.grpc_target(self.socket_path))
        self.stub = client_pb2_grpc.ClientServiceStub(self.channel)
        self.client_id: str | None = None   # the credential
        self.public_id: str | None = None   # how status and events name this client
        self.attach_reply: client_pb2.AttachReply | None = None
        self.control_events: queue.Queue = queue.Queue()
        self._control_call = None
        self._control_thread: threading.Thread | None = None

    def attach(self) -> "ShimLikeClient":
        self.attach_reply = self.stub.Attach(client_pb2.AttachRequest(
            group=self.group, secret=self.secret, pid=os.getpid(), gpu_uuid=self.gpu_uuid,
            process_name=self.process_name, reserved_bytes=self.reserved_bytes, protocol_version=1), timeout=10)
        self.client_id = self.attach_reply.client_id
        self.public_id = self.attach_reply.public_id
        if self.open_control:
            self._control_call = self.stub.Control(client_pb2.ControlRequest(client_id=self.client_id))
            self._control_thread = threading.Thread(target=self._read_control, daemon=True)
            self._control_thread.start()
            first = self.next_event(timeout=10)
            if first is None or first.WhichOneof("event") != "ready":
                raise RuntimeError(f"Control stream did not start with ready: {first}")
        return self

    def _read_control(self) -> None:
        try:
            for event in self._control_call:
                self.control_events.put(event)
        except grpc.RpcError as exc:
            self.control_events.put(exc)
        self.control_events.put(None)

    def next_event(self, timeout: float = 5.0):
        """The next ControlEvent; None when the stream ended or nothing came in time."""
        try:
            item = self.control_events.get(timeout=timeout)
        except queue.Empty:
            return None
        return None if isinstance(item, grpc.RpcError) else item

    def acquire(self, timeout_ms: int = 10000) -> int:
        """Wait for the token; returns its id (the quantum is in .last_quantum_us)."""
        reply = self.stub.AcquireToken(client_pb2.AcquireTokenRequest(client_id=self.client_id,
                                                                      timeout_ms=timeout_ms),
                                       timeout=timeout_ms / 1000.0 + 10)
        self.last_quantum_us = reply.quantum_us
        return reply.token_id

    def release(self, token_id: int, used_us: int = 0, idle: bool = False, overrun_us: int = 0) -> None:
        self.stub.ReleaseToken(client_pb2.ReleaseTokenRequest(client_id=self.client_id, token_id=token_id,
                                                              used_us=used_us, overrun_us=overrun_us, idle=idle),
                               timeout=10)

    def reserve(self, size: int) -> client_pb2.ReserveMemoryReply:
        return self.stub.ReserveMemory(client_pb2.ReserveMemoryRequest(client_id=self.client_id, bytes=size),
                                       timeout=10)

    def release_memory(self, size: int) -> client_pb2.ReleaseMemoryReply:
        return self.stub.ReleaseMemory(client_pb2.ReleaseMemoryRequest(client_id=self.client_id, bytes=size),
                                       timeout=10)

    def memory_info(self) -> client_pb2.GetMemoryInfoReply:
        return self.stub.GetMemoryInfo(client_pb2.GetMemoryInfoRequest(client_id=self.client_id), timeout=10)

    def detach(self) -> None:
        self.stub.Detach(client_pb2.DetachRequest(client_id=self.client_id), timeout=10)

    def close(self) -> None:
        if self._control_call is not None:
            self._control_call.cancel()
        self.channel.close()
        if self._control_thread is not None:
            self._control_thread.join(timeout=5)

    def __enter__(self) -> "ShimLikeClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# --------------------------------------------------------------------------
# Stand-in client processes for multi-process tests.

def _hold(args) -> int:
    """Attach, reserve memory, take the token and keep it until killed."""
    client = ShimLikeClient(args.socket, args.group, args.secret).attach()
    if args.reserve:
        reply = client.reserve(args.reserve)
        if not reply.granted:
            print(json.dumps({"error": "reservation refused", "used": reply.used, "quota": reply.quota}), flush=True)
            return 1
    token = client.acquire()
    print(json.dumps({"holding": token, "public_id": client.public_id, "pid": os.getpid()}), flush=True)
    while True:
        time.sleep(3600)


def _share_worker(args) -> int:
    """Acquire, keep the GPU 'busy' for the granted quantum, release; repeat
    for --seconds. Prints what it held, by its own clock."""
    client = ShimLikeClient(args.socket, args.group, args.secret).attach()
    if args.start_at:  # wall clock, so that several workers start together
        time.sleep(max(0.0, args.start_at - time.time()))
    held = 0.0
    slices = []  # (grant, release) by the wall clock, for windowed comparisons
    expired = 0
    started = time.monotonic()
    deadline = started + args.seconds
    while time.monotonic() < deadline:
        token = client.acquire(timeout_ms=30000)
        granted_at, granted_wall = time.monotonic(), time.time()
        time.sleep(client.last_quantum_us / 1e6)
        used = time.monotonic() - granted_at
        try:
            client.release(token, used_us=int(used * 1e6))
        except grpc.RpcError as exc:
            # Overslept past quantum + grace on a busy machine: tokend took the
            # token back (and charged it). The shim logs this and goes on.
            if exc.code() != grpc.StatusCode.FAILED_PRECONDITION:
                raise
            expired += 1
        held += used
        slices.append((granted_wall, granted_wall + used))
    elapsed = time.monotonic() - started
    print(json.dumps({"group": args.group, "held_seconds": held, "elapsed": elapsed, "tokens": len(slices),
                      "expired": expired, "slices": slices}), flush=True)
    client.detach()
    client.close()
    # Done: report printed, detached, channel closed. Leave without the
    # interpreter's shutdown, in which grpc's threads once kept a finished
    # worker alive past the test's 60 s (a CI rehearsal, 2026-11-28: tokend
    # had its Detach at 22:19:40, the process was killed at 22:20:39).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gslice.testing", description="stand-in gslice client processes")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, func in (("hold", _hold), ("share-worker", _share_worker)):
        p = sub.add_parser(name)
        p.add_argument("--socket", required=True)
        p.add_argument("--group", required=True)
        p.add_argument("--secret", required=True)
        p.set_defaults(func=func)
        if name == "hold":
            p.add_argument("--reserve", type=int, default=0)
        else:
            p.add_argument("--seconds", type=float, default=5.0)
            p.add_argument("--start-at", type=float, default=0.0, help="time.time() to start at")
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
