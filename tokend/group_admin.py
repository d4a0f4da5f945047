"""The operator's changes to the group table: groups loaded at start,
created, updated and deleted, and clients removed. A part of Coordinator
(tokend/coordinator.py), which owns the scheduler, ledger and sessions.

Every change is checked, then saved, then applied: a refused change
changes nothing, an acknowledged one is on disk before it takes effect, and
a failed save leaves nothing to undo. AdminService runs one change at a
time, to its end even if its caller goes away, so saves never interleave."""
from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import secrets
import time
from dataclasses import replace

import grpc

from gslice.v1 import admin_pb2, client_pb2, common_pb2

from .limits import printable
from .memory_ledger import RESERVE_WAIT_FOR_RECLAIM
from .rpc_guard import RpcFailure
from .scheduler import GroupSpec, Priority
from .state_store import StoredGroup

log = logging.getLogger("gslice.tokend")

DAEMON_LOSS_WAIT = common_pb2.DAEMON_LOSS_WAIT
_LABEL_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9./_-]{0,62}")
MAX_LABELS = 16
MAX_LABEL_VALUE = 512


def new_group_secret() -> str:
    """192 random bits as hex: never starts with '-' (token_urlsafe can, and
    then `--secret VALUE` on a command line reads as a missing value) and
    needs no quoting in shells or YAML."""
    return secrets.token_hex(24)


