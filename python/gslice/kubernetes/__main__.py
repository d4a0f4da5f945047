"""gslice-dra: the gslice DRA kubelet plugin.

  gslice-dra run --node-name $NODE_NAME        serve kubelet until SIGTERM
  gslice-dra install-shim                      init step: libgslice.so -> /opt/gslice/<version>/lib
  gslice-dra check                             probe: the plugin answers GetInfo on its socket
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path

from . import DRIVER_NAME, config as defaults


def _byte_size(text: str) -> int:
    """--memory-reserve: 0, or a size such as 512MiB."""
    from gslice.units import parse_bytes
    if text.strip() == "0":
        return 0
    try:
        return parse_bytes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _seconds(text: str) -> float:
    """--cleanup-interval: 0 would make the loop ask the API server without pause."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds > 0, e.g. 60")
    return value


def _config(args) -> "defaults.PluginConfig":
    return defaults.PluginConfig(
        node_name=args.node_name, driver_name=args.driver_name, registry_dir=args.registry_dir,
        plugins_dir=args.plugins_dir, cdi_dir=args.cdi_dir, state_dir=args.state_dir, shim_root=args.shim_root,
        shim_version=args.shim_version, tokend_admin_sockets=args.tokend_admin_sockets,
        memory_reserve=args.memory_reserve, cleanup_interval=args.cleanup_interval)


def cmd_run(args) -> int:
    from .cluster_api import ApiConfigError, KubernetesApi
    from .driver import Driver
    from .plugin import KubeletPlugin, SocketSetupError

    if not args.node_name:
        print("gslice-dra: --node-name (or $NODE_NAME) is required", file=sys.stderr)
        return 2
    config = _config(args)
    try:
        api = KubernetesApi()
    except ImportError as exc:
        print(f"gslice-dra: the kubelet plugin needs the Python package `kubernetes` ({exc}): "
              "pip install 'gslice[kubernetes]'", file=sys.stderr)
        return 1
    except ApiConfigError as exc:
        print(f"gslice-dra: {exc}", file=sys.stderr)
        return 1
    plugin = KubeletPlugin(config, Driver(config, api))
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    try:
        plugin.start()
    except SocketSetupError as exc:
        print(f"gslice-dra: {exc}", file=sys.stderr)
        return 1
    try:
        stop.wait()
    finally:
        plugin.stop()
    return 0


def cmd_install_shim(args) -> int:
    from gslice import __version__
    from gslice.shim_install import install_shim

    try:
        target = install_shim(args.shim_root, source=args.source, version=args.shim_version or __version__)
    except (OSError, ValueError) as exc:
        print(f"gslice-dra: installing the shim under {args.shim_root} failed: {exc}", file=sys.stderr)
        return 1
    print(f"installed: {target}")
    return 0


def cmd_check(args) -> int:
    import grpc
    from gslice.kubelet import pluginregistration_v1_pb2 as pb, pluginregistration_v1_pb2_grpc as pb_grpc

    socket_path = args.registry_dir / f"{args.driver_name}-reg.sock"
    with grpc.insecure_channel(f"unix://{socket_path}") as channel:
        try:
            info = pb_grpc.RegistrationStub(channel).GetInfo(pb.InfoRequest(), timeout=5)
        except grpc.RpcError as exc:
            print(f"gslice-dra: no answer on {socket_path}: {exc.code().name} {exc.details()}", file=sys.stderr)
            return 1
    print(f"{info.name}: {info.type} on {info.endpoint} ({', '.join(info.supported_versions)})")
    return 0


def _add_common_options(parser: argparse.ArgumentParser, suppress_defaults: bool) -> None:
    """The options every command shares. They are accepted before the command
    and after it (`gslice-dra install-shim --shim-root DIR`, as the DaemonSet
    writes it); after it, an option not given must not reset one given before."""
    def default(value):
        return argparse.SUPPRESS if suppress_defaults else value
    parser.add_argument("--log-level", default=default("info"), choices=["debug", "info", "warning", "error"])
    parser.add_argument("--driver-name", default=default(DRIVER_NAME), help=f"DRA driver name (default {DRIVER_NAME})")
    parser.add_argument("--registry-dir", type=Path, default=default(defaults.KUBELET_REGISTRY_DIR),
                        help=f"kubelet's plugin registry (default {defaults.KUBELET_REGISTRY_DIR})")
    parser.add_argument("--shim-root", type=Path, default=default(defaults.SHIM_ROOT),
                        help=f"host folder of the shim's versioned folders (default {defaults.SHIM_ROOT})")
    parser.add_argument("--shim-version", default=default(""), help="folder under --shim-root (default: this version)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gslice-dra", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    from gslice import __version__
    parser.add_argument("--version", action="version", version=f"gslice-dra {__version__}")
    _add_common_options(parser, suppress_defaults=False)
    common = argparse.ArgumentParser(add_help=False)
    _add_common_options(common, suppress_defaults=True)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", parents=[common], help="serve kubelet until SIGTERM")
    run.add_argument("--node-name", default=os.environ.get("NODE_NAME", ""),
                     help="this node's name (default $NODE_NAME)")
    run.add_argument("--plugins-dir", type=Path, default=defaults.KUBELET_PLUGINS_DIR,
                     help=f"where the DRA socket goes, in a folder per driver (default {defaults.KUBELET_PLUGINS_DIR})")
    run.add_argument("--cdi-dir", type=Path, default=defaults.CDI_DIR,
                     help=f"where the claims' CDI specs go (default {defaults.CDI_DIR})")
    run.add_argument("--state-dir", type=Path, default=defaults.STATE_DIR,
                     help=f"checkpoint and the claims' secret files (default {defaults.STATE_DIR})")
    run.add_argument("--tokend-admin-sockets", default=defaults.TOKEND_ADMIN_SOCKETS,
                     help=f"glob of the node's tokend admin sockets (default {defaults.TOKEND_ADMIN_SOCKETS})")
    run.add_argument("--memory-reserve", type=_byte_size, default="512MiB",
                     help="GPU memory kept out of the ResourceSlice (default 512MiB)")
    run.add_argument("--cleanup-interval", type=_seconds, default=60.0,
                     help="seconds between slice refreshes and stale-claim clean-ups (default 60)")
    run.set_defaults(func=cmd_run)
    install = sub.add_parser("install-shim", parents=[common], help="copy libgslice.so into SHIM_ROOT/VERSION/lib")
    install.add_argument("--source", type=Path, default=None,
                         help="the library to install (default: the packaged shim)")
    install.set_defaults(func=cmd_install_shim)
    check = sub.add_parser("check", parents=[common], help="exit 0 when the plugin answers GetInfo")
    check.set_defaults(func=cmd_check)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s gslice-dra %(levelname)s %(message)s")
    logging.getLogger("grpc").setLevel(logging.WARNING)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
