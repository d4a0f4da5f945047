"""Runs the sans-I/O core (scheduler + memory ledger) on the daemon's asyncio
loop and keeps everything the core does not: client sessions, the futures
AcquireToken waits on, Control stream queues, the wake-up timer, the
persisted group table, events and metrics.

Every core call happens on the loop thread, so the core needs no locks and
each ledger operation is atomic across all client processes. Every list of
decisions the core returns goes through `_apply`, and after every core call
the single wake-up timer is re-armed at `scheduler.next_wakeup()`."""
from __future__ import annotations

import asyncio
import contextlib
import hmac
import itertools
import logging
import os
import re
import secrets
import time
from dataclasses import dataclass, field, replace

import grpc

from gslice.v1 import admin_pb2, client_pb2, common_pb2

from .errors import GsliceError
from .events import EventHub
from .gpu_discovery import GpuInfo
from .limits import (MAX_GPU_UUID_BYTES, MAX_GROUP_BYTES, MAX_SECRET_BYTES, AttachRateLimiter, Limits,
                     check_field_length, clamp_u64, printable)
from .memory_ledger import DEFAULT_RECLAIM_TIMEOUT, MemoryLedger, PendingReclaim, Reclaimed
from .metrics import TokendMetrics
from .preempt_doorbell import PreemptDoorbell
from .process_watch import Bypass, GpuProcessUse, find_bypass, kill
from .rpc_guard import RpcFailure
from .scheduler import Expire, Grant, GroupAccounting, GroupSpec, Priority, Revoke, Scheduler, SchedulerConfig
from .state_store import AccountingStore, GroupStore, ReclaimStore, StoredGroup

log = logging.getLogger("gslice.tokend")

PROTOCOL_VERSION = 1
DEFAULT_ACQUIRE_TIMEOUT = 30.0
# A client that attached but never opened its Control stream is detached
# after this long: without the stream its death would go unnoticed.
DEFAULT_CONTROL_OPEN_TIMEOUT = 10.0
_DETACHED = object()  # Control queue sentinel: the client is gone, end the stream
# Compared against when the group is unknown, so "no such group" and "wrong
# secret" take the same path and give the same answer.
_NO_SECRET = secrets.token_hex(24)
ATTACH_REFUSED = "attach refused: unknown group or wrong secret"
DAEMON_LOSS_WAIT = common_pb2.DAEMON_LOSS_WAIT


def new_group_secret() -> str:
    """192 random bits as hex: never starts with '-' (token_urlsafe can, and
    then `--secret VALUE` on a command line reads as a missing value) and
    needs no quoting in shells or YAML."""
    return secrets.token_hex(24)


# A grant that follows a preemption's Revoke waits until the Revoke has been
# handed to the preempted client's Control stream (so the holder hears of it
# no later than the waiter starts launching), but never longer than this.
GRANT_AFTER_REVOKE_MAX_WAIT = 0.002

# A reservation that fits once its group's pending reclaims (memory of
# departed processes the driver has not freed yet) are back waits for them
# this long at most, then is refused. Below the shim's 5 s ReserveMemory
# deadline (hook/memory_ledger.c RESERVE_WAIT_MS); above the default
# reclaim timeout, so a reclaim NVML cannot follow ends within the wait.
RESERVE_WAIT_FOR_RECLAIM = 3.0


@dataclass
class ControlWrite:
    """What the Control stream sends: an event, with what to run once it is
    on its way to the client (a grant waiting for this Revoke)."""
    event: client_pb2.ControlEvent
    after_send: list = field(default_factory=list)


@dataclass
class ClientSession:
    client_id: str      # the bearer credential: only ever sent back to its own client
    public_id: str      # what status, events, logs and reasons show
    group: str
    pid: int
    process_name: str
    attached_at: float  # wall clock, for display
    doorbell_client: int = 0  # its number on the doorbell page (AttachReply.doorbell_client)
    control_queue: asyncio.Queue = field(default_factory=asyncio.Queue)
    control_open: bool = False
    pending_grant: asyncio.Future | None = None
    requested_at: float = 0.0  # monotonic, for the wait histogram
    doorbell_rang: bool = False  # its pending AcquireToken rang the preemption doorbell



def _grant_reply(grant: Grant) -> client_pb2.AcquireTokenReply:
    return client_pb2.AcquireTokenReply(token_id=grant.token_id, quantum_us=max(1, round(grant.quantum * 1e6)))


async def settled(started):
    """What a *_start method returned (its reply, or a coroutine that waits
    for one), as a reply."""
    return await started if asyncio.iscoroutine(started) else started

