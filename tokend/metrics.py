"""Prometheus metrics of one tokend, in its own registry (so several daemons
in one test process never collide). Counters move as things happen, on the
event loop; gauges that depend on the clock (shares) are refreshed by the
daemon's periodic refresh, so the HTTP thread never touches the core."""
from __future__ import annotations

import socket
import socketserver
import threading
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app

# How often the /metrics server's loop looks for a stop request. The stdlib's
# default (0.5 s, what prometheus_client's start_http_server runs with) made
# every daemon stop wait 0.25 s on average for its HTTP thread.
METRICS_STOP_POLL_SECONDS = 0.02

# Token waits span sub-millisecond grants to whole windows of queueing.
WAIT_BUCKETS = (0.0005, 0.001, 0.0015, 0.002, 0.0025, 0.003, 0.004, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                1.0, 2.5, 5.0, 10.0, 30.0)


class TokendMetrics:
    def __init__(self, gpu_uuid: str):
        self.registry = CollectorRegistry()
        r = self.registry
        self.gpu_info = Gauge("gslice_gpu_info", "The GPU this daemon serves (value 1)", ["gpu_uuid", "gpu_name"], registry=r)
        self.group_share = Gauge("gslice_group_share", "Charged GPU time over the window / window", ["group"], registry=r)
        self.group_request = Gauge("gslice_group_request", "Guaranteed share of the group", ["group"], registry=r)
        self.group_limit = Gauge("gslice_group_limit", "Share cap of the group", ["group"], registry=r)
        self.memory_used = Gauge("gslice_group_memory_used_bytes", "Device memory reserved by the group", ["group"], registry=r)
        self.memory_quota = Gauge("gslice_group_memory_quota_bytes", "Device memory quota of the group", ["group"], registry=r)
        self.clients = Gauge("gslice_group_clients", "Attached clients of the group", ["group"], registry=r)
        self.tokens_granted = Counter("gslice_tokens_granted", "Tokens granted", ["group"], registry=r)
        self.token_wait = Histogram("gslice_token_wait_seconds", "AcquireToken request to grant", ["group"],
                                    buckets=WAIT_BUCKETS, registry=r)
        self.preemptions = Counter("gslice_preemptions", "Tokens revoked from the group's holder", ["group"], registry=r)
        self.expiries = Counter("gslice_token_expiries", "Tokens taken back after quantum + grace", ["group"], registry=r)
        self.memory_refused = Counter("gslice_memory_refused", "Reservations refused by the quota", ["group"], registry=r)
        self.bad_requests = Counter("gslice_bad_requests", "RPCs answered with an error status", ["method", "code"], registry=r)
        self.decisions = Counter("gslice_scheduler_decisions", "Decisions applied from the scheduler core", ["kind"], registry=r)
        self.events_dropped = Counter("gslice_watch_events_dropped", "Events dropped for slow watchers", registry=r)
        self.unmanaged_processes = Gauge(
            "gslice_unmanaged_processes", "Processes on the GPU that escape gslice (not attached, or over their "
            "group's memory quota), from NVML", ["problem"], registry=r)
        self.busy_fraction = Gauge("gslice_gpu_busy_fraction", "Token held over the window", registry=r)
        self.memory_awaiting_driver = Gauge(
            "gslice_group_memory_awaiting_driver_bytes", "Memory of the group's departed processes still charged "
            "to it until the driver frees it (part of gslice_group_memory_used_bytes)", ["group"], registry=r)
        self.memory_reclaimed = Counter(
            "gslice_memory_reclaims", "Pending reclaims ended, by how: driver freed (NVML stopped listing the "
            "process), timeout (NVML could not tell), superseded (the process attached again)", ["group", "how"],
            registry=r)
        self.gpu_uuid = gpu_uuid
        self._children: dict[tuple, object] = {}

    def labelled(self, metric, *values: str):
        """metric.labels(*values), kept: labels() checks its arguments and
        takes a lock on every call, a few us on each token and memory call
        (the daemon's hot path). forget_group drops a group's."""
        key = (metric, values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*values)
        return child

    def forget_group(self, group: str) -> None:
        """Drop a deleted group's labelled series so /metrics does not show ghosts."""
        for key in [key for key in self._children if key[1][:1] == (group,)]:
            del self._children[key]
        for metric in (self.group_share, self.group_request, self.group_limit, self.memory_used, self.memory_quota,
                       self.clients, self.tokens_granted, self.token_wait, self.preemptions, self.expiries,
                       self.memory_refused, self.memory_awaiting_driver):
            try:
                metric.remove(group)
            except KeyError:
                pass
        for how in ("driver freed", "timeout", "superseded"):
            try:
                self.memory_reclaimed.remove(group, how)
            except KeyError:
                pass

    def serve(self, port: int, host: str = "127.0.0.1"):
        """Serve /metrics over HTTP on host:port (0 = a free port) in a daemon
        thread; returns (server, bound_port). server.shutdown() stops it
        within METRICS_STOP_POLL_SECONDS."""
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
        server_class = type("MetricsServer", (_ThreadingWSGIServer,), {"address_family": family})
        server = make_server(host, port, make_wsgi_app(self.registry), server_class, handler_class=_QuietHandler)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": METRICS_STOP_POLL_SECONDS},
                         name="metrics-http", daemon=True).start()
        return server, server.server_address[1]


class _ThreadingWSGIServer(socketserver.ThreadingMixIn, WSGIServer):
    """One thread per scrape, none of which keeps the daemon from exiting."""
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    """Scrapes are not logged on stderr."""

    def log_message(self, format, *args):  # noqa: A002 (the stdlib's signature)
        pass
