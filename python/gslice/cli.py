"""`gslice`: the operator's command line.

Exit status: 0 ok, 1 error (one line on stderr), 2 usage, 141 the reader of
stdout went away (`gslice watch | head`)."""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shlex
import sys
import time
from pathlib import Path

from . import paths
from .cli_tables import terminal_safe
from .errors import GsliceError

USAGE_EXIT = 2
ERROR_EXIT = 1
# What a process killed by SIGPIPE reports (128 + 13), as `yes | head` does:
# the reader went away, which is neither success nor gslice's own error.
BROKEN_PIPE_EXIT = 141
# `group set` flags that change something (dest -> flag), for the refusal of a set without any.
GROUP_SET_FLAGS = {"request": "--request", "limit": "--limit", "memory": "--memory", "priority": "--priority",
                   "on_daemon_loss": "--on-daemon-loss", "rotate_secret": "--rotate-secret"}


def _positive_count(text: str) -> int:
    """--count / --iterations: 0 would mean one event anyway (watch) or nothing at all (top)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1, e.g. 10")
    return value


def _interval_seconds(text: str) -> float:
    """--interval: time.sleep refuses negatives, nan and inf (with a traceback)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds >= 0, e.g. 1 or 0.5")
    return value


def _admin(args):
    from .client import Client
    return Client(args.admin_socket)


def _client_socket(args, admin=None) -> Path:
    """--socket, else $GSLICE_SOCKET, else where the daemon says its client
    socket is (tokend --client-socket-dir puts it in a directory of its own),
    else the one beside the admin socket (daemon not reachable)."""
    explicit = getattr(args, "socket", None)
    if explicit or os.environ.get(paths.ENV_SOCKET):
        return paths.client_socket(explicit)
    try:
        if admin is not None:
            reported = admin.status().client_socket
        else:
            with _admin(args) as own:
                reported = own.status().client_socket
    except GsliceError:
        reported = ""
    return Path(reported) if reported else paths.client_socket(None, args.admin_socket)


def _print_join_instructions(name: str, secret: str, client_socket: Path) -> None:
    print(f"""
Processes join group {name!r} with this environment:
  {paths.ENV_SOCKET}={client_socket}
  {paths.ENV_GROUP}={name}
  {paths.ENV_GROUP_SECRET}={secret}
  LD_PRELOAD=$(gslice lib-path)
or simply: gslice run --group {shlex.quote(name)} -- COMMAND ...""")


def cmd_group_create(args) -> int:
    with _admin(args) as admin:
        created = admin.create_group(args.name, request=args.request, limit=args.limit, memory=args.memory,
                                     priority=args.priority, on_daemon_loss=args.on_daemon_loss)
        client_socket = _client_socket(args, admin)
    from .cli_tables import groups_table
    print(f"created group {created.group.name!r}")
    print(groups_table([created.group]))
    _print_join_instructions(created.group.name, created.secret, client_socket)
    return 0


def cmd_group_set(args) -> int:
    if not any(getattr(args, dest) not in (None, False) for dest in GROUP_SET_FLAGS):
        print(f"gslice group set {args.name}: nothing to change; give at least one of "
              f"{', '.join(GROUP_SET_FLAGS.values())}", file=sys.stderr)
        return USAGE_EXIT
    with _admin(args) as admin:
        group = admin.update_group(args.name, request=args.request, limit=args.limit, memory=args.memory,
                                   priority=args.priority, rotate_secret=args.rotate_secret,
                                   on_daemon_loss=args.on_daemon_loss)
    from .cli_tables import groups_table
    print(groups_table([group]))
    if args.rotate_secret:
        print(f"secret rotated: processes attached with the old secret were detached; new processes need the new "
              f"one (gslice group show {shlex.quote(args.name)} --secret)")
    return 0


def cmd_group_rm(args) -> int:
    with _admin(args) as admin:
        admin.delete_group(args.name)
    print(f"deleted group {args.name!r}")
    return 0


