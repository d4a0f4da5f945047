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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The daemon's flags (shared with `gslice tokend`)."""
    parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR,
                        help=f"where groups.json is kept (default {DEFAULT_STATE_DIR})")
    parser.add_argument("--socket-dir", type=Path, default=DEFAULT_SOCKET_DIR,
                        help=f"where client.sock and admin.sock are created (default {DEFAULT_SOCKET_DIR})")
    parser.add_argument("--gpu", default=None, help="GPU index or UUID to serve (default 0)")
    parser.add_argument("--metrics-port", type=int, default=0,
                        help="serve Prometheus metrics on 127.0.0.1:PORT (default 0: off)")
    parser.add_argument("--window", type=float, default=10.0, help="accounting window in seconds (default 10)")
    parser.add_argument("--quantum-min-ms", type=float, default=5.0, help="shortest time slice (default 5 ms)")
    parser.add_argument("--quantum-max-ms", type=float, default=100.0, help="longest time slice (default 100 ms)")
    parser.add_argument("--grace-ms", type=float, default=200.0,
                        help="how long past its quantum a holder may keep the token (default 200 ms)")
    parser.add_argument("--cap-period-ms", type=float, default=50.0,
                        help="smooth caps: longest pause between two slices of a group at its limit "
                             "(default 50 ms; 0: the limit holds over the window only)")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
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
                                 cap_period=args.cap_period_ms / 1000.0)
        config.validate()
        options = DaemonOptions(
            state_dir=args.state_dir, socket_dir=args.socket_dir, gpu=args.gpu,
            fake_gpu=GpuInfo.parse(args.fake_gpu) if args.fake_gpu else None,
            metrics_port=args.metrics_port, scheduler=config,
            control_open_timeout=args.control_open_timeout or DEFAULT_CONTROL_OPEN_TIMEOUT)
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
    parser = argparse.ArgumentParser(prog="gslice-tokend", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
