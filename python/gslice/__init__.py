"""gslice: share one NVIDIA GPU between groups of processes with guaranteed shares, caps, priorities and hard memory quotas."""
__version__ = "0.1.0"

from .errors import (AlreadyExists, Conflict, DaemonError, DaemonUnavailable, GsliceError, InvalidValue,  # noqa: E402
                     NotFound, PermissionDenied)
from .units import format_bytes, format_share, parse_bytes, parse_share  # noqa: E402

# The operator API pulls in grpc; loaded on first use so that light modules
# (gslice.workloads, gslice.simgpu) stay cheap to import in CUDA processes.
_CLIENT_NAMES = {"Client", "ClientStatus", "CreatedGroup", "Event", "Group", "GroupStatus", "Priority", "Status"}


def __getattr__(name):
    if name in _CLIENT_NAMES:
        from . import client
        return getattr(client, name)
    raise AttributeError(f"module 'gslice' has no attribute {name!r}")


__all__ = sorted(_CLIENT_NAMES) + [
    "AlreadyExists", "Conflict", "DaemonError", "DaemonUnavailable", "GsliceError", "InvalidValue", "NotFound",
    "PermissionDenied", "format_bytes", "format_share", "parse_bytes", "parse_share",
]