def cmd_group_ls(args) -> int:
    from .cli_tables import groups_table
    with _admin(args) as admin:
        groups = admin.list_groups()
    if args.json:
        print(json.dumps([g.to_dict() for g in groups], indent=2))
    else:
        print(groups_table(groups))
    return 0


def cmd_group_show(args) -> int:
    with _admin(args) as admin:
        status = admin.status()
        group_status = status.group(args.name)
        secret = admin.group_secret(args.name) if args.secret else None
    data = {**group_status.group.to_dict(), "share": group_status.share, "memory_used": group_status.memory_used,
            "over_quota": group_status.over_quota, "clients": group_status.clients, "waiting": group_status.waiting,
            "tokens_granted": group_status.tokens_granted, "preemptions": group_status.preemptions,
            "memory_awaiting_driver": group_status.memory_awaiting_driver,
            "charged_seconds": group_status.charged_seconds, "note": group_status.note}
    if secret is not None:
        data["secret"] = secret
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        for key, value in data.items():
            print(f"{key + ':':16}{value}")
    return 0


def cmd_status(args) -> int:
    with _admin(args) as admin:
        status = admin.status()
    if args.json:
        print(json.dumps(status.to_dict(), indent=2))
    else:
        from .cli_tables import status_text
        print(status_text(status))
    return 0


def cmd_client_rm(args) -> int:
    with _admin(args) as admin:
        admin.remove_client(args.client, args.reason)
    print(f"client {args.client} removed (its token and memory are freed)")
    return 0


def cmd_top(args) -> int:
    from .cli_tables import status_text
    clear = sys.stdout.isatty()
    shown = 0
    with _admin(args) as admin:
        try:
            while args.iterations is None or shown < args.iterations:
                if shown:
                    time.sleep(args.interval)
                text = status_text(admin.status())
                if clear:
                    sys.stdout.write("\x1b[H\x1b[2J")
                print(time.strftime("%H:%M:%S"), "gslice top (Ctrl-C to quit)")
                print(text, flush=True)
                shown += 1
        except KeyboardInterrupt:
            pass
    return 0


def cmd_watch(args) -> int:
    """One line per event until Ctrl-C (or --count events), --json for machines."""
    shown = 0
    with _admin(args) as admin:
        stream = admin.watch()
        try:
            for event in stream:
                if args.json:
                    print(json.dumps(dataclasses.asdict(event)), flush=True)
                else:
                    when = time.strftime("%H:%M:%S", time.localtime(event.time))
                    who = " ".join(x for x in (event.group and f"group={event.group}",
                                               event.client_id and f"client={event.client_id[:12]}") if x)
                    print(terminal_safe(f"{when} {event.kind:<16} {who} {event.message}".rstrip()), flush=True)
                shown += 1
                if args.count is not None and shown >= args.count:
                    break
        except KeyboardInterrupt:
            pass
        finally:
            stream.close()
    return 0


def cmd_tokend(args) -> int:
    from gslice.tokend.__main__ import run
    return run(args)


def cmd_lib_path(args) -> int:
    from .cli_doctor import shim_library_path
    path = shim_library_path()
    if not path.exists():
        raise GsliceError(f"libgslice.so is not built (expected at {path}): run `python tools/build_native.py hook` "
                          "or reinstall gslice")
    print(path)
    return 0


def cmd_install_shim(args) -> int:
    from .shim_install import install_shim
    try:
        print(install_shim(args.prefix))
    except (OSError, ValueError) as exc:
        raise GsliceError(f"installing the shim under {args.prefix} failed: {exc}") from exc
    return 0


