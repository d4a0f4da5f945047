"""What the operator sees of the coordinator's state: the GpuStatus that
`gslice status` and the DRA plugin read, the processes on the GPU that
escape gslice (bypass), and the Prometheus gauges. A part of Coordinator
(tokend/coordinator.py); it reads the scheduler, ledger and sessions and
changes nothing they decide."""
from __future__ import annotations

import logging
import os
import time

from gslice.v1 import admin_pb2

from .limits import clamp_u64
from .process_watch import Bypass, GpuProcessUse, find_bypass, kill
from .scheduler import GroupSpec

log = logging.getLogger("gslice.tokend")


class OperatorView:
    """Coordinator's status, bypass check and gauges."""

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
