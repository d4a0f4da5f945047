"""Typed errors of the operator API. Each message names the bad value and
what would be accepted; the CLI prints them as one line without a traceback."""
from __future__ import annotations


class GsliceError(Exception):
    """Base of every error the gslice operator API raises on purpose."""


class InvalidValue(GsliceError, ValueError):
    """A value was malformed or out of range (shares, sizes, names, priorities)."""


class NotFound(GsliceError):
    """The named group (or client) does not exist."""


class AlreadyExists(GsliceError):
    """A group with that name exists already."""


class Conflict(GsliceError):
    """The daemon refused a valid request in its current state (e.g. requests
    would sum over 100%, or a group still has attached clients)."""


class PermissionDenied(GsliceError):
    """Wrong group secret, or no permission on the socket."""


class DaemonUnavailable(GsliceError):
    """tokend could not be reached on its socket."""

    def __init__(self, socket_path, detail: str = ""):
        self.socket_path = str(socket_path)
        self.detail = detail
        hint = (
            f"tokend is not reachable on {self.socket_path}"
            + (f" ({detail})" if detail else "")
            + ": start it with `gslice tokend --socket-dir DIR --state-dir DIR`, "
            "or point GSLICE_ADMIN_SOCKET (or --admin-socket) at a running daemon's admin.sock"
        )
        super().__init__(hint)


class DaemonError(GsliceError):
    """tokend answered with an unexpected failure (a bug, or the daemon stopping)."""