class GroupAdmin:
    """Coordinator's group table and the operator's changes to it."""

    def load_groups(self) -> None:
        """Restore the persisted groups (before serving). A stored value this
        daemon cannot enforce as it is (a quota above the GPU's memory after a
        driver or MIG change; a limit below one minimal quantum per window
        after a change of --window or --quantum-min-ms) is fitted and the
        group flagged, not refused: a daemon that will not start leaves every
        process on the GPU waiting, and under Restart=always it never starts."""
        now = time.monotonic()
        stored_groups, self.state_note = self.store.load_or_recover()
        for stored in stored_groups:
            spec, fitted = self._fit_stored_group(stored)
            if fitted:
                self.flags[spec.name] = fitted
                for why in fitted.values():
                    log.warning("group %r: %s", spec.name, why)
            try:
                self._check_spec(spec)
                self._apply(self.scheduler.add_group(spec, now))
            except Exception as exc:
                raise ValueError(f"group {stored.name!r} in {self.store.path} is refused: {exc}") from None
            self.ledger.set_group(spec.name, spec.memory_quota)
            self.secrets[spec.name] = stored.secret
            if stored.labels:
                self.labels[spec.name] = dict(stored.labels)
            self.loss_policy[spec.name] = stored.on_daemon_loss
            self._members[spec.name] = {}
            self._publish_group_metrics(spec)
        self._restore_reclaims()
        self._restore_accounting(now)
        if self.state_note:
            log.warning("%s", self.state_note)
        log.info("loaded %d group(s) from %s", len(self.secrets), self.store.path)

    def _fit_stored_group(self, stored: StoredGroup) -> tuple[GroupSpec, dict[str, str]]:
        """The spec to enforce for a stored group, and why, per field, it
        differs from the stored one (empty when it does not)."""
        spec = GroupSpec(stored.name, stored.request, stored.limit, stored.memory_quota, Priority(stored.priority))
        fitted = {}
        if spec.memory_quota > self.gpu.memory_total:
            fitted["memory_quota"] = (
                f"stored memory_quota {spec.memory_quota} bytes exceeds the GPU's {self.gpu.memory_total} bytes "
                f"(driver or MIG change?); enforcing {self.gpu.memory_total} bytes until an UpdateGroup sets it")
            spec = replace(spec, memory_quota=self.gpu.memory_total)
        min_limit = self.scheduler.min_limit()
        if spec.limit < min_limit:
            fitted["limit"] = (
                f"stored limit {spec.limit:g} is below this daemon's minimum of {min_limit:g} (one "
                f"--quantum-min-ms of {self.scheduler.config.quantum_min * 1e3:g} ms per --window of "
                f"{self.scheduler.config.window:g} s; changed since it was stored?); enforcing {min_limit:g} until an "
                "UpdateGroup sets it")
            spec = replace(spec, limit=min_limit)
        return spec, fitted

    def _check_spec(self, spec: GroupSpec) -> None:
        spec.validate()
        if spec.memory_quota > self.gpu.memory_total:
            raise RpcFailure(grpc.StatusCode.INVALID_ARGUMENT,
                             f"memory_quota {spec.memory_quota} bytes of group {spec.name!r} exceeds the GPU's "
                             f"physical memory of {self.gpu.memory_total} bytes")

    @staticmethod
    def _spec_from_proto(group: admin_pb2.Group) -> GroupSpec:
        priority = group.priority or Priority.NORMAL
        if priority not in Priority._value2member_map_:
            raise RpcFailure(grpc.StatusCode.INVALID_ARGUMENT,
                             f"priority {group.priority} is not one of LOW=1, NORMAL=2, HIGH=3")
        return GroupSpec(group.name, group.request, group.limit, group.memory_quota, Priority(priority))

    def group_proto(self, spec: GroupSpec) -> admin_pb2.Group:
        return admin_pb2.Group(name=spec.name, request=spec.request, limit=spec.limit,
                               memory_quota=spec.memory_quota, priority=int(spec.priority),
                               labels=self.labels.get(spec.name, {}),
                               on_daemon_loss=self.loss_policy.get(spec.name, DAEMON_LOSS_WAIT))

    @staticmethod
    def _check_loss_policy(value: int) -> int:
        value = value or DAEMON_LOSS_WAIT
        if value not in common_pb2.DaemonLossPolicy.values():
            raise RpcFailure(grpc.StatusCode.INVALID_ARGUMENT,
                             f"on_daemon_loss {value} is not one of DAEMON_LOSS_WAIT=1, DAEMON_LOSS_OPEN=2")
        return value

    async def _save_groups(self, specs: dict[str, GroupSpec], secrets_table: dict[str, str],
                           loss_policy: dict[str, int] | None = None, labels: dict[str, dict[str, str]] | None = None,
                           flags: dict[str, dict[str, str]] | None = None) -> None:
        """Write the group table a change leads to (`specs`: every group
        after it), before the change takes effect: an acknowledged change is
        never lost, and a failed save leaves nothing to undo. On a worker
        thread: fsync can take long on a busy disk and must not stall every
        tenant's token grants. AdminService runs one change at a time, to
        its end even if its caller goes away, so saves never interleave.
        The other tables default to the current ones."""
        policy = self.loss_policy if loss_policy is None else loss_policy
        labels = self.labels if labels is None else labels
        flags = self.flags if flags is None else flags
        table = [StoredGroup(name, spec.request, self._kept_on_disk(spec, "limit", flags),
                             self._kept_on_disk(spec, "memory_quota", flags), int(spec.priority),
                             secrets_table[name], labels=dict(labels.get(name, {})),
                             on_daemon_loss=policy.get(name, DAEMON_LOSS_WAIT))
                 for name, spec in specs.items()]
        await asyncio.to_thread(self.store.save, table)

    def _specs(self) -> dict[str, GroupSpec]:
        return {spec.name: spec for spec in self.scheduler.groups()}

    def _kept_on_disk(self, spec: GroupSpec, field_name: str, flags: dict[str, dict[str, str]]):
        """A field fitted at start-up keeps its stored value on disk until the
        operator sets one (a daemon started once with other flags must not
        rewrite what the operator chose)."""
        stored = self.store.stored(spec.name)
        if field_name in flags.get(spec.name, {}) and stored is not None:
            return getattr(stored, field_name)
        return getattr(spec, field_name)

    async def create_group(self, group: admin_pb2.Group) -> admin_pb2.CreateGroupReply:
        spec = self._spec_from_proto(group)
        self._check_spec(spec)
        _check_labels(group.labels)
        loss_policy = self._check_loss_policy(group.on_daemon_loss)
        spec = self.scheduler.check_group(spec)  # what add_group would refuse, nothing changed
        secret = new_group_secret()
        labels = {**self.labels, spec.name: dict(group.labels)} if group.labels else self.labels
        await self._save_groups({**self._specs(), spec.name: spec}, {**self.secrets, spec.name: secret},
                                {**self.loss_policy, spec.name: loss_policy}, labels)
        self._core(self.scheduler.add_group, spec)
        self.secrets[spec.name] = secret
        self.labels = labels
        self.loss_policy[spec.name] = loss_policy
        self._members[spec.name] = {}
        self._attach_rates.pop(spec.name, None)
        self.ledger.set_group(spec.name, spec.memory_quota)
        self._publish_group_metrics(spec)
        self.events.publish("group_created", spec.name, message=_describe(spec))
        return admin_pb2.CreateGroupReply(group=self.group_proto(spec), secret=secret)

    async def update_group(self, request: admin_pb2.UpdateGroupRequest) -> admin_pb2.Group:
        old = self.scheduler.group(request.name)  # NotFound from the core
        changes = {}
        if request.HasField("request"):
            changes["request"] = request.request
        if request.HasField("limit"):
            changes["limit"] = request.limit
        if request.HasField("memory_quota"):
            changes["memory_quota"] = request.memory_quota
        if request.HasField("priority"):
            changes["priority"] = request.priority or Priority.NORMAL
        if "priority" in changes and changes["priority"] not in Priority._value2member_map_:
            raise RpcFailure(grpc.StatusCode.INVALID_ARGUMENT,
                             f"priority {changes['priority']} is not one of LOW=1, NORMAL=2, HIGH=3")
        if "priority" in changes:
            changes["priority"] = Priority(changes["priority"])
        if not changes and not request.HasField("on_daemon_loss") and not request.rotate_secret:
            raise RpcFailure(grpc.StatusCode.INVALID_ARGUMENT,
                             f"update of group {request.name!r} sets nothing: expected at least one of request, "
                             "limit, memory_quota, priority, on_daemon_loss, rotate_secret")
        new = replace(old, **changes)
        self._check_spec(new)
        new_policy = dict(self.loss_policy)
        if request.HasField("on_daemon_loss"):
            new_policy[new.name] = self._check_loss_policy(request.on_daemon_loss)
        new = self.scheduler.check_group(new, replacing=new.name)  # refused -> nothing changed
        new_secrets = dict(self.secrets)
        if request.rotate_secret:
            new_secrets[new.name] = new_group_secret()
        new_flags = dict(self.flags)
        if new.name in new_flags:
            # A field the operator has now set is theirs, and fits (checked above).
            kept = {f: why for f, why in new_flags[new.name].items() if f not in changes}
            if kept:
                new_flags[new.name] = kept
            else:
                del new_flags[new.name]
        await self._save_groups({**self._specs(), new.name: new}, new_secrets, new_policy, flags=new_flags)
        self._core(self.scheduler.update_group, new)
        self.flags = new_flags
        self.secrets = new_secrets
        self.loss_policy = new_policy
        if request.rotate_secret:
            # Sessions attached with the old secret end now: whoever had it
            # (the reason to rotate) must not keep a session it opened.
            for client_id in list(self._members.get(new.name, {})):
                self.detach(client_id, "group secret rotated; attach again with the new secret")
        if new.memory_quota != old.memory_quota:
            self.ledger.set_group(new.name, new.memory_quota)
            for session in self._members.get(new.name, {}).values():
                self._send_control(session, client_pb2.ControlEvent(
                    quota_changed=client_pb2.QuotaChanged(memory_quota=new.memory_quota)))
            self.events.publish("quota_changed", new.name,
                                message=f"memory quota {old.memory_quota} -> {new.memory_quota} bytes")
        self._publish_group_metrics(new)
        self.events.publish("group_updated", new.name, message=_describe(new) +
                            ("; secret rotated" if request.rotate_secret else ""))
        return self.group_proto(new)

    def _refuse_delete_while_attached(self, name: str) -> None:
        attached = [s.public_id for s in self._members.get(name, {}).values()]
        if attached:
            raise RpcFailure(grpc.StatusCode.FAILED_PRECONDITION,
                             f"group {name!r} still has {len(attached)} attached client(s) "
                             f"({', '.join(attached[:5])}{', ...' if len(attached) > 5 else ''}); stop them first")

    async def delete_group(self, name: str) -> None:
        self.scheduler.group(name)  # NotFound from the core
        self._refuse_delete_while_attached(name)
        # Memory its departed processes left stays its own until the driver
        # frees it (another group must not be given it early): wait a moment.
        deadline = time.monotonic() + RESERVE_WAIT_FOR_RECLAIM
        while self.ledger.group_pending(name) and time.monotonic() < deadline:
            waiter = self._reclaimed_in.get(name)
            if waiter is None or waiter.done():
                waiter = self._reclaimed_in[name] = asyncio.get_running_loop().create_future()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(waiter), deadline - time.monotonic())
        if self.ledger.group_pending(name):
            self.ledger.remove_group(name)  # FailedPrecondition: says what is pending
        self._refuse_delete_while_attached(name)  # a client may have attached during the wait
        remaining = {k: v for k, v in self.secrets.items() if k != name}
        self._closing.add(name)  # no attach while the table without it is written (see _check_attach)
        try:
            await self._save_groups({k: v for k, v in self._specs().items() if k != name}, remaining)
        finally:
            self._closing.discard(name)
        self._core(self.scheduler.remove_group, name)
        self.secrets = remaining
        self.labels.pop(name, None)
        self.loss_policy.pop(name, None)
        self.flags.pop(name, None)
        self._members.pop(name, None)
        self._attach_rates.pop(name, None)
        self.ledger.remove_group(name)
        if self.doorbell is not None:
            self.doorbell.forget(name)
        self.metrics.forget_group(name)
        self.events.publish("group_deleted", name)

    def group_secret(self, name: str) -> str:
        secret = self.secrets.get(name)
        if secret is None:
            raise RpcFailure(grpc.StatusCode.NOT_FOUND, f"no group named {name!r}")
        return secret

    def remove_client(self, public_id: str, reason: str) -> None:
        """The operator detaches one client (named as status shows it)."""
        session = self._by_public_id.get(public_id)
        if session is None:
            raise RpcFailure(grpc.StatusCode.NOT_FOUND, f"no attached client {public_id[:64]!r}; "
                             "`gslice status` lists the attached clients")
        self.detach(session.client_id, f"removed by the operator: {printable(reason, 200) or 'no reason given'}")

    def list_groups(self) -> list[admin_pb2.Group]:
        return [self.group_proto(spec) for spec in sorted(self.scheduler.groups(), key=lambda s: s.name)]


def _check_labels(labels) -> None:
    if len(labels) > MAX_LABELS:
        raise RpcFailure(grpc.StatusCode.INVALID_ARGUMENT, f"{len(labels)} labels given; at most {MAX_LABELS}")
    for key, value in labels.items():
        if not _LABEL_KEY.fullmatch(key):
            raise RpcFailure(grpc.StatusCode.INVALID_ARGUMENT,
                             f"label key {key!r} is invalid: expected 1 to 63 characters of [A-Za-z0-9./_-]")
        if len(value) > MAX_LABEL_VALUE or not value.isprintable():
            raise RpcFailure(grpc.StatusCode.INVALID_ARGUMENT,
                             f"label {key!r} value {value[:40]!r} is invalid: expected at most {MAX_LABEL_VALUE} "
                             "printable characters")


def _describe(spec: GroupSpec) -> str:
    return (f"request {spec.request:g}, limit {spec.limit:g}, memory {spec.memory_quota} bytes, "
            f"priority {spec.priority.name.lower()}")