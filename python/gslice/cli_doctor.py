"""`gslice doctor`: checks, in plain words, everything a process needs to be
shared: NVML (real or simulated), libgslice.so (present, loads on its own,
no libpython), the client and admin sockets, and optionally a group."""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from . import paths


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


def shim_library_path() -> Path:
    return paths.shim_library()


def check_nvml(gpu: str | None) -> Check:
    from gslice.tokend.gpu_discovery import GpuDiscoveryError, discover
    try:
        info = discover(gpu)
    except GpuDiscoveryError as exc:
        return Check("NVML / driver", False, str(exc))
    simulated = "simgpu" in os.environ.get("LD_LIBRARY_PATH", "")
    kind = "simulated GPU" if simulated else "NVIDIA driver"
    return Check("NVML / driver", True, f"{kind}: GPU {info.index} {info.uuid} ({info.name}), {info.memory_total} bytes")


def check_shim_library() -> list[Check]:
    path = shim_library_path()
    if not path.exists():
        return [Check("libgslice.so", False, f"not built at {path}: run `python tools/build_native.py hook`")]
    checks = [Check("libgslice.so", True, str(path))]
    # A preloadable library must not need libpython (field notes §2); the
    # dynamic string table names every DT_NEEDED entry.
    data = path.read_bytes()
    checks.append(Check("no libpython dependency", b"libpython" not in data,
                        "none" if b"libpython" not in data else f"{path} refers to libpython: it cannot be preloaded"))
    env = dict(os.environ, LD_BIND_NOW="1", LD_PRELOAD=str(path))
    env.pop(paths.ENV_GROUP, None)
    try:
        result = subprocess.run(["/bin/true"], env=env, capture_output=True, text=True, timeout=20)
        loaded = result.returncode == 0 and "error" not in result.stderr.lower()
        detail = "preloads into /bin/true with LD_BIND_NOW=1" if loaded else (
            f"preloading into /bin/true failed (exit {result.returncode}): {result.stderr.strip()[:300]}")
    except (OSError, subprocess.TimeoutExpired) as exc:
        loaded, detail = False, f"could not run /bin/true with it preloaded: {exc}"
    checks.append(Check("libgslice.so loads", loaded, detail))
    return checks


def check_socket(name: str, socket_path: Path) -> Check:
    from .client import health_status
    if not socket_path.exists():
        return Check(name, False, f"{socket_path} does not exist: is tokend running (gslice tokend)?")
    if not os.access(socket_path, os.W_OK):
        return Check(name, False, f"{socket_path} is not writable by this user (uid {os.getuid()})")
    state = health_status(socket_path, timeout=3.0)
    return Check(name, state == "SERVING", f"{socket_path}: health {state}")


def check_group(admin_socket: Path, group: str) -> Check:
    from .client import Client
    from .errors import GsliceError
    try:
        with Client(admin_socket) as admin:
            found = admin.get_group(group)
    except GsliceError as exc:
        return Check(f"group {group!r}", False, str(exc))
    return Check(f"group {group!r}", True, f"request {found.request:g}, limit {found.limit:g}, "
                                           f"memory {found.memory_quota} bytes")


def run_checks(client_socket: Path, admin_socket: Path, group: str | None, gpu: str | None = None) -> list[Check]:
    checks = [check_nvml(gpu), *check_shim_library(), check_socket("client socket", client_socket),
              check_socket("admin socket", admin_socket)]
    if group:
        checks.append(check_group(admin_socket, group))
    return checks
