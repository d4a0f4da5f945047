"""Fixtures for the memory ledger's tests: ledger_probe (allocations on
command), and stand-ins for parts of the driver the simulated GPU does not
have (an allocation held inside the driver, more GPUs in NVML), each a
small library over the simulated one."""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from shim_harness import PROGRAMS, ROOT, wait_for_line

MiB = 1 << 20


def linked_against(soname: str) -> list[str]:
    """Link against soname even though no symbol of it is referenced: the
    shim finds the rest of the driver through this library's dependencies."""
    return ["-Wl,--no-as-needed", f"-l:{soname}", "-Wl,--as-needed"]


def _gcc(args: list[str]) -> None:
    subprocess.run(["gcc", "-O2", "-Wall", "-Wextra", f"-I{ROOT / 'include'}", *args], check=True)


@pytest.fixture(scope="session")
def ledger_probe(build_dir, sim_lib_dir) -> Path:
    out = build_dir / "ledger_probe"
    _gcc([str(PROGRAMS / "ledger_probe.c"), f"-L{sim_lib_dir}", "-l:libcuda.so.1", "-ldl", "-lpthread",
          "-o", str(out)])
    return out


@pytest.fixture(scope="session")
def slow_alloc_libcuda(build_dir, sim_lib_dir) -> Path:
    """GSLICE_REAL_LIBCUDA for programs/slow_alloc_libcuda.c."""
    out = build_dir / "libslow_alloc_cuda.so"
    _gcc(["-shared", "-fPIC", str(PROGRAMS / "slow_alloc_libcuda.c"), f"-L{sim_lib_dir}",
          *linked_against("libcuda.so.1"), "-ldl", "-o", str(out)])
    return out


@pytest.fixture(scope="session")
def nvml_more_gpus(build_dir, sim_lib_dir) -> Path:
    """GSLICE_REAL_LIBNVML for programs/nvml_more_gpus.c."""
    out = build_dir / "libnvml_more_gpus.so"
    _gcc(["-shared", "-fPIC", str(PROGRAMS / "nvml_more_gpus.c"), f"-L{sim_lib_dir}",
          *linked_against("libnvidia-ml.so.1"), "-ldl", "-o", str(out)])
    return out


class LedgerProbe:
    """ledger_probe under the shim: one command, one answer."""

    def __init__(self, runner, binary: Path, **env):
        self.proc = subprocess.Popen([str(binary)], env=runner.env(**env), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        runner.procs.append(self.proc)
        wait_for_line(self.proc, "ready", timeout=60)

    def send(self, command: str) -> None:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def ask(self, command: str, timeout: float = 60) -> list[str]:
        self.send(command)
        line = wait_for_line(self.proc, command.split()[0] + " ", timeout=timeout)
        return line.split()[1:]

    def alloc(self, nbytes: int) -> int:
        ident, rc = self.ask(f"alloc {nbytes}")
        assert rc == "0", f"cuMemAlloc({nbytes}) returned {rc}"
        return int(ident)

    def free(self, ident: int) -> None:
        assert self.ask(f"free {ident}") == ["0"]

    def stats(self) -> dict[str, int]:
        return {k: int(v) for k, v in (field.split("=") for field in self.ask("stats"))}

    def stderr(self) -> str:
        """The probe's log (ends it)."""
        if self.proc.poll() is None:
            self.proc.kill()
        return self.proc.communicate(timeout=10)[1]


def group_used(tokend, group: str) -> int:
    with tokend.admin() as admin:
        return admin.status().group(group).memory_used


def wait_group_used(tokend, group: str, expected: int, timeout: float = 10.0) -> int:
    """tokend's count of the group's bytes once it is `expected` (or the last seen at the timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        used = group_used(tokend, group)
        if used == expected or time.monotonic() > deadline:
            return used
        time.sleep(0.05)


def gate_files(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(GSLICE_TEST_SLOW_ALLOC_GATE, its .entered, its .go)."""
    gate = tmp_path / "slow-alloc"
    return gate, Path(f"{gate}.entered"), Path(f"{gate}.go")


def wait_for_file(path: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear within {timeout} s"
        time.sleep(0.01)


@pytest.fixture
def gpu_socket_dir():
    """An empty GSLICE_SOCKET_DIR (short: unix socket paths are limited to 108 bytes), removed after."""
    import shutil
    import tempfile
    d = Path(tempfile.mkdtemp(prefix="gsd-", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def serve_gpu(socket_dir: Path, uuid: str, daemon) -> None:
    """<socket_dir>/<uuid>/ is the daemon's client folder (client.sock, client.calls, the doorbell)."""
    os.symlink(daemon.client_socket_dir, socket_dir / uuid)