class Coordinator:
    def __init__(self, gpu: GpuInfo, config: SchedulerConfig, store: GroupStore, metrics: TokendMetrics,
                 control_open_timeout: float = DEFAULT_CONTROL_OPEN_TIMEOUT, limits: Limits | None = None,
                 reclaim_timeout: float = DEFAULT_RECLAIM_TIMEOUT):
        config.validate()
        self.limits = (limits or Limits()).validate()
        self.gpu = gpu
        self.config = config
        self.store = store
        self.metrics = metrics
        self.events = EventHub(on_drop=metrics.events_dropped.inc)
        self.scheduler = Scheduler(config)
        self.ledger = MemoryLedger(reclaim_timeout)
        self.reclaim_store = ReclaimStore(store.state_dir)
        self._reclaim_generations = itertools.count(1)  # orders the tables saved (ReclaimStore.save)
        self.accounting_store = AccountingStore(store.state_dir)
        self._accounting_generations = itertools.count(1)
        self._accounting_saved_at: tuple[int, float] | None = None  # (decisions, charges) at the last save
        self._reclaims_dirty = False
        self._reclaims_saving = False
        self.reclaims_changed = asyncio.Event()  # the daemon's reclaim watch wakes up on it
        self._reclaimed_in: dict[str, asyncio.Future] = {}  # group -> done when a reclaim of it ends
        self.control_open_timeout = control_open_timeout
        self.sessions: dict[str, ClientSession] = {}
        self._by_public_id: dict[str, ClientSession] = {}
        self._members: dict[str, dict[str, ClientSession]] = {}  # group -> client_id -> session
        self._attach_rates: dict[str, AttachRateLimiter] = {}     # per group: a tenant cannot use up another's
        self._next_public = 1
        self.secrets: dict[str, str] = {}
        self.labels: dict[str, dict[str, str]] = {}  # group -> labels (not the core's business)
        self.gpu_index = gpu.index
        self.client_socket = ""  # set by the daemon: reported in status for node agents
        self.loss_policy: dict[str, int] = {}  # group -> DaemonLossPolicy
        # group -> {field: why}: stored values this daemon cannot enforce as
        # they are (see load_groups); the file keeps them until an UpdateGroup.
        self.flags: dict[str, dict[str, str]] = {}
        self._closing: set[str] = set()  # groups being deleted: their table is being written without them
        self.state_note = ""
        self.unmanaged_processes: list[admin_pb2.GpuProcess] = []  # kept by the process watch
        self._reported_bypass: set[tuple[int, str]] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_when: float | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.doorbell: PreemptDoorbell | None = None  # set by the daemon (tests run without)
        self.calls_socket = False  # the daemon serves client.calls (AttachReply.calls_socket)
        metrics.gpu_info.labels(gpu.uuid, gpu.name).set(1)

    # ----------------------------------------------------------------- core
    def bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop all core calls run on; its clock must be time.monotonic."""
        self._loop = loop

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

    def _core(self, method, *args, **kwargs) -> None:
        """Call a scheduler method with the current time and apply its decisions."""
        decisions = method(*args, time.monotonic(), **kwargs)
        self._apply(decisions)

    def _apply(self, decisions) -> None:
        """The one place scheduler decisions take effect."""
        revoke_write = None
        for decision in decisions:
            if isinstance(decision, Grant):
                if revoke_write is not None and not decision.renewed and not self._rang(decision.client_id):
                    self._grant_after_revoke_sent(decision, revoke_write)
                else:
                    self._on_grant(decision)
            elif isinstance(decision, Revoke):
                revoke_write = self._on_revoke(decision)
            elif isinstance(decision, Expire):
                self._on_expire(decision)
            else:
                log.error("scheduler returned an unknown decision %r; ignored", decision)
                continue
            self.metrics.labelled(self.metrics.decisions, type(decision).__name__.lower()).inc()
        self._arm_timer()
        self._publish_preemptors()

    def _publish_preemptors(self) -> None:
        """Tell the shims, through the doorbell page, who holds the token and
        which groups would preempt it (after every scheduler event)."""
        if self.doorbell is None:
            return
        holder = self.scheduler.holder()
        holder_group = self.scheduler.client_group(holder[0]) if holder is not None else None
        now = time.monotonic()
        preemptors = self.scheduler.preemptors(now)
        next_waiter = self.scheduler.next_on_release(now)
        next_session = self.sessions.get(next_waiter) if next_waiter is not None else None
        self.doorbell.publish(holder_group, preemptors, others_waiting=self.scheduler.others_waiting(),
                              expected=self.scheduler.expected_preemption(now, preemptors),
                              holder_outranks=self.scheduler.holder_outranks_waiters(now),
                              holder_alone=self.scheduler.holder_alone(),
                              next_group=self.scheduler.client_group(next_waiter) if next_waiter is not None else None,
                              next_client=next_session.doorbell_client if next_session is not None else 0)

    def _rang(self, client_id: str) -> bool:
        """Its request rang the doorbell: the holder stopped already (the
        grant need not wait for the Revoke to be sent)."""
        session = self.sessions.get(client_id)
        return session is not None and session.doorbell_rang

    def _on_grant(self, grant: Grant) -> None:
        if grant.renewed:
            return  # the answer to the holder's own RenewToken (see renew_token)
        session = self.sessions.get(grant.client_id)
        waiter = session.pending_grant if session else None
        if waiter is None or waiter.done():
            # Nobody is waiting for it any more: hand it straight back.
            log.warning("grant of token %d to %s that no AcquireToken waits for; releasing it",
                        grant.token_id, session.public_id if session else "a detached client")
            if session is not None:
                # Not idle: the client never saw this slice, its quantum must not shrink.
                self._core(self.scheduler.release, grant.client_id, grant.token_id, 0.0)
            return
        waiter.set_result(grant)
        self.metrics.labelled(self.metrics.tokens_granted, session.group).inc()
        self.metrics.labelled(self.metrics.token_wait, session.group).observe(max(0.0, time.monotonic() - session.requested_at))

    def _grant_after_revoke_sent(self, grant: Grant, revoke_write: ControlWrite) -> None:
        """A preemption hands the token over at once: deliver the grant when
        the preempted holder's Revoke is on its way (or after a short
        bound), so the two tenants' launches overlap as little as possible."""
        delivered = False

        def deliver() -> None:  # whichever comes first: the send, or the bound
            nonlocal delivered
            if not delivered:
                delivered = True
                self._on_grant(grant)
        revoke_write.after_send.append(deliver)
        if self._loop is not None:
            self._loop.call_later(GRANT_AFTER_REVOKE_MAX_WAIT, deliver)
        else:
            deliver()

    def _on_revoke(self, revoke: Revoke) -> ControlWrite | None:
        session = self.sessions.get(revoke.client_id)
        if session is None:
            return None
        write = ControlWrite(client_pb2.ControlEvent(
            revoke=client_pb2.Revoke(token_id=revoke.token_id, reason=revoke.reason,
                                     lease_reclaim=revoke.lease_reclaim)))
        session.control_queue.put_nowait(write)
        self.metrics.preemptions.labels(session.group).inc()
        self.events.publish("preempted", session.group, session.public_id,
                            f"token {revoke.token_id} revoked: {revoke.reason}")
        return write

    def _on_expire(self, expire: Expire) -> None:
        session = self.sessions.get(expire.client_id)
        if session is None:
            return
        session.control_queue.put_nowait(ControlWrite(client_pb2.ControlEvent(
            revoke=client_pb2.Revoke(token_id=expire.token_id, reason="expired"))))
        self.metrics.expiries.labels(session.group).inc()
        if expire.after_revoke:
            detail = (f"token {expire.token_id} still not released {self.scheduler.config.grace * 1e3:.0f} ms "
                      f"after it was revoked at a preemption (the client may go on submitting); "
                      f"charged {expire.charged * 1e3:.1f} ms more")
        else:
            detail = (f"token {expire.token_id} not released within quantum + grace; "
                      f"charged {expire.charged * 1e3:.1f} ms")
        self.events.publish("token_expired", session.group, session.public_id, detail)

    def _arm_timer(self) -> None:
        if self._loop is None:
            return
        when = self.scheduler.next_wakeup()
        if self._timer is not None and (when is None or self._timer_when <= when):
            # A timer that fires no later is kept: advance() at an earlier
            # time decides nothing and arms the next (next_wakeup's
            # contract). Re-arming at every grant and release was a timer
            # handle made and cancelled per call on the hot path.
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_when = when
        if when is not None:
            self._timer = self._loop.call_at(when, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_when = None
        try:
            self._core(self.scheduler.advance)
        except Exception:
            log.exception("scheduler advance failed")
            self._arm_timer()

    # -------------------------------------------------------------- clients
    def session(self, client_id: str) -> ClientSession:
        session = self.sessions.get(client_id)
        if session is None:
            raise RpcFailure(grpc.StatusCode.NOT_FOUND,
                             f"unknown client_id {client_id[:64]!r}: not attached (or detached, or tokend restarted); "
                             "call Attach again")
        return session

    def _check_attach(self, request: client_pb2.AttachRequest) -> None:
        """Everything an Attach must pass before it changes any state."""
        if request.protocol_version not in (0, PROTOCOL_VERSION):
            raise RpcFailure(grpc.StatusCode.FAILED_PRECONDITION,
                             f"protocol_version {request.protocol_version} is not supported; "
                             f"this tokend speaks {PROTOCOL_VERSION}")
        check_field_length("group", request.group, MAX_GROUP_BYTES)
        check_field_length("secret", request.secret, MAX_SECRET_BYTES)
        check_field_length("gpu_uuid", request.gpu_uuid, MAX_GPU_UUID_BYTES)
        # One answer, one code path and one comparison for an unknown group
        # and a wrong secret: neither the message nor the timing tells which.
        secret = self.secrets.get(request.group) if request.group not in self._closing else None
        matches = hmac.compare_digest((secret or _NO_SECRET).encode(), request.secret.encode())
        if secret is None or not matches:
            raise RpcFailure(grpc.StatusCode.UNAUTHENTICATED, ATTACH_REFUSED)
        if request.gpu_uuid and request.gpu_uuid != self.gpu.uuid:
            raise RpcFailure(grpc.StatusCode.FAILED_PRECONDITION,
                             f"client asked for GPU {request.gpu_uuid!r} but this tokend serves {self.gpu.uuid!r}")
        if request.reserved_bytes > self.gpu.memory_total:
            raise RpcFailure(grpc.StatusCode.INVALID_ARGUMENT,
                             f"reserved_bytes {request.reserved_bytes} exceeds the GPU's physical memory of "
                             f"{self.gpu.memory_total} bytes; a process cannot hold more")
        limits = self.limits
        if len(self.sessions) >= limits.max_clients:
            raise RpcFailure(grpc.StatusCode.RESOURCE_EXHAUSTED,
                             f"{len(self.sessions)} clients attached; tokend's limit is {limits.max_clients} "
                             "(--max-clients)")
        members = self._members[request.group]
        if len(members) >= limits.max_clients_per_group:
            raise RpcFailure(grpc.StatusCode.RESOURCE_EXHAUSTED,
                             f"group {request.group!r} has {len(members)} clients attached; the limit per group is "
                             f"{limits.max_clients_per_group} (--max-clients-per-group)")
        rate = self._attach_rates.get(request.group)
        if rate is None:
            rate = self._attach_rates[request.group] = AttachRateLimiter(
                limits.attach_rate, limits.attach_burst, time.monotonic())
        rate.take(time.monotonic())

    def attach(self, request: client_pb2.AttachRequest) -> client_pb2.AttachReply:
        self._check_attach(request)
        client_id = secrets.token_hex(16)
        self._core(self.scheduler.attach, client_id, request.group)
        try:
            superseded = self.ledger.attach(client_id, request.group, declared=request.reserved_bytes,
                                            pid=request.pid, now=time.monotonic())
        except BaseException:
            self._core(self.scheduler.detach, client_id)
            raise
        self._on_reclaimed(superseded)
        public_id = f"c{self._next_public}"
        doorbell_client = self._next_public % 2**32 or 1  # a u32 on the page, never 0 ("any waiter")
        self._next_public += 1
        process_name = printable(request.process_name)
        session = ClientSession(client_id, public_id, request.group, request.pid, process_name, time.time(),
                                doorbell_client)
        self.sessions[client_id] = session
        self._by_public_id[public_id] = session
        self._members[request.group][client_id] = session
        if self._loop is not None:
            self._loop.call_later(self.control_open_timeout, self._drop_if_no_control, client_id)
        spec = self.scheduler.group(request.group)
        used = self.ledger.group_used(request.group)
        self._publish_memory(request.group)
        self._publish_clients(request.group)
        self.events.publish("client_attached", request.group, public_id,
                            f"pid {request.pid} ({process_name or '?'}) declared "
                            f"{request.reserved_bytes} bytes held")
        return client_pb2.AttachReply(
            client_id=client_id, public_id=public_id, group=request.group, gpu_uuid=self.gpu.uuid,
            memory_quota=spec.memory_quota, memory_used=clamp_u64(used), physical_memory=self.gpu.memory_total,
            quantum_min_us=round(self.config.quantum_min * 1e6), quantum_max_us=round(self.config.quantum_max * 1e6),
            grace_us=round(self.config.grace * 1e6), priority=int(spec.priority),
            on_daemon_loss=self.loss_policy.get(request.group, DAEMON_LOSS_WAIT),
            doorbell_slot=self.doorbell.slot(request.group) if self.doorbell is not None else 0,
            doorbell_client=doorbell_client if self.doorbell is not None else 0,
            lease_at_start=self.config.lease_at_start, calls_socket=self.calls_socket)

    def _drop_if_no_control(self, client_id: str) -> None:
        session = self.sessions.get(client_id)
        if session is not None and not session.control_open:
            self.detach(client_id, f"no Control stream opened within {self.control_open_timeout:g} s of Attach")

    def detach(self, client_id: str, reason: str, hold_memory: bool = True) -> bool:
        """Forget a client at once: its token and its waits. Its memory stays
        charged to its group until the driver has freed it (a pending reclaim,
        tokend/memory_ledger.py), unless hold_memory is False (the process
        keeps it and will re-declare it: tokend stopping). Idempotent."""
        session = self.sessions.pop(client_id, None)
        if session is None:
            return False
        self._by_public_id.pop(session.public_id, None)
        self._members.get(session.group, {}).pop(client_id, None)
        try:
            self._core(self.scheduler.detach, client_id)
        finally:
            if hold_memory:
                pending = self.ledger.detach_held(client_id, session.public_id, time.monotonic(), time.time())
                held, freed = (pending.nbytes if pending else 0), 0
            else:
                held, freed = 0, self.ledger.detach(client_id)
            if held:
                self._reclaims_changed()
                self._on_reclaimed(self.ledger.expire(time.monotonic()))  # --reclaim-timeout-ms 0: at once
            if session.pending_grant is not None and not session.pending_grant.done():
                session.pending_grant.set_exception(RpcFailure(
                    grpc.StatusCode.ABORTED, f"client {session.public_id} was detached while waiting: {reason}"))
            session.control_queue.put_nowait(_DETACHED)
            self._publish_memory(session.group)
            self._publish_clients(session.group)
            memory = (f"its {held} bytes held until the driver frees them" if held else f"freed {freed} bytes")
            self.events.publish("client_detached", session.group, session.public_id, f"{reason}; {memory}")
            log.info("client %s (group %s, pid %d) detached: %s; %s",
                     session.public_id, session.group, session.pid, reason, memory)
        return True

    async def acquire(self, client_id: str, timeout_ms: int, work_item_us: int = 0,
                      doorbell_rang: bool = False) -> client_pb2.AcquireTokenReply:
        return await settled(self.acquire_start(client_id, timeout_ms, work_item_us, doorbell_rang))

    def acquire_start(self, client_id: str, timeout_ms: int, work_item_us: int = 0, doorbell_rang: bool = False):
        """An AcquireToken up to its first wait, synchronously: the reply
        when the scheduler grants it inside the request (uncontended, the
        common case: answered with no task or timer), else a coroutine that
        waits for the grant, to be awaited (or wrapped in a task) at once:
        it alone withdraws the request if the wait ends without a grant."""
        session = self.session(client_id)
        waiter = self._begin_wait(session, doorbell_rang)
        try:
            self._core(self.scheduler.request, client_id, work_item=work_item_us / 1e6 if work_item_us else None)
        except BaseException:
            self._end_acquire(client_id, session, waiter, granted=False)
            raise
        if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
            self._end_acquire(client_id, session, waiter, granted=True)
            return _grant_reply(waiter.result())
        return self._acquire_wait(client_id, session, waiter, timeout_ms)

    async def _acquire_wait(self, client_id: str, session: ClientSession, waiter: asyncio.Future,
                            timeout_ms: int) -> client_pb2.AcquireTokenReply:
        timeout = timeout_ms / 1000.0 if timeout_ms else DEFAULT_ACQUIRE_TIMEOUT
        granted = False
        try:
            try:
                grant = await asyncio.wait_for(asyncio.shield(waiter), timeout)
            except asyncio.TimeoutError:
                raise RpcFailure(grpc.StatusCode.DEADLINE_EXCEEDED,
                                 f"no token for client {session.public_id} within {timeout_ms or timeout * 1000:.0f} ms") from None
            granted = True
            return _grant_reply(grant)
        finally:
            self._end_acquire(client_id, session, waiter, granted)

    def _end_acquire(self, client_id: str, session: ClientSession, waiter: asyncio.Future, granted: bool) -> None:
        if session.pending_grant is waiter:
            session.pending_grant = None
        if not granted and self.sessions.get(client_id) is session:
            self._abandon_wait(client_id, waiter)

    def lease_if_free(self, client_id: str) -> client_pb2.AcquireTokenReply:
        """A starting client's AcquireToken(lease_if_free): the token as a
        lease if it is free (Scheduler.lease_if_free), else token_id 0 at once."""
        session = self.session(client_id)
        waiter = self._begin_wait(session, doorbell_rang=False)
        try:
            self._core(self.scheduler.lease_if_free, client_id)
        finally:
            session.pending_grant = None
        if not waiter.done():
            return client_pb2.AcquireTokenReply(token_id=0, quantum_us=0)
        return _grant_reply(waiter.result())

    @staticmethod
    def _begin_wait(session: ClientSession, doorbell_rang: bool) -> asyncio.Future:
        """The future a Grant for this session's AcquireToken completes (one at a time)."""
        if session.pending_grant is not None:
            raise RpcFailure(grpc.StatusCode.FAILED_PRECONDITION,
                             f"client {session.public_id} already has an AcquireToken waiting; one at a time")
        waiter = asyncio.get_running_loop().create_future()
        session.pending_grant = waiter
        session.requested_at = time.monotonic()
        session.doorbell_rang = doorbell_rang
        return waiter

    def _abandon_wait(self, client_id: str, waiter: asyncio.Future) -> None:
        """The AcquireToken ended without telling the client about a grant (timeout,
        cancelled RPC): withdraw the request, or return a token granted in between."""
        if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
            grant = waiter.result()
            self._core(self.scheduler.release, client_id, grant.token_id, 0.0)  # unseen slice: quantum kept
            return
        waiter.cancel()
        try:
            self._core(self.scheduler.cancel, client_id)
        except Exception as exc:  # e.g. the core never queued it because request() raised
            log.debug("cancel of %s's wait: %s", self.sessions[client_id].public_id, exc)

    def release_token(self, request: client_pb2.ReleaseTokenRequest) -> client_pb2.ReleaseTokenReply:
        self.session(request.client_id)
        self._core(self.scheduler.release, request.client_id, request.token_id, request.used_us / 1e6,
                   idle=request.idle, keep_lease=request.keep_lease)
        return client_pb2.ReleaseTokenReply(
            lease_kept=request.keep_lease and self.scheduler.holds_lease(request.client_id, request.token_id))

    def renew_token(self, request: client_pb2.RenewTokenRequest) -> client_pb2.RenewTokenReply:
        session = self.session(request.client_id)
        work_item = request.work_item_us / 1e6 if request.work_item_us else None
        decisions = self.scheduler.renew(request.client_id, request.token_id, request.used_us / 1e6,
                                         time.monotonic(), work_item=work_item)
        self._apply(decisions)
        for decision in decisions:
            if isinstance(decision, Grant) and decision.renewed:
                self.metrics.labelled(self.metrics.tokens_granted, session.group).inc()
                return client_pb2.RenewTokenReply(renewed=True, token_id=decision.token_id,
                                                  quantum_us=max(1, round(decision.quantum * 1e6)))
        return client_pb2.RenewTokenReply(renewed=False)

    async def reserve_memory(self, client_id: str, size: int) -> client_pb2.ReserveMemoryReply:
        return await settled(self.reserve_memory_start(client_id, size))

    def reserve_memory_start(self, client_id: str, size: int):
        """A ReserveMemory, synchronously when it is decided at once (the
        common case): its reply; else a coroutine to await. A reservation
        that fits once the group's pending reclaims are back waits for them
        (RESERVE_WAIT_FOR_RECLAIM at most): right after a process of the
        group was killed, its successor's allocations wait a moment instead
        of failing."""
        session = self.session(client_id)
        if size == 0:
            raise RpcFailure(grpc.StatusCode.INVALID_ARGUMENT, "ReserveMemory of 0 bytes; ask for at least 1 byte")
        reservation = self.ledger.reserve(client_id, size, can_wait=True)
        if reservation.wait:
            return self._reserve_wait(session, size)
        return self._reserve_reply(session, size, reservation)

    async def _reserve_wait(self, session: ClientSession, size: int) -> client_pb2.ReserveMemoryReply:
        return self._reserve_reply(session, size, await self._reserve_after_reclaims(session, size))

    def _reserve_reply(self, session: ClientSession, size: int, reservation) -> client_pb2.ReserveMemoryReply:
        if not reservation.granted:
            pending = self.ledger.group_pending(session.group)
            self.metrics.memory_refused.labels(session.group).inc()
            self.events.publish("memory_refused", session.group, session.public_id,
                                f"asked {size} bytes; group uses {reservation.used} of {reservation.quota}"
                                + (f", of which {pending} bytes of departed processes the driver has not freed "
                                   f"yet (waited {RESERVE_WAIT_FOR_RECLAIM:g} s)" if pending else ""))
        self._publish_memory(session.group)
        return client_pb2.ReserveMemoryReply(granted=reservation.granted, used=clamp_u64(reservation.used),
                                             quota=reservation.quota)

    async def _reserve_after_reclaims(self, session: ClientSession, size: int):
        deadline = time.monotonic() + RESERVE_WAIT_FOR_RECLAIM
        while True:
            left = deadline - time.monotonic()
            can_wait = left > 0
            if can_wait:
                waiter = self._reclaimed_in.get(session.group)
                if waiter is None or waiter.done():
                    waiter = self._reclaimed_in[session.group] = asyncio.get_running_loop().create_future()
                try:
                    await asyncio.wait_for(asyncio.shield(waiter), left)
                except asyncio.TimeoutError:
                    can_wait = False
            reservation = self.ledger.reserve(session.client_id, size, can_wait=can_wait)  # NotFound once detached
            if not reservation.wait:
                return reservation

    def release_memory(self, client_id: str, size: int) -> client_pb2.ReleaseMemoryReply:
        session = self.session(client_id)
        if size == 0:
            raise RpcFailure(grpc.StatusCode.INVALID_ARGUMENT, "ReleaseMemory of 0 bytes; release at least 1 byte")
        reservation = self.ledger.release(client_id, size)
        self._publish_memory(session.group)
        return client_pb2.ReleaseMemoryReply(used=clamp_u64(reservation.used), quota=reservation.quota)

    def memory_info(self, client_id: str) -> client_pb2.GetMemoryInfoReply:
        session = self.session(client_id)
        pids = sorted({member.pid for member in self._members.get(session.group, {}).values()})
        return client_pb2.GetMemoryInfoReply(quota=self.ledger.group_quota(session.group),
                                             used=clamp_u64(self.ledger.group_used(session.group)),
                                             physical_total=self.gpu.memory_total, group_pids=pids)

    def open_control(self, client_id: str) -> ClientSession:
        session = self.session(client_id)
        if session.control_open:
            raise RpcFailure(grpc.StatusCode.FAILED_PRECONDITION,
                             f"client {session.public_id} already has a Control stream open; one per client")
        session.control_open = True
        return session

    @staticmethod
    def is_end_of_stream(item) -> bool:
        return item is _DETACHED

    # --------------------------------------------------------------- groups
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
                session.control_queue.put_nowait(ControlWrite(client_pb2.ControlEvent(
                    quota_changed=client_pb2.QuotaChanged(memory_quota=new.memory_quota))))
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

    # --------------------------------------------------------------- status
    def status(self) -> admin_pb2.GpuStatus:
        now = time.monotonic()
        holder = self.scheduler.holder()
        waiting = list(self.scheduler.waiting())
        waiting_set = set(waiting)
        reply = admin_pb2.GpuStatus(
            gpu_uuid=self.gpu.uuid, gpu_name=self.gpu.name, physical_memory=self.gpu.memory_total,
            window_seconds=self.config.window, now=time.time(),
            waiting_client_ids=[self.sessions[c].public_id for c in waiting if c in self.sessions],
            decisions=self.scheduler.decisions, gpu_index=self.gpu_index, client_socket=self.client_socket,
            state_note=self.state_note)
        reply.unmanaged_processes.extend(self.unmanaged_processes)
        if holder is not None:
            holder_session = self.sessions.get(holder[0])
            reply.token_id = holder[1]
            reply.holder_client_id = holder_session.public_id if holder_session else ""
            reply.holder_group = holder_session.group if holder_session else ""
        busy = 0.0
        for spec in sorted(self.scheduler.groups(), key=lambda s: s.name):
            share = self.scheduler.share(spec.name, now)
            busy += share
            members = self._members.get(spec.name, {}).values()
            over = self.ledger.over_quota(spec.name)
            used = self.ledger.group_used(spec.name)
            notes = []
            if over:
                notes.append(f"quota lowered below use ({used} > {spec.memory_quota} bytes): new reservations "
                             f"refused until use falls under {spec.memory_quota} bytes")
            notes.extend(self.flags.get(spec.name, {}).values())
            notes.extend(self._reclaim_notes(spec.name, now))
            note = "; ".join(notes)
            reply.groups.append(admin_pb2.GroupStatus(
                group=self.group_proto(spec), share=share, memory_used=clamp_u64(used), over_quota=over,
                flagged=spec.name in self.flags,
                clients=len(members), waiting=sum(1 for s in members if s.client_id in waiting_set), note=note,
                memory_awaiting_driver=self.ledger.group_pending(spec.name),
                tokens_granted=self.scheduler.tokens_granted.get(spec.name, 0),
                preemptions=self.scheduler.preemptions.get(spec.name, 0),
                charged_seconds=self.scheduler.charged_seconds(spec.name, now)))
        reply.busy_fraction = min(1.0, busy)
        for session in sorted(self.sessions.values(), key=lambda s: s.attached_at):
            reply.clients.append(admin_pb2.ClientStatus(
                client_id=session.public_id, group=session.group, pid=session.pid,
                process_name=session.process_name, holding=holder is not None and holder[0] == session.client_id,
                waiting=session.client_id in waiting_set, memory_used=clamp_u64(self.ledger.client_used(session.client_id)),
                attached_at=session.attached_at))
        return reply

    # ------------------------------------------------------ pending reclaims
    def observe_gpu_processes(self, pids: list[int] | None, taken_at: float) -> None:
        """NVML's process list (pids), queried at `taken_at` (monotonic), or
        None when there is none (no NVML, a failed query): pending reclaims
        whose memory the driver has freed, or whose timeout passed, end."""
        self._on_reclaimed(self.ledger.observe_gpu_processes(pids, taken_at))

    def has_pending_reclaims(self) -> bool:
        return bool(self.ledger.pending_reclaims())

    def _on_reclaimed(self, ended: list[Reclaimed]) -> None:
        for reclaimed in ended:
            pending = reclaimed.pending
            after = reclaimed.at - pending.since
            message = (f"memory of pid {pending.pid} ({pending.nbytes} bytes, client {pending.client}) back "
                       f"{after * 1e3:.0f} ms after it departed: {reclaimed.reason}")
            self.metrics.memory_reclaimed.labels(pending.group, reclaimed.how).inc()
            self.events.publish("memory_reclaimed", pending.group, pending.client, message)
            (log.warning if reclaimed.how == "timeout" else log.info)("group %s: %s", pending.group, message)
            self._publish_memory(pending.group)
            waiter = self._reclaimed_in.pop(pending.group, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
        if ended:
            self._reclaims_changed()

    def _reclaims_changed(self) -> None:
        """A reclaim began or ended: wake the watch, persist the table."""
        self.reclaims_changed.set()
        self._reclaims_dirty = True
        if self._loop is None:
            self._save_reclaims_now()
        elif not self._reclaims_saving:
            self._reclaims_saving = True
            self._loop.create_task(self._save_reclaims())

    async def _save_reclaims(self) -> None:
        """Writes the latest table until none is newer (on a worker thread:
        fsync must not stall grants; one writer, so writes never reorder)."""
        try:
            while self._reclaims_dirty:
                self._reclaims_dirty = False
                table, generation = self.ledger.pending_reclaims(), next(self._reclaim_generations)
                try:
                    await asyncio.to_thread(self.reclaim_store.save, table, generation)
                except OSError as exc:
                    log.error("cannot save pending reclaims to %s: %s", self.reclaim_store.path, exc)
        finally:
            self._reclaims_saving = False

    def _save_reclaims_now(self) -> None:
        self._reclaims_dirty = False
        try:
            self.reclaim_store.save(self.ledger.pending_reclaims(), next(self._reclaim_generations))
        except OSError as exc:
            log.error("cannot save pending reclaims to %s: %s", self.reclaim_store.path, exc)

    def _restore_accounting(self, now: float) -> None:
        """The previous daemon's charges, back on the groups it had (see
        AccountingStore): a capped group's window spans the restart."""
        table, note = self.accounting_store.load()
        if note:
            log.warning("%s", note)
        for name, entry in table.items():
            if name not in self.secrets:
                continue  # deleted while no daemon kept the file (or the table was restored from a backup)
            try:
                accounting = GroupAccounting(tuple(tuple(i) for i in entry["intervals"]), float(entry["pace_until"]),
                                             float(entry["charged_total"]), entry["tokens_granted"],
                                             entry["preemptions"], entry["expiries"])
                self.scheduler.restore_accounting(name, accounting, now)
            except (KeyError, TypeError, ValueError, GsliceError) as exc:  # a hand edit must not stop the start
                log.warning("charges of group %r in %s are unusable (%s); the group starts afresh",
                            name, self.accounting_store.path, exc)

    def _accounting_table(self, now: float) -> dict[str, GroupAccounting]:
        return {spec.name: self.scheduler.accounting(spec.name, now) for spec in self.scheduler.groups()}

    async def save_accounting(self) -> None:
        """Every second (the daemon's loop): the charges, if any were made or
        decided since the last save (on a worker thread: fsync must not stall grants)."""
        changed_since = (self.scheduler.decisions, sum(self.scheduler.charged_total.values()))
        if changed_since == self._accounting_saved_at:
            return
        table, generation = self._accounting_table(time.monotonic()), next(self._accounting_generations)
        try:
            await asyncio.to_thread(self.accounting_store.save, table, generation)
        except OSError as exc:
            log.error("cannot save group charges to %s: %s", self.accounting_store.path, exc)
            return  # tried again in a second
        self._accounting_saved_at = changed_since

    def _save_accounting_now(self) -> None:
        try:
            self.accounting_store.save(self._accounting_table(time.monotonic()), next(self._accounting_generations))
        except OSError as exc:
            log.error("cannot save group charges to %s: %s", self.accounting_store.path, exc)

    def _restore_reclaims(self) -> None:
        entries, note = self.reclaim_store.load()
        if note:
            log.warning("%s", note)
        for item in entries:
            if item["group"] not in self.secrets:
                log.warning("pending reclaim of pid %d (%d bytes) names group %r, which no longer exists; dropped",
                            item["pid"], item["bytes"], item["group"])
                continue
            self.ledger.restore_pending(PendingReclaim(
                item["group"], item["pid"], item["bytes"], item["client"], float(item["since"]),
                float(item["since_wall"]), float(item["last_listed"]), item["seen_listed"], item["lists_since"]))
            self._publish_memory(item["group"])
            log.info("group %s: memory of pid %d (%d bytes) still held from before the restart, until the driver "
                     "frees it", item["group"], item["pid"], item["bytes"])

    def _reclaim_notes(self, group: str, now: float) -> list[str]:
        notes = []
        for pending in self.ledger.pending_reclaims(group):
            since = time.strftime("%H:%M:%S", time.localtime(pending.since_wall)) + f".{int(pending.since_wall * 1000) % 1000:03d}"
            if pending.seen_listed:
                how = "NVML still lists it"
            else:
                how = (f"NVML has not listed pid {pending.pid}: back by timeout at the latest in "
                       f"{max(0.0, pending.deadline(self.ledger.reclaim_timeout) - now):.1f} s")
            notes.append(f"memory of pid {pending.pid} ({pending.nbytes} bytes, client {pending.client}) held until "
                         f"the driver frees it; waiting since {since} ({now - pending.since:.1f} s); {how}")
        return notes

    # ---------------------------------------------------------------- bypass
    def check_gpu_processes(self, processes: list[GpuProcessUse], policy: str) -> list[Bypass]:
        """Compare NVML's process list with the attached clients and apply the
        operator's bypass policy (none: nothing; warn: status, metric, event;
        kill: also SIGKILL). Each (pid, problem) is announced once."""
        attached = {session.pid: session.group for session in self.sessions.values()}
        quotas = {name: self.ledger.group_quota(name) for name in self.ledger.groups()}
        # Departed processes whose memory is still charged to their group are known, not escaping.
        departed = frozenset(p.pid for p in self.ledger.pending_reclaims())
        found = [] if policy == "none" else find_bypass(processes, attached, quotas,
                                                        frozenset({os.getpid()}) | departed)
        listed = []
        seen = set()
        for bypass in found:
            key = (bypass.pid, bypass.problem)
            seen.add(key)
            action = "warned"
            if key not in self._reported_bypass:
                if policy == "kill":
                    action = kill(bypass.pid)
                detail = (f"pid {bypass.pid} uses {bypass.used_memory} bytes of GPU memory: {bypass.problem}"
                          + (f" (its group {bypass.group!r} uses more than its quota of {quotas[bypass.group]} bytes)"
                             if bypass.group else "")
                          + f"; policy {policy}: {action}")
                log.warning("bypass: %s", detail)
                self.events.publish("bypass_detected", bypass.group, message=detail)
            listed.append(admin_pb2.GpuProcess(pid=bypass.pid, used_memory=clamp_u64(bypass.used_memory),
                                               group=bypass.group, problem=bypass.problem, action=action))
        self._reported_bypass = seen
        self.unmanaged_processes = listed
        for problem in ("not attached", "over quota"):
            self.metrics.unmanaged_processes.labels(problem).set(sum(1 for b in found if b.problem == problem))
        return found

    # -------------------------------------------------------------- metrics
    def refresh_gauges(self) -> None:
        """Clock-dependent gauges; called periodically on the loop."""
        now = time.monotonic()
        busy = 0.0
        for spec in self.scheduler.groups():
            share = self.scheduler.share(spec.name, now)
            busy += share
            self.metrics.group_share.labels(spec.name).set(share)
        self.metrics.busy_fraction.set(min(1.0, busy))

    def _publish_group_metrics(self, spec: GroupSpec) -> None:
        self.metrics.group_request.labels(spec.name).set(spec.request)
        self.metrics.group_limit.labels(spec.name).set(spec.limit)
        self.metrics.memory_quota.labels(spec.name).set(spec.memory_quota)
        self._publish_memory(spec.name)
        self._publish_clients(spec.name)

    def _publish_memory(self, group: str) -> None:
        self.metrics.labelled(self.metrics.memory_used, group).set(self.ledger.group_used(group))
        self.metrics.labelled(self.metrics.memory_awaiting_driver, group).set(self.ledger.group_pending(group))

    def _publish_clients(self, group: str) -> None:
        self.metrics.clients.labels(group).set(len(self._members.get(group, ())))

    def shutdown(self) -> None:
        """End every Control stream and wait (daemon stopping)."""
        if self._timer is not None:
            self._timer.cancel()
        for client_id in list(self.sessions):
            # They keep their memory and re-declare it to the next daemon.
            self.detach(client_id, "tokend stopping", hold_memory=False)
        if self._reclaims_dirty or self.ledger.pending_reclaims():
            self._save_reclaims_now()  # the next daemon holds them too
        self._save_accounting_now()  # after the detaches: they charged the holder's slice


_LABEL_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9./_-]{0,62}")
MAX_LABELS = 16
MAX_LABEL_VALUE = 512


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
