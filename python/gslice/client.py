"""The operator API: manage groups and read the status of one tokend over its
admin socket.

    import gslice
    with gslice.Client() as admin:            # $GSLICE_ADMIN_SOCKET or /run/gslice/admin.sock
        created = admin.create_group("training", request="30%", limit="50%", memory="4GiB")
        print(created.secret)                 # hand to the group's processes
        print(admin.status().groups)

Values are checked here before anything is sent; daemon refusals come back
as the typed errors of gslice.errors."""
from __future__ import annotations

import enum
import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from . import paths
from .errors import (AlreadyExists, Conflict, DaemonError, DaemonUnavailable, GsliceError, InvalidValue, NotFound,
                     PermissionDenied)
from .units import parse_bytes, parse_share
from .v1 import admin_pb2, admin_pb2_grpc, common_pb2

DEFAULT_TIMEOUT = 10.0


class Priority(enum.IntEnum):
    """Priority class of a group (same numbers as the protocol)."""
    LOW = 1
    NORMAL = 2
    HIGH = 3

    @classmethod
    def parse(cls, value: "str | int | Priority") -> "Priority":
        if isinstance(value, cls):
            return value
        if isinstance(value, str) and value.strip().upper() in cls.__members__:
            return cls[value.strip().upper()]
        if isinstance(value, int) and not isinstance(value, bool) and value in cls._value2member_map_:
            return cls(value)
        raise InvalidValue(f"priority {value!r} is not one of: low, normal, high")


# What a group's processes do while tokend is unreachable (the protocol's DaemonLossPolicy).
DAEMON_LOSS_POLICIES = {"wait": common_pb2.DAEMON_LOSS_WAIT, "open": common_pb2.DAEMON_LOSS_OPEN}


def _loss_policy_name(value: int) -> str:
    for name, number in DAEMON_LOSS_POLICIES.items():
        if number == value:
            return name
    return "wait"  # DAEMON_LOSS_UNSPECIFIED: the daemon treats it as wait


def _loss_policy_number(value) -> int:
    if not isinstance(value, str) or value not in DAEMON_LOSS_POLICIES:
        raise InvalidValue(f"on_daemon_loss {value!r} is not one of: {', '.join(DAEMON_LOSS_POLICIES)}")
    return DAEMON_LOSS_POLICIES[value]


@dataclass(frozen=True)
class Group:
    name: str
    request: float
    limit: float
    memory_quota: int
    priority: Priority
    labels: dict[str, str] = field(default_factory=dict)  # who it is for, e.g. gslice.dev/claim
    on_daemon_loss: str = "wait"  # "wait" or "open": see DAEMON_LOSS_POLICIES

    @classmethod
    def from_proto(cls, group: admin_pb2.Group) -> "Group":
        return cls(group.name, group.request, group.limit, group.memory_quota,
                   Priority(group.priority or Priority.NORMAL), dict(group.labels),
                   _loss_policy_name(group.on_daemon_loss))

    def to_dict(self) -> dict:
        data = asdict(self)
        data["priority"] = self.priority.name.lower()
        if not self.labels:
            del data["labels"]  # the JSON of unlabelled groups stays as it was
        if self.on_daemon_loss == "wait":
            del data["on_daemon_loss"]  # likewise: absent means the default, wait
        return data


@dataclass(frozen=True)
class CreatedGroup:
    group: Group
    secret: str


@dataclass(frozen=True)
class GroupStatus:
    group: Group
    share: float
    memory_used: int
    over_quota: bool
    clients: int
    waiting: int
    note: str
    tokens_granted: int
    preemptions: int
    flagged: bool = False
    memory_awaiting_driver: int = 0  # part of memory_used: departed processes' memory the driver has not freed
    charged_seconds: float = 0.0  # GPU time charged since the group was created (s)


@dataclass(frozen=True)
class ClientStatus:
    client_id: str
    group: str
    pid: int
    process_name: str
    holding: bool
    waiting: bool
    memory_used: int
    attached_at: float


@dataclass(frozen=True)
class GpuProcess:
    """A process on the GPU that escapes gslice (tokend's NVML process watch)."""
    pid: int
    used_memory: int
    group: str
    problem: str
    action: str


