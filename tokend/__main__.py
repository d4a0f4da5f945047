"""`gslice-tokend` / `python -m gslice.tokend` / `gslice tokend`: run one
token daemon in the foreground until SIGTERM or SIGINT."""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from pathlib import Path

from gslice.paths import DEFAULT_SOCKET_DIR, DEFAULT_STATE_DIR

from .limits import UINT32_MAX, Limits
from .memory_ledger import DEFAULT_RECLAIM_TIMEOUT


def _add_switch(parser: argparse.ArgumentParser, flag: str, help: str) -> None:
    """An on|off option, on by default."""
    parser.add_argument(flag, choices=["on", "off"], default="on", help=help)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The daemon's flags (shared with `gslice tokend`)."""
    parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR,
                        help=f"where groups.json is kept (default {DEFAULT_STATE_DIR})")
    parser.add_argument("--socket-dir", type=Path, default=DEFAULT_SOCKET_DIR,
                        help=f"where client.sock and admin.sock are created (default {DEFAULT_SOCKET_DIR})")
    parser.add_argument("--client-socket-dir", type=Path, default=None,
                        help="put client.sock here instead of --socket-dir: a directory of its own, which "
                             "containers can mount (it survives restarts) without seeing admin.sock")
    parser.add_argument("--gpu", default=None, help="GPU index or UUID to serve (default 0)")
    parser.add_argument("--metrics-port", type=int, default=0,
                        help="serve Prometheus metrics on ADDRESS:PORT (default 0: off)")
    parser.add_argument("--metrics-address", default="127.0.0.1",
                        help="address for --metrics-port (default 127.0.0.1; 0.0.0.0 in a pod, for Prometheus)")
    parser.add_argument("--window", type=float, default=10.0, help="accounting window in seconds (default 10)")
    parser.add_argument("--quantum-min-ms", type=float, default=5.0, help="shortest time slice (default 5 ms)")
    parser.add_argument("--quantum-max-ms", type=float, default=100.0, help="longest time slice (default 100 ms)")
    parser.add_argument("--grace-ms", type=float, default=200.0,
                        help="how long past its quantum a holder may keep the token (default 200 ms)")
    parser.add_argument("--preempt-handover", choices=["at-once", "at-release"], default="at-once",
                        help="a preempting higher class gets the token at once, while the preempted holder's "
                             "last kernel drains (at-once, the default: one round trip less), or only when "
                             "the holder has released it (at-release: strictly one tenant submitting at a time)")
    _add_switch(parser, "--preempt-doorbell",
                help="keep a preemption doorbell (client.doorbell beside client.sock) through which a "
                      "preempting client stops the holder's submissions before the Revoke arrives (on, "
                      "the default), or preempt through the Revoke only (off)")
    _add_switch(parser, "--calls-socket",
                help="also serve the token and memory calls on a plain unix socket (client.calls beside "
                      "client.sock), without grpcio's per-message cost (on, the default), or on gRPC's "
                      "Calls stream only (off)")
    _add_switch(parser, "--anticipate-preemption",
                help="when a higher class asks at regular periods, tell the holder (on the doorbell) "
                      "when it is expected next, so the holder starts no long kernel that would still run "
                      "then (on, the default: the preemptor finds the GPU free, the holder's group pays up "
                      "to one kernel of idle GPU per arrival), or not (off)")
    _add_switch(parser, "--lease-at-start",
                help="give a starting client the token as a lease when nobody holds or waits for it, so "
                      "its first launch needs no round trip (on, the default; taken back when anyone asks, "
                      "like any lease), or not (off: its first launch asks)")
    parser.add_argument("--cap-period-ms", type=float, default=50.0,
                        help="smooth caps: longest pause between two slices of a group at its limit "
                             "(default 50 ms; 0: the limit holds over the window only)")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    limits = Limits()
    parser.add_argument("--max-clients", type=int, default=limits.max_clients,
                        help=f"attached clients over all groups (default {limits.max_clients})")
    parser.add_argument("--max-clients-per-group", type=int, default=limits.max_clients_per_group,
                        help=f"attached clients per group (default {limits.max_clients_per_group})")
    parser.add_argument("--attach-rate", type=float, default=limits.attach_rate,
                        help=f"attaches per second per group (default {limits.attach_rate:g})")
    parser.add_argument("--attach-burst", type=int, default=limits.attach_burst,
                        help=f"attaches per group allowed at once above the rate (default {limits.attach_burst})")
    parser.add_argument("--max-streams-per-connection", type=int, default=limits.max_streams_per_connection,
                        help=f"concurrent RPCs on one connection (default {limits.max_streams_per_connection})")
    parser.add_argument("--max-connections", type=int, default=limits.max_connections,
                        help=f"incoming connections per socket (default {limits.max_connections}); "
                             "keep below the file limit (LimitNOFILE)")
    parser.add_argument("--connection-idle-seconds", type=float, default=limits.connection_idle_seconds,
                        help=f"close connections with no RPC for this long (default {limits.connection_idle_seconds:g})")
    parser.add_argument("--bypass-policy", default="warn", choices=["none", "warn", "kill"],
                        help="what to do with a process that uses the GPU without being attached, or uses more "
                             "memory than its group's quota (default warn: status, metric, event)")
    parser.add_argument("--process-watch-seconds", type=float, default=5.0,
                        help="how often NVML's process list is checked for bypass (default 5; 0: off)")
    parser.add_argument("--reclaim-timeout-ms", type=float, default=DEFAULT_RECLAIM_TIMEOUT * 1000,
                        help="a departed (killed, exited) process's memory returns to its group when NVML no "
                             "longer lists the process (the driver has freed it); when NVML cannot tell (it "
                             "never listed the pid, or gives no process list), after this long "
                             f"(default {DEFAULT_RECLAIM_TIMEOUT * 1000:g} ms)")
    # For tests on machines without NVML: 'UUID,NAME,BYTES'.
    parser.add_argument("--fake-gpu", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--control-open-timeout", type=float, default=None, help=argparse.SUPPRESS)
    # For test harnesses: exit when process PID (our parent) dies, so a killed
    # test run never leaves a daemon behind. Set here, after exec, rather than
    # with a preexec_fn: forking a gRPC-using, threaded parent and running
    # Python before exec is what gRPC cannot tolerate.
    parser.add_argument("--parent-pid", type=int, default=None, help=argparse.SUPPRESS)


def _exit_with_parent(parent_pid: int) -> None:
    import ctypes
    import signal
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent_pid:   # the parent died before the line above
        sys.exit(f"tokend: parent process {parent_pid} is gone; not starting")


def run(args: argparse.Namespace) -> int:
    """Run the daemon from parsed flags; returns the exit status."""
    if args.parent_pid is not None:
        _exit_with_parent(args.parent_pid)
    from .coordinator import DEFAULT_CONTROL_OPEN_TIMEOUT
    from .daemon import DaemonOptions, StartupError, TokenDaemon
    from .gpu_discovery import GpuDiscoveryError, GpuInfo
    from .scheduler import SchedulerConfig
    from .state_store import StateError

    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s tokend %(levelname)s %(message)s")
    # grpc's own debug lines (one per RPC) would drown ours.
    logging.getLogger("grpc").setLevel(logging.WARNING)
    log = logging.getLogger("gslice.tokend")
    if args.metrics_port < 0 or args.metrics_port > 65535:
        log.error("--metrics-port %d is out of range; expected 0 (off) or 1..65535", args.metrics_port)
        return 2
    try:
        config = SchedulerConfig(window=args.window, quantum_min=args.quantum_min_ms / 1000.0,
                                 quantum_max=args.quantum_max_ms / 1000.0, grace=args.grace_ms / 1000.0,
                                 cap_period=args.cap_period_ms / 1000.0,
                                 preempt_handover=args.preempt_handover == "at-once",
                                 anticipate_preemption=args.anticipate_preemption == "on",
                                 lease_at_start=args.lease_at_start == "on")
        config.validate()
        limits = Limits(max_clients=args.max_clients, max_clients_per_group=args.max_clients_per_group,
                        attach_rate=args.attach_rate, attach_burst=args.attach_burst,
                        max_streams_per_connection=args.max_streams_per_connection,
                        max_connections=args.max_connections,
                        connection_idle_seconds=args.connection_idle_seconds).validate()
        # Durations the protocol carries in uint32 microseconds (AttachReply).
        for flag, value in (("--quantum-min-ms", args.quantum_min_ms), ("--quantum-max-ms", args.quantum_max_ms),
                            ("--grace-ms", args.grace_ms)):
            if not value * 1000 <= UINT32_MAX:
                raise ValueError(f"{flag} {value:g} is too large: the protocol carries at most "
                                 f"{UINT32_MAX // 1000} ms (uint32 microseconds)")
        if not 0 <= args.reclaim_timeout_ms <= 3_600_000:
            raise ValueError(f"--reclaim-timeout-ms {args.reclaim_timeout_ms:g} is invalid: expected 0 .. 3600000")
        if not 0 <= args.process_watch_seconds <= 3600:
            raise ValueError(f"--process-watch-seconds {args.process_watch_seconds:g} is invalid: "
                             "expected 0 (off) .. 3600")
        options = DaemonOptions(
            state_dir=args.state_dir, socket_dir=args.socket_dir, client_socket_dir=args.client_socket_dir,
            gpu=args.gpu,
            fake_gpu=GpuInfo.parse(args.fake_gpu) if args.fake_gpu else None,
            metrics_port=args.metrics_port, metrics_address=args.metrics_address, scheduler=config,
            control_open_timeout=args.control_open_timeout or DEFAULT_CONTROL_OPEN_TIMEOUT,
            limits=limits, bypass_policy=args.bypass_policy, process_watch_seconds=args.process_watch_seconds,
            preempt_doorbell=args.preempt_doorbell == "on", calls_socket=args.calls_socket == "on",
            reclaim_timeout=args.reclaim_timeout_ms / 1000.0)
        asyncio.run(TokenDaemon(options).run())
    except (StartupError, GpuDiscoveryError, StateError) as exc:
        log.error("%s", exc)
        return 1
    except Exception as exc:
        # The core's typed errors (bad --window etc.) and refused stored groups.
        if getattr(exc, "code", None) or isinstance(exc, ValueError):
            log.error("cannot start: %s", exc)
            return 1
        raise
    return 0


def main(argv: list[str] | None = None) -> int:
    from gslice import __version__

    parser = argparse.ArgumentParser(prog="gslice-tokend", description=__doc__)
    parser.add_argument("--version", action="version", version=f"gslice-tokend {__version__}")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
