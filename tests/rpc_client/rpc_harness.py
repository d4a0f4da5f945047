"""Fixtures for the C RPC client tests: build the driver, run a scripted
tokend, run the driver as a scripted subprocess."""
from __future__ import annotations

import os
import queue
import shutil
import sys
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

from scripted_tokend import ScriptedTokend

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import native_build  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
HOOK = ROOT / "hook"
NANOPB_OUT = ROOT / "build" / "native" / "nanopb"
NANOPB_RUNTIME = Path("/usr/lib/x86_64-linux-gnu/libprotobuf-nanopb.a")
CLIENT_SOURCES = native_build.rpc_client_sources()
PB_SOURCES = [NANOPB_OUT / "gslice/v1/client.pb.c", NANOPB_OUT / "gslice/v1/common.pb.c"]


def ensure_nanopb_sources() -> None:
    if not all(p.exists() for p in PB_SOURCES):
        subprocess.run([str(ROOT / ".venv/bin/python"), str(ROOT / "tools/build_native.py"), "proto"],
                       check=True, cwd=ROOT)


def build_program(main_source: Path, out: Path, extra_flags: tuple[str, ...] = ()) -> Path:
    """Compiles main_source with the client sources the way the shim links them."""
    ensure_nanopb_sources()
    cmd = ["gcc", "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-g", "-O1", "-fPIC",
           "-fvisibility=hidden", f"-I{HOOK}", f"-I{NANOPB_OUT}", *extra_flags,
           str(main_source), *map(str, CLIENT_SOURCES), *map(str, PB_SOURCES),
           str(NANOPB_RUNTIME), "-lnghttp2", "-lpthread", "-o", str(out)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"building {out.name} failed:\n{' '.join(cmd)}\n{result.stderr}")
    return out


@pytest.fixture(scope="session")
def driver_binary(build_dir) -> Path:
    return build_program(Path(__file__).parent / "rpc_driver.c", build_dir / "rpc_driver")


@pytest.fixture(scope="session")
def asan_driver_binary(build_dir) -> Path:
    return build_program(Path(__file__).parent / "rpc_driver.c", build_dir / "rpc_driver_asan",
                         ("-fsanitize=address,undefined", "-fno-omit-frame-pointer"))


@pytest.fixture
def socket_dir():
    # Short path: unix socket paths are limited to 108 bytes.
    path = tempfile.mkdtemp(prefix=f"gsrpc{os.getpid()}-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


# Every test against a daemon that serves client.calls and the Calls stream
# (the token and memory calls go on the socket), one that serves the stream
# alone (they go on it) and one that serves neither (an older tokend: they go
# unary). Each in a folder of its own: client.calls sits beside the socket.
@pytest.fixture(params=["calls-socket", "calls-stream", "unary-only"])
def tokend(socket_dir, request):
    folder = os.path.join(socket_dir, uuid.uuid4().hex[:8])
    os.mkdir(folder)
    server = ScriptedTokend(os.path.join(folder, "client.sock"),
                            serve_calls_stream=request.param != "unary-only",
                            serve_calls_socket=request.param == "calls-socket")
    server.start()
    yield server
    server.close()


def parse_reply(line: str) -> tuple[list[str], str]:
    """'acquire 0 100 20000 'msg'' -> (['acquire', '0', '100', '20000'], 'msg')."""
    if "'" in line:
        head, _, rest = line.partition("'")
        return head.split(), rest[: rest.rfind("'")]
    return line.split(), ""


class Driver:
    """rpc_driver as a subprocess: send commands, wait for result lines."""

    def __init__(self, binary: Path, socket_path: str, group: str = "g", secret: str = "s3cret",
                 env: dict | None = None):
        self.proc = subprocess.Popen(
            [str(binary), socket_path, group, secret], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1,
            env={**os.environ, **(env or {})})
        self.lines: queue.Queue[str] = queue.Queue()
        self.backlog: list[str] = []
        self.seen: list[str] = []
        self.stderr_text = ""
        threading.Thread(target=self._read_stdout, daemon=True).start()
        self._stderr_thread = threading.Thread(target=self._read_stderr, daemon=True)
        self._stderr_thread.start()
        self.pid = int(self.expect("started")[0][1])

    def _read_stdout(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def _read_stderr(self) -> None:
        self.stderr_text = self.proc.stderr.read()

    def send(self, command: str) -> None:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def expect(self, prefix: str, timeout: float = 30.0) -> tuple[list[str], str]:
        """The next line starting with prefix (other lines are kept for later)."""
        for i, line in enumerate(self.backlog):
            if line.startswith(prefix):
                del self.backlog[i]
                return parse_reply(line)
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no line starting with {prefix!r} within {timeout} s; "
                                     f"seen: {self.seen[-20:]}; backlog: {self.backlog}")
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            self.seen.append(line)
            if line.startswith(prefix):
                return parse_reply(line)
            self.backlog.append(line)

    def has_line(self, prefix: str, within: float) -> bool:
        try:
            fields, err = self.expect(prefix, within)
        except AssertionError:
            return False
        self.backlog.insert(0, " ".join(fields) + (f" '{err}'" if err else ""))
        return True

    def run(self, command: str, timeout: float = 30.0) -> tuple[list[str], str]:
        self.send(command)
        return self.expect(command.split()[0] + " ", timeout)

    def attached(self, timeout_ms: int = 20000) -> str:
        fields, err = self.run(f"wait-attached {timeout_ms}", timeout_ms / 1000 + 10)
        assert fields[1] == "1", f"not attached: {err}"
        return fields[2]

    def close(self) -> int:
        if self.proc.poll() is None:
            try:
                self.send("stop")
                self.proc.wait(15)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(10)
        self._stderr_thread.join(5)
        return self.proc.returncode


@pytest.fixture
def start_driver(driver_binary, tokend):
    drivers: list[Driver] = []

    def start(binary: Path | None = None, **kwargs) -> Driver:
        driver = Driver(binary or driver_binary, kwargs.pop("socket_path", tokend.socket_path), **kwargs)
        drivers.append(driver)
        return driver

    yield start
    for driver in drivers:
        driver.close()