@dataclass(frozen=True)
class Status:
    gpu_uuid: str
    gpu_name: str
    physical_memory: int
    window_seconds: float
    holder_client_id: str
    holder_group: str
    token_id: int
    waiting_client_ids: list[str]
    groups: list[GroupStatus]
    clients: list[ClientStatus]
    busy_fraction: float
    now: float
    decisions: int
    gpu_index: int = 0
    client_socket: str = ""  # as the daemon sees it
    unmanaged_processes: list[GpuProcess] = field(default_factory=list)
    state_note: str = ""

    @classmethod
    def from_proto(cls, reply: admin_pb2.GpuStatus) -> "Status":
        return cls(
            gpu_uuid=reply.gpu_uuid, gpu_name=reply.gpu_name, physical_memory=reply.physical_memory,
            window_seconds=reply.window_seconds, holder_client_id=reply.holder_client_id,
            holder_group=reply.holder_group, token_id=reply.token_id,
            waiting_client_ids=list(reply.waiting_client_ids),
            groups=[GroupStatus(Group.from_proto(g.group), g.share, g.memory_used, g.over_quota, g.clients,
                                g.waiting, g.note, g.tokens_granted, g.preemptions, g.flagged,
                                g.memory_awaiting_driver, g.charged_seconds) for g in reply.groups],
            clients=[ClientStatus(c.client_id, c.group, c.pid, c.process_name, c.holding, c.waiting, c.memory_used,
                                  c.attached_at) for c in reply.clients],
            busy_fraction=reply.busy_fraction, now=reply.now, decisions=reply.decisions,
            gpu_index=reply.gpu_index, client_socket=reply.client_socket,
            unmanaged_processes=[GpuProcess(p.pid, p.used_memory, p.group, p.problem, p.action)
                                 for p in reply.unmanaged_processes],
            state_note=reply.state_note)

    def group(self, name: str) -> GroupStatus:
        for status in self.groups:
            if status.group.name == name:
                return status
        raise NotFound(f"no group named {name!r} in the status; groups: {[g.group.name for g in self.groups]}")

    def to_dict(self) -> dict:
        data = asdict(self)
        for entry, status in zip(data["groups"], self.groups):
            entry["group"] = status.group.to_dict()
        return data


@dataclass(frozen=True)
class Event:
    time: float
    kind: str
    group: str
    client_id: str
    message: str


_STATUS_ERRORS = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidValue,
    grpc.StatusCode.OUT_OF_RANGE: InvalidValue,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.FAILED_PRECONDITION: Conflict,
    grpc.StatusCode.RESOURCE_EXHAUSTED: Conflict,
    grpc.StatusCode.UNAUTHENTICATED: PermissionDenied,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
}


def health_status(socket_path: str | os.PathLike, timeout: float = 1.0) -> str:
    """grpc.health.v1 status of a tokend socket: 'SERVING', 'NOT_SERVING', ...,
    or 'UNREACHABLE' when nothing answers."""
    with grpc.insecure_channel(paths.grpc_target(socket_path)) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""),
                                                               timeout=timeout)
        except grpc.RpcError:
            return "UNREACHABLE"
    return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)


# Same rule as the daemon's (tokend/scheduler.py), checked here to fail fast.
_GROUP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


def _check_text(what: str, value) -> str:
    if not isinstance(value, str):
        raise InvalidValue(f"{what} {value!r} has type {type(value).__name__}; expected a str")
    return value


def check_labels(labels) -> dict[str, str]:
    """`labels` as a dict of str to str (None: none), else InvalidValue naming the entry."""
    if labels is None:
        return {}
    if not isinstance(labels, Mapping):
        raise InvalidValue(f"labels {labels!r} has type {type(labels).__name__}; expected a dict of str to str")
    for key, value in labels.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise InvalidValue(f"label {key!r}: {value!r} has types {type(key).__name__}: {type(value).__name__}; "
                               "labels must map str to str, e.g. {'team': 'vision'}")
    return dict(labels)


def check_group_name(name: str) -> str:
    if not isinstance(name, str) or not _GROUP_NAME.fullmatch(name):
        raise InvalidValue(f"group name {name!r} is invalid: expected 1 to 63 characters of [A-Za-z0-9._-] "
                           "starting with a letter or digit")
    return name


class EventStream:
    """Iterator over the daemon's events; subscribed once constructed. Close it
    (or use it as a context manager) to stop watching."""

    def __init__(self, call, socket_path: Path):
        self._call = call
        self._socket_path = socket_path
        first = self._next_raw()  # the daemon's "watch_started": registration done
        if first.kind != "watch_started":
            self._pending = [first]
        else:
            self._pending = []

    def _next_raw(self) -> admin_pb2.Event:
        try:
            return next(self._call)
        except grpc.RpcError as exc:
            raise _translate(exc, self._socket_path) from None

    def __iter__(self) -> Iterator[Event]:
        return self

    def __next__(self) -> Event:
        try:
            raw = self._pending.pop(0) if self._pending else self._next_raw()
        except GsliceError:
            if self._call.code() == grpc.StatusCode.CANCELLED:
                raise StopIteration from None
            raise
        return Event(raw.time, raw.kind, raw.group, raw.client_id, raw.message)

    def close(self) -> None:
        self._call.cancel()

    def __enter__(self) -> "EventStream":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _translate(exc: grpc.RpcError, socket_path: Path) -> GsliceError:
    code, details = exc.code(), exc.details() or ""
    if code == grpc.StatusCode.UNAVAILABLE:
        return DaemonUnavailable(socket_path, details)
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return DaemonUnavailable(socket_path, f"no answer in time: {details}")
    error_type = _STATUS_ERRORS.get(code)
    if error_type is None:
        return DaemonError(f"tokend answered {code.name}: {details}")
    return error_type(details)


