"""tokend's resource limits: what one tenant may take of the daemon, so no
tenant can starve the others or take the daemon down.

Every cap is a tokend flag; each refusal is RESOURCE_EXHAUSTED (or
INVALID_ARGUMENT for an oversized field) with a message naming the value
and the cap. Connection-level limits (streams per connection, incoming
connections, idle connections) are grpc's own server options, built here
so the flags and the server agree. Sans-I/O: time is passed in."""
from __future__ import annotations

from dataclasses import dataclass

import grpc

from .rpc_guard import RpcFailure

# The protocol's own bounds (proto/gslice/v1/client.options: the shim's
# nanopb buffers). Longer strings could not come from a real shim.
MAX_GROUP_BYTES = 127
MAX_SECRET_BYTES = 127
MAX_GPU_UUID_BYTES = 95
MAX_PROCESS_NAME_BYTES = 127
# Wire formats: the largest value a uint32 field can carry.
UINT32_MAX = 2**32 - 1
UINT64_MAX = 2**64 - 1


@dataclass(frozen=True)
class Limits:
    max_clients: int = 1024               # attached clients, all groups
    max_clients_per_group: int = 256
    attach_rate: float = 100.0            # attaches per second, all clients (token bucket)
    attach_burst: int = 200
    max_streams_per_connection: int = 64  # concurrent RPCs on one connection
    max_connections: int = 2048           # incoming connections per socket
    connection_idle_seconds: float = 300.0  # a connection with no RPC for this long is closed

    def validate(self) -> "Limits":
        for name in ("max_clients", "max_clients_per_group", "attach_burst", "max_streams_per_connection",
                     "max_connections"):
            value = getattr(self, name)
            if not isinstance(value, int) or not 1 <= value <= 2**31 - 1:
                raise ValueError(f"{name.replace('_', '-')} {value!r} is invalid: expected 1..{2**31 - 1}")
        if not 0 < self.attach_rate <= 1e6:
            raise ValueError(f"attach-rate {self.attach_rate!r} is invalid: expected attaches per second in (0, 1e6]")
        if not 1.0 <= self.connection_idle_seconds <= 86400 * 30:
            raise ValueError(f"connection-idle-seconds {self.connection_idle_seconds!r} is invalid: "
                             "expected 1 .. 2592000 (30 days)")
        return self

    def server_options(self) -> list[tuple[str, int]]:
        """grpc's own connection limits for each server."""
        return [
            ("grpc.max_concurrent_streams", self.max_streams_per_connection),
            ("grpc.max_allowed_incoming_connections", self.max_connections),
            ("grpc.max_connection_idle_ms", int(self.connection_idle_seconds * 1000)),
        ]


class AttachRateLimiter:
    """Token bucket over all attaches: `rate` per second, bursts of `burst`."""

    def __init__(self, rate: float, burst: int, now: float):
        self.rate = rate
        self.burst = burst
        self._tokens = float(burst)
        self._last = now

    def take(self, now: float) -> None:
        """Spend one attach or raise RESOURCE_EXHAUSTED."""
        self._tokens = min(float(self.burst), self._tokens + max(0.0, now - self._last) * self.rate)
        self._last = max(self._last, now)
        if self._tokens < 1.0:
            raise RpcFailure(grpc.StatusCode.RESOURCE_EXHAUSTED,
                             f"attach rate limit: more than {self.rate:g} attaches per second "
                             f"(burst {self.burst}); retry in {(1.0 - self._tokens) / self.rate:.3f} s")
        self._tokens -= 1.0


def check_field_length(field: str, value: str, limit: int) -> None:
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > limit:
        raise RpcFailure(grpc.StatusCode.INVALID_ARGUMENT,
                         f"{field} is {size} bytes; at most {limit} bytes accepted")


def printable(text: str, limit: int = MAX_PROCESS_NAME_BYTES) -> str:
    """`text` with control characters (terminal escapes included) replaced by
    '?', cut to `limit` bytes of UTF-8: safe to store, log and print."""
    cleaned = "".join(ch if ch.isprintable() else "?" for ch in text)
    data = cleaned.encode("utf-8", "replace")[:limit]
    return data.decode("utf-8", "ignore")


def clamp_u64(value: int) -> int:
    """A count for a uint64 reply field (never overflows the encoder)."""
    return max(0, min(UINT64_MAX, int(value)))