def cmd_run(args) -> int:
    from .cli_doctor import shim_library_path
    command = args.command
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        print("gslice run: no command given; usage: gslice run --group NAME -- COMMAND ...", file=sys.stderr)
        return USAGE_EXIT
    library = shim_library_path()
    if not library.exists():
        raise GsliceError(f"libgslice.so is not built (expected at {library}): run `python tools/build_native.py hook`")
    if args.secret is not None:
        raise GsliceError(f"--secret is refused: a secret on a command line is visible to every user in `ps`; "
                          f"use --secret-file PATH, ${paths.ENV_GROUP_SECRET_FILE} or ${paths.ENV_GROUP_SECRET}")
    env = dict(os.environ)
    if args.secret_file:
        if not os.access(args.secret_file, os.R_OK):
            raise GsliceError(f"--secret-file {args.secret_file}: not a readable file")
        env.pop(paths.ENV_GROUP_SECRET, None)
        env[paths.ENV_GROUP_SECRET_FILE] = os.path.abspath(args.secret_file)
    elif not env.get(paths.ENV_GROUP_SECRET) and not env.get(paths.ENV_GROUP_SECRET_FILE):
        # The environment of a process is readable by its own user only (unlike its command line).
        with _admin(args) as admin:
            env[paths.ENV_GROUP_SECRET] = admin.group_secret(args.group)
    preload = env.get("LD_PRELOAD", "")
    env["LD_PRELOAD"] = f"{library}:{preload}" if preload else str(library)
    env[paths.ENV_SOCKET] = str(_client_socket(args))
    env[paths.ENV_GROUP] = args.group
    try:
        os.execvpe(command[0], command, env)
    except OSError as exc:
        raise GsliceError(f"cannot run {command[0]!r}: {exc.strerror}") from None
    return ERROR_EXIT  # not reached