class Client:
    """Connection to one tokend's admin socket."""

    def __init__(self, admin_socket: str | os.PathLike | None = None, timeout: float = DEFAULT_TIMEOUT):
        self.socket_path = paths.admin_socket(admin_socket)
        self.timeout = timeout
        self._channel = grpc.insecure_channel(paths.grpc_target(self.socket_path))
        self._stub = admin_pb2_grpc.AdminServiceStub(self._channel)

    # -- plumbing
    def _call(self, method: str, request):
        if not self.socket_path.exists():
            raise DaemonUnavailable(self.socket_path, "no such socket")
        try:
            return getattr(self._stub, method)(request, timeout=self.timeout)
        except grpc.RpcError as exc:
            raise _translate(exc, self.socket_path) from None

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- groups
    def create_group(self, name: str, request, limit=None, memory="4GiB", priority="normal",
                     labels: dict[str, str] | None = None, on_daemon_loss: str | None = None) -> CreatedGroup:
        """Create a group; `limit` defaults to `request`; `labels` say who it is
        for (kept by tokend, shown by the CLI); `on_daemon_loss` ("wait", the
        daemon's default, or "open") is what its processes do while tokend is
        unreachable. Returns the group and its secret."""
        check_group_name(name)
        labels = check_labels(labels)
        request_share = parse_share(request)
        limit_share = request_share if limit is None else parse_share(limit)
        if limit_share < request_share:
            raise InvalidValue(f"limit {limit!r} is below request {request!r}; the limit must be >= the request")
        group = admin_pb2.Group(name=name, request=request_share, limit=limit_share,
                                memory_quota=parse_bytes(memory), priority=int(Priority.parse(priority)),
                                labels=labels)
        if on_daemon_loss is not None:
            group.on_daemon_loss = _loss_policy_number(on_daemon_loss)
        reply = self._call("CreateGroup", admin_pb2.CreateGroupRequest(group=group))
        return CreatedGroup(Group.from_proto(reply.group), reply.secret)

    def update_group(self, name: str, request=None, limit=None, memory=None, priority=None,
                     rotate_secret: bool = False, on_daemon_loss: str | None = None) -> Group:
        """Change the given fields only; returns the group as it is now."""
        check_group_name(name)
        # bool("false") is True: only a real bool may rotate (and detach every process).
        if not isinstance(rotate_secret, bool):
            raise InvalidValue(f"rotate_secret {rotate_secret!r} has type {type(rotate_secret).__name__}; "
                               "expected True or False")
        if all(v is None for v in (request, limit, memory, priority, on_daemon_loss)) and not rotate_secret:
            # The daemon would save the same group and announce a change that is none.
            raise InvalidValue(f"update_group({name!r}) changes nothing: give at least one of request, limit, "
                               "memory, priority, on_daemon_loss, or rotate_secret=True")
        update = admin_pb2.UpdateGroupRequest(name=name, rotate_secret=rotate_secret)
        if request is not None:
            update.request = parse_share(request)
        if limit is not None:
            update.limit = parse_share(limit)
        if memory is not None:
            update.memory_quota = parse_bytes(memory)
        if priority is not None:
            update.priority = int(Priority.parse(priority))
        if on_daemon_loss is not None:
            update.on_daemon_loss = _loss_policy_number(on_daemon_loss)
        if request is not None and limit is not None and update.limit < update.request:
            raise InvalidValue(f"limit {limit!r} is below request {request!r}; the limit must be >= the request")
        return Group.from_proto(self._call("UpdateGroup", update))

    def delete_group(self, name: str) -> None:
        self._call("DeleteGroup", admin_pb2.DeleteGroupRequest(name=check_group_name(name)))

    def list_groups(self) -> list[Group]:
        return [Group.from_proto(g) for g in self._call("ListGroups", admin_pb2.ListGroupsRequest()).groups]

    def get_group(self, name: str) -> Group:
        for group in self.list_groups():
            if group.name == name:
                return group
        raise NotFound(f"no group named {name!r}")

    def group_secret(self, name: str) -> str:
        return self._call("GetGroupSecret", admin_pb2.GetGroupSecretRequest(name=check_group_name(name))).secret

    def remove_client(self, public_id: str, reason: str = "") -> None:
        """Detach one attached client now (named as status shows it)."""
        request = admin_pb2.RemoveClientRequest(public_id=_check_text("client id", public_id),
                                                reason=_check_text("reason", reason))
        self._call("RemoveClient", request)

    # -- observing
    def status(self) -> Status:
        return Status.from_proto(self._call("GetStatus", admin_pb2.GetStatusRequest()))

    def watch(self) -> EventStream:
        """Events as they happen; subscribed when this returns."""
        if not self.socket_path.exists():
            raise DaemonUnavailable(self.socket_path, "no such socket")
        return EventStream(self._stub.Watch(admin_pb2.WatchRequest()), self.socket_path)
