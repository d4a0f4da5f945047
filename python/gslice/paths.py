"""Where gslice's sockets and state live by default, and the environment
variables that override them (shared by the daemon, the operator API, the
CLI and the shim's environment contract)."""
from __future__ import annotations

import os
from pathlib import Path

DEFAULT_SOCKET_DIR = Path("/run/gslice")
DEFAULT_STATE_DIR = Path("/var/lib/gslice")
CLIENT_SOCKET_NAME = "client.sock"
# Beside client.sock: the preemption doorbell page (hook/preempt_doorbell.h).
DOORBELL_FILE_NAME = "client.doorbell"
# Beside client.sock: the token and memory calls without gRPC (tokend/calls_socket.py).
CALLS_SOCKET_NAME = "client.calls"
ADMIN_SOCKET_NAME = "admin.sock"
PID_FILE_NAME = "tokend.pid"
GROUPS_FILE_NAME = "groups.json"

# Read by the shim (libgslice.so) in every CUDA process.
ENV_SOCKET = "GSLICE_SOCKET"
ENV_GROUP = "GSLICE_GROUP"
ENV_GROUP_SECRET = "GSLICE_GROUP_SECRET"
# A file holding the secret (trailing newline stripped), read by the shim:
# keeps the secret out of command lines and environment listings.
ENV_GROUP_SECRET_FILE = "GSLICE_GROUP_SECRET_FILE"
ENV_LOG_LEVEL = "GSLICE_LOG_LEVEL"
# Read by the operator API and the CLI.
ENV_ADMIN_SOCKET = "GSLICE_ADMIN_SOCKET"
# Another libgslice.so for `gslice run`, lib-path, install-shim, the
# experiments and the tests (default: the one inside this package).
ENV_SHIM_LIBRARY = "GSLICE_SHIM_LIBRARY"

DEFAULT_CLIENT_SOCKET = DEFAULT_SOCKET_DIR / CLIENT_SOCKET_NAME
DEFAULT_ADMIN_SOCKET = DEFAULT_SOCKET_DIR / ADMIN_SOCKET_NAME


def admin_socket(explicit: str | os.PathLike | None = None) -> Path:
    """The admin socket: the argument, else $GSLICE_ADMIN_SOCKET, else the default."""
    if explicit:
        return Path(explicit)
    from_env = os.environ.get(ENV_ADMIN_SOCKET)
    return Path(from_env) if from_env else DEFAULT_ADMIN_SOCKET


def client_socket(explicit: str | os.PathLike | None = None,
                  admin: str | os.PathLike | None = None) -> Path:
    """The client socket: the argument, else $GSLICE_SOCKET, else the one
    beside the admin socket in use (a daemon keeps both in its --socket-dir),
    else the default."""
    if explicit:
        return Path(explicit)
    from_env = os.environ.get(ENV_SOCKET)
    if from_env:
        return Path(from_env)
    if admin or os.environ.get(ENV_ADMIN_SOCKET):
        return admin_socket(admin).with_name(CLIENT_SOCKET_NAME)
    return DEFAULT_CLIENT_SOCKET


def shim_library() -> Path:
    """libgslice.so: $GSLICE_SHIM_LIBRARY, else the one inside this package."""
    from_env = os.environ.get(ENV_SHIM_LIBRARY)
    return Path(from_env) if from_env else Path(__file__).resolve().parent / "lib" / "libgslice.so"


def grpc_target(socket_path: str | os.PathLike) -> str:
    """gRPC target string for a unix socket path (absolute form)."""
    return f"unix://{Path(socket_path).absolute()}"


def preload_with(library, existing: str = "", environ=None) -> str:
    """An LD_PRELOAD value with `library` before `existing`; in a sanitizer
    build's test run (GSLICE_SANITIZER_RUNTIME, scripts/test-sanitized) the
    sanitizer runtime comes first, as it must."""
    environ = os.environ if environ is None else environ
    parts = [str(library)] + [p for p in existing.split(":") if p]
    runtime = environ.get("GSLICE_SANITIZER_RUNTIME")
    if runtime:
        parts = [runtime] + [p for p in parts if p != runtime]
    return ":".join(parts)
