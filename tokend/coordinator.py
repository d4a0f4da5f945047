"""Runs the sans-I/O core (scheduler + memory ledger) on the daemon's asyncio
loop and keeps everything the core does not: client sessions, the futures
AcquireToken waits on, Control stream queues, the wake-up timer, events and
metrics.

Every core call happens on the loop thread, so the core needs no locks and
each ledger operation is atomic across all client processes. Every list of
decisions the core returns goes through `_apply`, and after every core call
the single wake-up timer is re-armed at `scheduler.next_wakeup()`.

Coordinator is one object in four files, each about one thing:
- this one: the core's decisions, client sessions, tokens and memory calls;
- group_admin.py: the group table and the operator's changes to it;
- state_saves.py: pending reclaims and charges kept across restarts;
- operator_view.py: status, the bypass check and the gauges."""
from __future__ import annotations

import asyncio
import hmac
import logging
import secrets
import time
from dataclasses import dataclass, field

import grpc

from gslice.v1 import admin_pb2, client_pb2, common_pb2

from .events import EventHub
from .gpu_discovery import GpuInfo
from .group_admin import GroupAdmin
from .limits import (MAX_GPU_UUID_BYTES, MAX_GROUP_BYTES, MAX_SECRET_BYTES, AttachRateLimiter, Limits,
                     check_field_length, clamp_u64, printable)
from .memory_ledger import DEFAULT_RECLAIM_TIMEOUT, RESERVE_WAIT_FOR_RECLAIM, MemoryLedger, Reclaimed
from .metrics import TokendMetrics
from .operator_view import OperatorView
from .preempt_doorbell import PreemptDoorbell
from .rpc_guard import RpcFailure
from .scheduler import Expire, Grant, Revoke, Scheduler, SchedulerConfig
from .state_saves import StateSaves
from .state_store import AccountingStore, GroupStore, ReclaimStore

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

# A grant that follows a preemption's Revoke waits until the Revoke has been
# handed to the preempted client's Control stream (so the holder hears of it
# no later than the waiter starts launching), but never longer than this.
GRANT_AFTER_REVOKE_MAX_WAIT = 0.002


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


class Coordinator(GroupAdmin, StateSaves, OperatorView):
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
        self._init_state_saves(ReclaimStore(store.state_dir), AccountingStore(store.state_dir))
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
        self._send_control(session, write)
        self.metrics.preemptions.labels(session.group).inc()
        self.events.publish("preempted", session.group, session.public_id,
                            f"token {revoke.token_id} revoked: {revoke.reason}")
        return write

    def _on_expire(self, expire: Expire) -> None:
        session = self.sessions.get(expire.client_id)
        if session is None:
            return
        self._send_control(session, client_pb2.ControlEvent(
            revoke=client_pb2.Revoke(token_id=expire.token_id, reason="expired")))
        self.metrics.expiries.labels(session.group).inc()
        if expire.after_revoke:
            detail = (f"token {expire.token_id} still not released {self.scheduler.config.grace * 1e3:.0f} ms "
                      f"after it was revoked at a preemption (the client may go on submitting); "
                      f"charged {expire.charged * 1e3:.1f} ms more")
        else:
            detail = (f"token {expire.token_id} not released within quantum + grace; "
                      f"charged {expire.charged * 1e3:.1f} ms")
        self.events.publish("token_expired", session.group, session.public_id, detail)

    @staticmethod
    def _send_control(session: ClientSession, what: ControlWrite | client_pb2.ControlEvent) -> None:
        """Queue an event for the client's Control stream."""
        session.control_queue.put_nowait(what if isinstance(what, ControlWrite) else ControlWrite(what))

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


