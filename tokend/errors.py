"""Typed errors shared by the scheduler core, the memory ledger and the gRPC
adapter. Each carries a `code` the adapter maps to a gRPC status; messages
name the bad value and what would be accepted."""
from __future__ import annotations


class GsliceError(Exception):
    """Base of every error tokend raises on purpose."""

    code = "invalid_argument"


class InvalidArgument(GsliceError):
    """A malformed or out-of-range value (share, size, name, time, token use)."""

    code = "invalid_argument"


class NotFound(GsliceError):
    """Unknown group or client."""

    code = "not_found"


class AlreadyExists(GsliceError):
    """A group or client with that name/id exists already."""

    code = "already_exists"


class FailedPrecondition(GsliceError):
    """A valid request the current state does not allow (token not held,
    double release, group still has clients)."""

    code = "failed_precondition"


class RequestSumExceeded(FailedPrecondition):
    """Guaranteed requests over all groups would sum to more than the whole GPU."""