def cmd_doctor(args) -> int:
    from .cli_doctor import run_checks
    checks = run_checks(_client_socket(args), paths.admin_socket(args.admin_socket),
                        args.group, args.gpu)
    for check in checks:
        print(f"[{'ok' if check.ok else 'FAIL':4}] {check.name}: {check.detail}")
    failed = [c for c in checks if not c.ok]
    print(f"{len(checks) - len(failed)} of {len(checks)} checks passed")
    return ERROR_EXIT if failed else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gslice", description="Share one NVIDIA GPU between groups of processes.")
    from . import __version__
    parser.add_argument("--version", action="version", version=f"gslice {__version__}")
    parser.add_argument("--admin-socket", default=None,
                        help=f"tokend's admin socket (default ${paths.ENV_ADMIN_SOCKET} or {paths.DEFAULT_ADMIN_SOCKET})")
    sub = parser.add_subparsers(dest="command_name", required=True, metavar="COMMAND")

    group = sub.add_parser("group", help="create, change, list and delete groups")
    group_sub = group.add_subparsers(dest="group_command", required=True, metavar="ACTION")
    create = group_sub.add_parser("create", help="create a group")
    create.add_argument("name")
    create.add_argument("--request", required=True, help="guaranteed share, e.g. 30%% or 0.3")
    create.add_argument("--limit", default=None, help="cap on the share (default: the request)")
    create.add_argument("--memory", required=True, help="GPU memory quota, e.g. 4GiB")
    create.add_argument("--priority", default="normal", choices=["low", "normal", "high"])
    create.add_argument("--on-daemon-loss", choices=["wait", "open"], default=None,
                        help="what the group's processes do while tokend is unreachable (default wait)")
    create.set_defaults(func=cmd_group_create)
    update = group_sub.add_parser("set", help="change a group (only the given fields)")
    update.add_argument("name")
    update.add_argument("--request")
    update.add_argument("--limit")
    update.add_argument("--memory")
    update.add_argument("--priority", choices=["low", "normal", "high"])
    update.add_argument("--rotate-secret", action="store_true",
                        help="issue a new secret and detach every process attached with the old one")
    update.add_argument("--on-daemon-loss", choices=["wait", "open"], default=None,
                        help="what the group's processes do while tokend is unreachable (default wait)")
    update.set_defaults(func=cmd_group_set)
    remove = group_sub.add_parser("rm", help="delete a group (refused while processes are attached)")
    remove.add_argument("name")
    remove.set_defaults(func=cmd_group_rm)
    listing = group_sub.add_parser("ls", help="list groups")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(func=cmd_group_ls)
    show = group_sub.add_parser("show", help="one group's settings and state")
    show.add_argument("name")
    show.add_argument("--secret", action="store_true", help="also print the group's secret")
    show.add_argument("--json", action="store_true")
    show.set_defaults(func=cmd_group_show)

    status = sub.add_parser("status", help="the GPU's groups, shares, memory and clients")
    status.add_argument("--json", action="store_true")
    status.set_defaults(func=cmd_status)
    client = sub.add_parser("client", help="act on one attached client")
    client_sub = client.add_subparsers(dest="client_command", required=True, metavar="ACTION")
    client_rm = client_sub.add_parser("rm", help="detach a client now (named as `gslice status` shows it)")
    client_rm.add_argument("client", help="the client as status shows it, e.g. c17")
    client_rm.add_argument("--reason", default="", help="shown in the client_detached event")
    client_rm.set_defaults(func=cmd_client_rm)

    top = sub.add_parser("top", help="live status, refreshed every second until Ctrl-C")
    top.add_argument("--iterations", type=_positive_count, default=None, help="stop after N refreshes (N >= 1)")
    top.add_argument("--interval", type=_interval_seconds, default=1.0, help="seconds between refreshes (default 1)")
    top.set_defaults(func=cmd_top)

    from gslice.tokend.__main__ import add_arguments
    watch = sub.add_parser("watch", help="print the daemon's events as they happen, until Ctrl-C")
    watch.add_argument("--json", action="store_true", help="one JSON object per line")
    watch.add_argument("--count", type=_positive_count, default=None, help="stop after this many events (>= 1)")
    watch.set_defaults(func=cmd_watch)

    tokend = sub.add_parser("tokend", help="run the token daemon for one GPU in the foreground")
    add_arguments(tokend)
    tokend.set_defaults(func=cmd_tokend)

    lib_path = sub.add_parser("lib-path", help="print the path of libgslice.so (for LD_PRELOAD)")
    lib_path.set_defaults(func=cmd_lib_path)

    install_shim = sub.add_parser("install-shim", help="copy libgslice.so to PREFIX/<version>/lib for the "
                                                       "node's containers (PREFIX/current points at it)")
    install_shim.add_argument("--prefix", default="/opt/gslice", help="host folder (default /opt/gslice)")
    install_shim.set_defaults(func=cmd_install_shim)

    run = sub.add_parser("run", help="run a command as a member of a group")
    run.add_argument("--group", required=True)
    run.add_argument("--socket", default=None, help=f"tokend's client socket (default ${paths.ENV_SOCKET}, else "
                                                     "the one the daemon reports over the admin socket)")
    run.add_argument("--secret-file", default=None,
                     help=f"file holding the group secret (default ${paths.ENV_GROUP_SECRET_FILE} or "
                          f"${paths.ENV_GROUP_SECRET}, else read through the admin socket)")
    run.add_argument("--secret", default=None, help=argparse.SUPPRESS)  # refused with a hint: visible in ps
    run.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ...")
    run.set_defaults(func=cmd_run)

    doctor = sub.add_parser("doctor", help="check that this machine is ready for gslice")
    doctor.add_argument("--group", default=None, help="also check that this group exists")
    doctor.add_argument("--socket", default=None, help="client socket to check")
    doctor.add_argument("--gpu", default=None, help="GPU index or UUID to look for")
    doctor.set_defaults(func=cmd_doctor)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code = args.func(args)
        sys.stdout.flush()  # here, not at exit: a reader gone by then is handled below too
        return code
    except BrokenPipeError:
        # `gslice watch | head -3`: the reader has what it wanted. Output still
        # buffered goes to /dev/null, or Python's flush at exit fails again.
        _stdout_to_devnull()
        return BROKEN_PIPE_EXIT
    except GsliceError as exc:
        print(f"gslice: {exc}", file=sys.stderr)
        return ERROR_EXIT
    except KeyboardInterrupt:
        return 130


def _stdout_to_devnull() -> None:
    try:
        descriptor = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return  # not a file (a test's capture): nothing to flush at exit
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, descriptor)
    finally:
        os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())
