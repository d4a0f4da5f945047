"""Discrete-event simulation of clients around the sans-I/O scheduler, on a
fake clock: used by the simulation tests and the core benchmark."""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from gslice.tokend.scheduler import Expire, Grant, Revoke, Scheduler


@dataclass
class ClientBehaviour:
    """How a simulated client uses the token.

    busy: re-requests as soon as it releases (or at `first_request`);
    otherwise requests every `period` seconds. Holds for
    min(quantum, burst) (burst None: the whole quantum), releasing idle when
    its burst ended before the quantum. After a Revoke it releases
    `revoke_delay` seconds later (its next kernel launch). A client with
    `ignores_tokens` never releases (its tokens expire).
    """

    group: str
    busy: bool = True
    burst: float | None = None
    period: float = 1.0
    first_request: float = 0.0
    revoke_delay: float = 0.0
    ignores_tokens: bool = False


@dataclass
class SimResult:
    held: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # group -> (grant, end) intervals
    waits: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # client -> (request time, wait)
    decisions: list = field(default_factory=list)

    def held_between(self, group: str, start: float, end: float) -> float:
        total = 0.0
        for grant, stop in self.held.get(group, []):
            low, high = max(grant, start), min(stop, end)
            if high > low:
                total += high - low
        return total


def simulate(scheduler: Scheduler, behaviours: dict[str, ClientBehaviour], until: float,
             start: float = 0.0, keep_decisions: bool = False, observer=None) -> SimResult:
    """Run until `until`; `observer(now)`, if given, is called after every step."""
    result = SimResult()
    events: list[tuple[float, int, str, str, int]] = []  # (time, seq, kind, client, token)
    sequence = 0

    def push(time: float, kind: str, client_id: str, token: int = 0) -> None:
        nonlocal sequence
        sequence += 1
        heapq.heappush(events, (time, sequence, kind, client_id, token))

    requested_at: dict[str, float] = {}
    grants: dict[int, tuple[str, float, float]] = {}  # token -> (client, grant time, quantum)

    for client_id, behaviour in behaviours.items():
        scheduler.attach(client_id, behaviour.group, start)
        push(start + behaviour.first_request, "request", client_id)

    def handle(decisions, now: float) -> None:
        if keep_decisions:
            result.decisions.extend((now, d) for d in decisions)
        for decision in decisions:
            client_id = decision.client_id
            behaviour = behaviours[client_id]
            if isinstance(decision, Grant):
                grants[decision.token_id] = (client_id, now, decision.quantum)
                result.waits.setdefault(client_id, []).append(
                    (requested_at[client_id], now - requested_at.pop(client_id)))
                if behaviour.ignores_tokens:
                    continue
                hold = decision.quantum if behaviour.burst is None else min(decision.quantum, behaviour.burst)
                push(now + hold, "release", client_id, decision.token_id)
            elif isinstance(decision, Revoke):
                if not behaviour.ignores_tokens:
                    push(now + behaviour.revoke_delay, "release", client_id, decision.token_id)
            elif isinstance(decision, Expire):
                owner, granted, _ = grants.pop(decision.token_id)
                # A token handed over at a preemption and never released was
                # held (as far as anyone knows) until now.
                held_until = now if decision.after_revoke else granted + decision.charged
                result.held.setdefault(behaviours[owner].group, []).append((granted, held_until))
                if behaviour.busy:
                    push(now, "request", client_id)
                else:
                    push(max(now, granted + behaviour.period), "request", client_id)
        if observer is not None:
            observer(now)

    while True:
        wakeup = scheduler.next_wakeup()
        next_event = events[0][0] if events else None
        if next_event is None and wakeup is None:
            break
        if next_event is None or (wakeup is not None and wakeup < next_event):
            if wakeup > until:
                break
            handle(scheduler.advance(wakeup), wakeup)
            continue
        now, _, kind, client_id, token = heapq.heappop(events)
        if now > until:
            break
        behaviour = behaviours[client_id]
        if kind == "request":
            requested_at[client_id] = now
            handle(scheduler.request(client_id, now), now)
        elif kind == "release":
            if token not in grants:
                continue  # released earlier (revoke) or expired (a handed-over token is still released)
            _, granted, quantum = grants.pop(token)
            used = now - granted
            idle = used < quantum and behaviour.burst is not None
            result.held.setdefault(behaviour.group, []).append((granted, now))
            decisions = scheduler.release(client_id, token, used, now, idle=idle)
            if behaviour.busy:
                requested_at[client_id] = now
                decisions += scheduler.request(client_id, now)
            else:
                push(max(now, granted + behaviour.period), "request", client_id)
            handle(decisions, now)
    return result
