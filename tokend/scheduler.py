"""The token scheduler: every rule deciding who holds the GPU, and for how long.

Theory of operation
-------------------
Sans-I/O, in the style of h11's ``_state.py``: events go in (``attach``,
``request``, ``release``, ``renew``, ``advance`` ...), each with the current time
``now`` (float seconds, monotonic); decisions come out as a list of
``Grant`` / ``Revoke`` / ``Expire``. No clocks, sockets, threads, logging or
randomness live here, so every rule is testable with plain floats. Time never
goes backwards: a ``now`` earlier than the latest one seen is clamped to it.

One token per GPU. Its holder may launch work for ``quantum`` seconds.

Accounting. Each group keeps the intervals its clients were charged for; a
group's *usage* is the charged time inside the sliding window
``(now - window, now]``, the current holder's time counting as it accrues
(up to its deadline, past which an expiry charges no more); *share* =
usage / window. A release charges ``max(now - grant - transit_allowance,
used)`` as the interval ending at ``now``: what the client measured (from
its grant's arrival to its work's end), but never less than the time held
less the two messages' transit, when the GPU ran none of its work (so a
client under-reporting gains at most ``transit_allowance`` per slice, and
a cap is not eaten by transit on a loaded machine); an expiry charges
``quantum + grace``, and
the late release that follows charges what the client measured beyond
that (nothing is left uncharged, whatever the kernels' length).
Intervals of one group never overlap: a charge reaching back before the
group's previous interval keeps the excess as a point charge at its end.
Intervals that left the window are dropped, so memory is bounded by the
window, not by uptime.

Choice. When the token is free, among waiting clients whose group is
*eligible* (below its limit, see below), serve the smallest
``(tier, -priority, pace, wait sequence)`` where tier 0 = groups below
their request (usage in the window) and tier 1 = the rest, and pace is the
group's *virtual time*: what it was charged while active, per unit of its
request (stride scheduling's pass). The group least served relative to
what it asked for goes first (largest relative shortfall), and capacity
left over by idle groups is shared in proportion to requests. Paces within
quantum_min of the request's time of each other are level: the longest
waiter goes first, so busy groups take turns in a fixed order. A group
becoming active starts at the lowest active group's virtual time (idle
time is no claim on the others), and no active group lags the furthest
ahead by more than a window's worth (a group kept waiting by class or cap
catches up on at most its request x window). Virtual time, unlike window
usage, does not drop a slice at a time as old charges leave the window:
compared by window usage, 1 s shares swung by a slice each time the first
seconds' pattern left the window. Within a group, FIFO by wait start.
Guarantees come before priority classes; the class orders groups within a
tier.

Debt. A waiting group whose work items are at least quantum_max long (it
reported them) and that is ahead of the pace of a *contending* group (one that
could use the GPU now: waiting and not at its limit, or one that released
less than quantum_min ago, whose next request may be on the way: a busy
client stalled for an idle check between two launches releases "idle")
by more than its fair slice plus half its work item is in debt: it is
served only when no eligible waiter is out of debt and no such contending
group is about to ask. Such a group is also in debt for a while after each
charge of ``a`` seconds made beside contending groups: until
``fair_pace_until = max(fair_pace_until, start) + a / f`` (f: its request
over the sum of the contending groups' requests, its own included), a GCRA
like the smooth cap's, so its items are spaced out (1 s items at f = 0.3:
one every 3.3 s) instead of coming in clumps that echo every window (items
leaving the window together make room for as many new ones at once).
An overrun, a late release or a work item longer than a slice is so paid back before the group is served again, and a
group with 1 s kernels beside one with 1 ms kernels keeps its share: its
lead oscillates around zero (half an item either way) instead of growing.
(With "minus half its work item" a 1 s item needed its group 0.46 s behind
the others' pace, and a guaranteed 30% settled at 26-29%.) Such an item is
admitted whole on that credit and charged whole; the other groups' 1 s
windows dip while it runs (they get nothing for up to a second) and their
10 s windows hold (docs/architecture.md, "Kernels longer than a slice").

Limit. A group with limit >= 1 is never capped. Otherwise it holds over two
periods. Window: its *room* is ``limit*window - usage``; it is eligible
only while room covers what its head-of-line client needs (with smooth
caps on: its work item less quantum_min, at least quantum_min, judged
over the window as it will be when the item ends, since charges leave the
window while it runs, so three 1 s kernels fit a 30% cap's 3 s; else its
whole adapted quantum, which keeps it from being fed a stream of tiny
slices). A window may so hold up to quantum_min more than the cap. Smooth
cap (``cap_period`` > 0, a GCRA whose tolerance is how late the group was
served): every charge of ``a`` seconds moves the group's ``pace_until`` to
``max(pace_until, start - credit) + a / limit``, and it is not served
before then. ``credit`` is how long after it could have been served (its
pause over, a client waiting, room in its window) its slice was granted, at least quantum_min,
at most the window, kept while a busy group catches up: a grant made late
by a timer, a message or another group's slice or long kernel is made up
on back-to-back slices after, not lost (a 30% cap with 1 ms kernels got 2%
beside 1 s kernels). Its slices are ``cap_period*limit/(1-limit)`` long
(at least quantum_min, at least its work item), so a group at its limit
pauses about cap_period between slices, and over any interval T it gets at
most ``limit*(T + credit)`` plus one slice; the window caps every 10 s. A capped group waits even if the
GPU idles (limit is a cap); it never keeps a lease and is never renewed
(its pause must happen). Otherwise the core is work-conserving: every
event that frees the token grants it at once if anyone eligible waits.

Quantum. A client may report its *work item* (``request``/``renew``
``work_item``): the longest single piece of GPU work it submits (a kernel,
a CUDA graph). Its slices are then at least ``work_item + quantum_min``, so
long work does not expire under its token. Each client starts at ``quantum_max`` (a new client is assumed
busy; it shrinks within a few slices if not). An idle release moves it half
way toward twice what the slice really used (0.5 x 2 x used + 0.5 x
previous: Gemini's rule, with headroom so a burst fits in one slice); a release that used at least 90% of the granted quantum
doubles it; other releases (preempted, synchronised early) keep it. Always
clamped to ``[quantum_min, quantum_max]``, and a grant never exceeds the
group's room, except to cover the work item it was admitted for (its item
plus quantum_min). While other groups are active, a grant is also cut to the
group's *fair slice* (stride scheduling): ``quantum_max`` x its request /
the largest active request, minus the time it is ahead of the pace of the
furthest-behind active group (by virtual time, in its request's terms). With one busy client per group the token
merely alternates between groups whatever the choice rule, so slice length
is what sets a 30/70 split (from the first second, not only once the window
has filled), and the "ahead" term pays back overruns. Quanta are otherwise
not shortened when others wait: preemption by class is the latency tool.

Renew. At the end of its quantum a holder with more work asks ``renew``:
if no one else would be served now, or every waiter is outranked by it (a
strictly higher class, in a tier no worse: the waiters it would preempt),
and its group is not capped, the slice is charged and a new token granted to
it at once (``Grant(renewed=True)``);
the client never stops its stream of work, so a lone tenant pays no
time-slicing tax. Otherwise nothing changes and it releases as usual.

Lease. An idle release with ``keep_lease`` while nobody waits (and the
group is not capped) keeps the holding as a *lease*: it accrues nothing,
has no deadline, and the client may start a new slice on its own at its
next burst (no round trip); it then reports that slice's GPU time in its
next ``renew``/``release`` (charged as measured). When an eligible client
asks, the lease is taken back: ``Revoke`` is emitted and it must be
released within ``grace`` (else it expires, charged from the Revoke on).
A client of a strictly higher class takes it back as it would preempt a
slice: with ``preempt_handover`` it is granted in the same step (the
lessee's release, when it comes, charges the slice it started on the
lease, as measured), and ``preemptors`` names its group while the lease is
held, so it may ring the doorbell (a lessee that had started a slice on its
own went on feeding the GPU for the ~0.5-0.9 ms the ask took to reach
tokend, and the waiter then waited for the lessee's release too: the
slowest bursts beside a low-priority neighbour, 1.1-2.1 ms to their first
launch).
A client may also ask ``lease_if_free`` when it starts (``lease_at_start``):
it gets the token as a lease at once if nobody holds or waits for it and
its group is neither capped nor in debt, else nothing (it never waits), so
its first burst, too, starts without a round trip.

Preemption. A waiting client preempts the holder when it would be served
before the holder's group under the key above (so its tier is no worse than
the holder group's tier now) and its priority class is strictly higher.
Equal classes never preempt. With ``preempt_handover`` (the default) the
token is handed over at once: the holder is charged up to now, ``Revoke`` and
the waiter's ``Grant`` come out of the same step, and the holder's release,
when it comes, is accepted and charges what it measured beyond (its last
kernel drains ahead of the new holder's work on the GPU: the waiter gets the
GPU after that kernel and one round trip, not two). A handed-over token not
released within ``grace`` of the Revoke is charged ``grace`` more and reported
(``Expire(after_revoke=True)``). Without it, ``Revoke`` is emitted once per
token and the holder keeps the token until it releases or its token expires.

Anticipation. An *arrival* is a request of a group none of whose clients
waits or holds, following an idle release of its own (one following a
preemption, expiry or busy release starts the count afresh). Two regular
shapes are recognised. Open loop (requests at a fixed rate): when the last
``_ARRIVALS - 1`` periods between arrivals agree within
``_PERIODIC_SPREAD``, the next arrival is expected from the shortest to the
longest period (plus ``_EXPECTED_SLACK``) after the latest. Closed loop (a
fixed think after each burst, however long the burst took): when the last
``_ARRIVALS - 1`` gaps from an idle release to the next arrival agree
within ``_PERIODIC_SPREAD``, it is expected from the shortest to the
longest gap (plus slack) after the group's idle release. Either window
opens half their spread before the shortest: the next of five samples is
the shortest one time in five, so a window opening at the shortest of the
four before it missed about one arrival in five (an H200 beside 4096
matmuls: 18-23% of the bursts' rings came before it; bursts not
anticipated took 2.33 ms at the median, anticipated ones 1.90). Where both
hold, the tighter window. (A closed loop's periods carry its bursts' latency:
beside 8192 matmuls on an H100 they spread over 2-9 ms, and only 27 of 300
bursts were anticipated.)
``expected_preemption`` gives the earliest such window of a group that
would preempt the holder (``preemptors``); tokend publishes it and the
holder's shim starts no work that would still run when it opens (on a GPU
that runs one context at a time, the preemptor would otherwise wait for
that work's rest; a long kernel waits only when more than half of it, by
default, would run into the window: hook/gate_pause.c). A hint only: no
decision here depends on it; it costs the holder's group the GPU time
left idle before the arrival, at most a kernel plus the window.

Expiry. A token not released within ``quantum + grace`` of its grant is
taken back by the first event or ``advance`` at or after that deadline:
``Expire`` is emitted, ``quantum + grace`` charged and the token granted
on. A later release of that token is accepted once and charges the GPU
time the client measured beyond ``quantum + grace`` (debt). A release of
that token arriving before any call observed the deadline is still
accepted, charging the whole time held.

Time-driven decisions (expiry, room or tiers changing as the window slides)
are made by whichever call comes next; the adapter calls ``advance(now)`` at
``next_wakeup()`` so none is late. Every call validates its input before
changing anything: a refused call leaves the state untouched and emits
nothing.
"""
from __future__ import annotations

import enum
import math
import re
from collections import deque
from dataclasses import dataclass, replace
from typing import Union

from .errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    RequestSumExceeded,
)

# Slack when comparing sums of shares and room against thresholds: float
# round-off must neither refuse a valid configuration nor make a wakeup
# time decide nothing (which would make the adapter spin).
REQUEST_SUM_EPSILON = 1e-9
_TIME_EPSILON = 1e-7
# A quantum that used at least this fraction of its grant counts as "used
# the whole quantum" (the shim's clock and the daemon's differ slightly).
_FULL_USE_FRACTION = 0.9
# A capped group's long work item needs room for the item less this
# fraction of it (or quantum_min, if larger): see _threshold.
_ITEM_ROOM_SLACK = 0.05
# An idle release moves the quantum toward this multiple of what the slice
# used: a bursty client's next burst then fits in one slice instead of
# straddling an expiry (a new acquisition, and a new preemption, mid-burst).
_IDLE_HEADROOM = 2.0

# Anticipation: arrivals remembered per group (so ARRIVALS - 1 periods), how
# far apart the shortest and longest period may be for the group to count as
# periodic, and how long after the longest period the window stays open.
_ARRIVALS = 5
_PERIODIC_SPREAD = 0.003
_EXPECTED_SLACK = 0.001

_GROUP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


class Priority(enum.IntEnum):
    """Priority class of a group (same numbers as the proto enum)."""

    LOW = 1
    NORMAL = 2
    HIGH = 3


def _is_real(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _fmt(value: float) -> str:
    """Two decimals where that is exact enough, else enough digits to show the difference."""
    if abs(round(value, 2) - value) < 1e-9:
        return f"{value:.2f}"
    return f"{value:.6g}"


@dataclass(frozen=True)
class GroupSpec:
    name: str
    request: float  # guaranteed fraction of GPU time, 0 < request <= limit
    limit: float  # cap, limit <= 1
    memory_quota: int  # bytes, > 0
    priority: Priority = Priority.NORMAL

    def validate(self) -> None:
        if not isinstance(self.name, str) or not _GROUP_NAME.fullmatch(self.name):
            raise InvalidArgument(
                f"group name {self.name!r} is invalid: expected 1 to 63 characters "
                "of [A-Za-z0-9._-] starting with a letter or digit"
            )
        if not _is_real(self.request) or not math.isfinite(self.request) or not 0 < self.request <= 1:
            raise InvalidArgument(
                f"request {self.request!r} for group {self.name!r} is out of range: "
                "expected 0 < request <= 1"
            )
        if not _is_real(self.limit) or not math.isfinite(self.limit) or not self.request <= self.limit <= 1:
            raise InvalidArgument(
                f"limit {self.limit!r} for group {self.name!r} is out of range: "
                f"expected request ({self.request}) <= limit <= 1"
            )
        if not isinstance(self.memory_quota, int) or isinstance(self.memory_quota, bool) or self.memory_quota <= 0:
            raise InvalidArgument(
                f"memory quota {self.memory_quota!r} for group {self.name!r} is invalid: "
                "expected a whole number of bytes > 0"
            )
        try:
            Priority(self.priority)
        except ValueError:
            raise InvalidArgument(
                f"priority {self.priority!r} for group {self.name!r} is invalid: "
                "expected LOW (1), NORMAL (2) or HIGH (3)"
            ) from None


@dataclass(frozen=True)
class SchedulerConfig:
    window: float = 10.0  # sliding accounting window, seconds
    quantum_min: float = 0.005
    quantum_max: float = 0.100
    grace: float = 0.200  # token taken back after quantum + grace without release
    # Smooth caps: the longest pause a group at its limit should see between
    # two slices (plus one work item's overrun). 0 turns smoothing off: the
    # limit then holds over the sliding window only (bursts, then stalls).
    cap_period: float = 0.050
    # Preemption hands the token over at once (Revoke + Grant together)
    # instead of waiting for the preempted holder's release: the waiter's
    # grant saves a round trip through the holder. False: revoke, then grant
    # at the release.
    preempt_handover: bool = True
    # Anticipation: publish when a periodic preemptor is expected, so the
    # holder starts no long kernel that would run into its arrival (costs the
    # holder up to one kernel of idle GPU per such arrival). False: none.
    anticipate_preemption: bool = True
    # A starting client may take a free token as a lease (``lease_if_free``),
    # so its first launch needs no round trip. False: it always asks.
    lease_at_start: bool = True
    # A released slice is charged what the client measured (its grant's
    # arrival to the end of its work), but never less than the time held
    # minus this: the grant's and the release's transit, during which the
    # GPU ran none of its work (a 30% cap delivered 28.7% on a loaded
    # machine when transit was charged). Also the most a client that
    # under-reports gains per slice. 0: charge the whole time held.
    transit_allowance: float = 0.001

    def validate(self) -> None:
        for field_name in ("window", "quantum_min", "quantum_max", "grace", "cap_period", "transit_allowance"):
            value = getattr(self, field_name)
            if not _is_real(value) or not math.isfinite(value):
                raise InvalidArgument(f"{field_name} {value!r} is invalid: expected a finite number of seconds")
        if self.window <= 0:
            raise InvalidArgument(f"window {self.window} s is invalid: expected > 0")
        if not 0 < self.quantum_min <= self.quantum_max:
            raise InvalidArgument(
                f"quanta {self.quantum_min} s .. {self.quantum_max} s are invalid: "
                "expected 0 < quantum_min <= quantum_max"
            )
        if self.quantum_max > self.window:
            raise InvalidArgument(
                f"quantum_max {self.quantum_max} s is invalid: expected <= window ({self.window} s)"
            )
        if self.grace < 0:
            raise InvalidArgument(f"grace {self.grace} s is invalid: expected >= 0")
        if not 0 <= self.transit_allowance < self.quantum_min:
            raise InvalidArgument(
                f"transit_allowance {self.transit_allowance} s is invalid: expected 0 <= allowance "
                f"< quantum_min ({self.quantum_min} s)"
            )
        if not 0 <= self.cap_period <= self.window:
            raise InvalidArgument(
                f"cap_period {self.cap_period} s is invalid: expected 0 (no smoothing) .. window ({self.window} s)"
            )


@dataclass(frozen=True, slots=True)
class Grant:
    """Complete this client's pending acquire: it holds token_id for quantum
    seconds. `renewed`: the answer to this client's own ``renew`` (no acquire
    waits for it; the holder goes on without stopping)."""

    client_id: str
    token_id: int
    quantum: float
    renewed: bool = False


@dataclass(frozen=True, slots=True)
class Revoke:
    """Ask the holder to give token_id back at its next launch; it stays held
    until then. `lease_reclaim`: a lease taken back for a client of no higher
    class (not a preemption: the holder's shim keeps its normal feed-ahead)."""

    client_id: str
    token_id: int
    reason: str
    lease_reclaim: bool = False


@dataclass(frozen=True, slots=True)
class Expire:
    """token_id was taken back (quantum + grace passed); `charged` seconds were
    charged. `after_revoke`: it was handed over at a preemption and not
    released within grace of the Revoke (the client may still be submitting:
    tokend reports it)."""

    client_id: str
    token_id: int
    charged: float
    after_revoke: bool = False


Decision = Union[Grant, Revoke, Expire]


@dataclass(frozen=True)
class GroupAccounting:
    """What a group was charged, as a daemon restart must carry it over (see
    Scheduler.accounting): the charged intervals still inside the window and
    the smooth cap's pace (monotonic seconds, valid on the same boot), and
    the counters since the group was created."""

    intervals: tuple[tuple[float, float, float], ...]  # (start, end, point charge), sorted, disjoint
    pace_until: float
    charged_total: float
    tokens_granted: int
    preemptions: int
    expiries: int


class _Group:
    __slots__ = (
        "spec", "name", "request_usage", "capped", "cap", "priority", "limit",
        "intervals", "charged", "waiters", "clients", "last_active", "last_release", "pace_until",
        "fair_pace_until", "idle_since", "arrivals", "think_gaps", "waiting_since", "pace_credit", "room_from",
        "vtime",
    )

    def __init__(self, spec: GroupSpec, window: float) -> None:
        # intervals: [start, end, point_charge] lists, sorted and disjoint;
        # `charged` is their total (lengths plus point charges).
        self.intervals: deque[list[float]] = deque()
        self.charged = 0.0
        self.waiters: dict[str, int] = {}  # client id -> wait sequence, FIFO order
        self.clients: set[str] = set()
        self.last_active = -math.inf  # latest request, release or charge end
        # Latest release, idle or not: for quantum_min after it the group may
        # ask again (a busy client between two launches can look idle), so a
        # group in debt is not served in that gap.
        self.last_release = -math.inf
        self.pace_until = -math.inf  # smooth cap: not served again before this time
        # Debt spacing: a charge of `a` beside contending groups moves this
        # to max(it, start) + a / (its fraction of the contending requests).
        self.fair_pace_until = -math.inf
        # When its oldest waiter started waiting (inf: none waits), and the
        # smooth cap's tolerance for its current slice: how late it was
        # served after it could have been (see _hold).
        self.waiting_since = math.inf
        self.pace_credit = 0.0
        # When the window had room for its waiting head's slice (a capped
        # group): lateness for pace_credit counts from there, not from the
        # ask (see _hold).
        self.room_from = -math.inf
        # Anticipation: when its last client went idle (None: busy, or it
        # never did), its latest arrivals after such idle gaps, and those
        # gaps (idle release to arrival: a closed loop's think).
        self.idle_since: float | None = None
        self.arrivals: deque[float] = deque(maxlen=_ARRIVALS)
        self.think_gaps: deque[float] = deque(maxlen=_ARRIVALS - 1)
        # Virtual time: GPU time charged per unit of request (s), while
        # active; see _vtime.
        self.vtime = 0.0
        self.set_spec(spec, window)

    def set_spec(self, spec: GroupSpec, window: float) -> None:
        self.spec = spec
        self.name = spec.name
        self.request_usage = spec.request * window
        self.capped = spec.limit < 1.0
        self.cap = spec.limit * window
        self.limit = spec.limit
        self.priority = int(spec.priority)


class _Client:
    __slots__ = ("client_id", "group", "quantum", "work_item")

    def __init__(self, client_id: str, group: _Group, quantum: float) -> None:
        self.client_id = client_id
        self.group = group
        self.quantum = quantum
        self.work_item = 0.0  # longest single piece of GPU work it submits (s), as it reported


class _Holding:
    __slots__ = ("client", "token_id", "grant_time", "quantum", "deadline", "revoked", "leased", "revoked_at")

    def __init__(self, client: _Client, token_id: int, grant_time: float, quantum: float, grace: float) -> None:
        self.client = client
        self.token_id = token_id
        self.grant_time = grant_time
        self.quantum = quantum
        self.deadline = grant_time + quantum + grace
        self.revoked = False
        self.leased = False  # kept across an idle gap: accrues nothing until it is used or taken back
        self.revoked_at = math.inf


class Scheduler:
    """Decides token grants, revocations and expiries for one GPU (see module docstring).

    Statistics: ``decisions`` (total decisions emitted), and per group
    ``tokens_granted``, ``preemptions`` (Revokes sent to its holders),
    ``expiries`` (its tokens taken back) and ``charged_total`` (seconds
    charged since it was created; ``charged_seconds`` adds the holder's
    slice so far); a group's entries go with it.
    """

    def __init__(self, config: SchedulerConfig = SchedulerConfig()) -> None:
        config.validate()
        self.config = config
        self._window = float(config.window)
        self._groups: dict[str, _Group] = {}
        self._clients: dict[str, _Client] = {}
        self._waiting_groups: dict[_Group, None] = {}  # groups with waiters, ordered set
        self._holding: _Holding | None = None
        # client id -> (token id, seconds charged) of its token taken back at
        # expiry, so the late release that follows is charged the rest.
        # Tokens taken back before their holder released them, by client:
        # (token_id, charged so far, release due by). Expired ones are due by
        # inf; ones handed over at a preemption, by the Revoke + grace.
        self._expired: dict[str, tuple[int, float, float]] = {}
        self._next_token = 1
        self._wait_sequence = 0
        # The lowest active group's virtual time, as of the latest charge
        # (never decreasing): where a group becoming active starts.
        self._vfloor = 0.0
        self._now = -math.inf
        self.decisions = 0
        self.tokens_granted: dict[str, int] = {}
        self.preemptions: dict[str, int] = {}
        self.expiries: dict[str, int] = {}
        self.charged_total: dict[str, float] = {}

    # ------------------------------------------------------------------ time

    def _clock(self, now: float) -> float:
        if now.__class__ is float and self._now <= now < math.inf:
            self._now = now  # the common case, kept cheap
            return now
        if not _is_real(now) or math.isnan(now) or math.isinf(now):
            raise InvalidArgument(f"time {now!r} is invalid: expected finite seconds")
        if now < self._now:
            return self._now  # never backwards: clamp to the latest time seen
        self._now = now
        return now

    # ---------------------------------------------------------------- groups

    def _check_group_spec(self, spec: GroupSpec, replacing: str | None) -> GroupSpec:
        if not isinstance(spec, GroupSpec):
            raise InvalidArgument(f"group spec {spec!r} is invalid: expected a GroupSpec")
        spec.validate()
        spec = replace(spec, priority=Priority(spec.priority))
        if spec.limit < self.min_limit():
            raise InvalidArgument(
                f"limit {spec.limit} for group {spec.name!r} allows {spec.limit * self._window:g} s per "
                f"{self._window:g} s window, less than one minimal quantum ({self.config.quantum_min:g} s): "
                f"expected limit >= {self.min_limit():g}"
            )
        requests = {name: group.spec.request for name, group in self._groups.items() if name != replacing}
        requests[spec.name] = spec.request
        total = sum(requests.values())
        if total > 1.0 + REQUEST_SUM_EPSILON:
            listed = ", ".join(f"{name}={_fmt(value)}" for name, value in sorted(requests.items()))
            raise RequestSumExceeded(f"requests would sum to {_fmt(total)} > 1.0 ({listed})")
        return spec

    def check_group(self, spec: GroupSpec, replacing: str | None = None) -> GroupSpec:
        """What add_group (replacing None) or update_group of `replacing`
        would refuse, raised without changing anything; else the spec as it
        would be applied. The daemon writes its table between the two."""
        if replacing is None:
            if isinstance(spec, GroupSpec) and spec.name in self._groups:
                raise AlreadyExists(f"group {spec.name!r} already exists: choose another name or update it")
        else:
            self._group(replacing)
        return self._check_group_spec(spec, replacing=replacing)

    def min_limit(self) -> float:
        """The smallest limit this configuration accepts: one minimal quantum per window."""
        return self.config.quantum_min / self._window

    def add_group(self, spec: GroupSpec, now: float) -> list[Decision]:
        spec = self.check_group(spec)
        now = self._clock(now)
        self._groups[spec.name] = _Group(spec, self._window)
        self._groups[spec.name].vtime = self._vfloor
        self.tokens_granted[spec.name] = 0
        self.preemptions[spec.name] = 0
        self.expiries[spec.name] = 0
        self.charged_total[spec.name] = 0.0
        return self._step(now, [])

    def update_group(self, spec: GroupSpec, now: float) -> list[Decision]:
        group = self._group(spec.name if isinstance(spec, GroupSpec) else spec)
        spec = self._check_group_spec(spec, replacing=group.name)
        now = self._clock(now)
        group.set_spec(spec, self._window)
        return self._step(now, [])

    def remove_group(self, name: str, now: float) -> list[Decision]:
        group = self._group(name)
        if group.clients:
            # Counted, not named: a client id is its bearer credential.
            raise FailedPrecondition(f"group {name!r} still has {len(group.clients)} attached client(s): "
                                     "detach them first")
        now = self._clock(now)
        del self._groups[name]
        self._waiting_groups.pop(group, None)
        del self.tokens_granted[name], self.preemptions[name], self.expiries[name], self.charged_total[name]
        return self._step(now, [])

    def groups(self) -> list[GroupSpec]:
        return [self._groups[name].spec for name in sorted(self._groups)]

    def group(self, name: str) -> GroupSpec:
        return self._group(name).spec

    def _group(self, name: str) -> _Group:
        group = self._groups.get(name)
        if group is None:
            raise NotFound(f"group {name!r} does not exist (known: {', '.join(sorted(self._groups)) or 'none'})")
        return group

    # --------------------------------------------------------------- clients

    def _client(self, client_id: str) -> _Client:
        client = self._clients.get(client_id)
        if client is None:
            raise NotFound(f"client {client_id!r} is not attached: attach it first")
        return client

    def attach(self, client_id: str, group: str, now: float) -> list[Decision]:
        target = self._group(group)
        if not isinstance(client_id, str) or not client_id:
            raise InvalidArgument(f"client id {client_id!r} is invalid: expected a non-empty string")
        if client_id in self._clients:
            raise AlreadyExists(f"client {client_id!r} is already attached (group {self._clients[client_id].group.name!r})")
        now = self._clock(now)
        self._clients[client_id] = _Client(client_id, target, float(self.config.quantum_max))
        target.clients.add(client_id)
        return self._step(now, [])

    def detach(self, client_id: str, now: float) -> list[Decision]:
        client = self._client(client_id)
        now = self._clock(now)
        group = client.group
        out: list[Decision] = []
        self._expire_due(now, out)  # an expiry due first: it charges quantum + grace, no more
        holding = self._holding
        if holding is not None and holding.client is client:
            if not holding.leased:  # a lease is idle time: nothing to charge
                self._charge(group, now, now - holding.grant_time)
            self._holding = None
        self._stop_waiting(client)
        self._expired.pop(client_id, None)
        group.clients.discard(client_id)
        del self._clients[client_id]
        return self._step(now, out)

    def request(self, client_id: str, now: float, work_item: float | None = None) -> list[Decision]:
        """`client_id` waits for the token. `work_item` (s, optional): the
        longest single piece of GPU work it submits (a kernel, a graph); its
        grants are at least that long plus ``quantum_min``."""
        client = self._client(client_id)
        holding = self._holding
        if holding is not None and holding.client is client and not holding.leased:
            raise FailedPrecondition(
                f"this client already holds token {holding.token_id}: release it before requesting again"
            )
        work_item = self._check_work_item(work_item)
        now = self._clock(now)
        if holding is not None and holding.client is client:
            self._holding = None  # its own lease: the client dropped it (nothing to charge: idle)
        if work_item is not None:
            client.work_item = work_item
        group = client.group
        if not group.waiters and not (self._holding is not None and self._holding.client.group is group):
            self._note_arrival(group, now)
        group.vtime = self._vtime(group, now)  # from the floor, if it was inactive
        starts_waiting = not group.waiters
        if starts_waiting:
            group.waiting_since = now
        if client_id not in group.waiters:
            self._wait_sequence += 1
            group.waiters[client_id] = self._wait_sequence
            self._waiting_groups[group] = None
        if starts_waiting and group.capped:
            # Its charges only leave the window while it waits, so when the
            # window will have room for its slice is known now.
            room = self._time_usage_reaches(group, group.cap - self._threshold(group), now)
            group.room_from = math.inf if room is None else room - self._room_lookahead(group)
        group.last_active = now
        return self._step(now, [])

    def lease_if_free(self, client_id: str, now: float) -> list[Decision]:
        """`client_id` (starting) takes the token as a lease if nobody holds or
        waits for it and its group may be served at once and may lease (not
        capped, not in debt): ``[Grant]``, the lease's token and quantum.
        Otherwise ``[]``: it never waits. The lease accrues nothing until the
        client uses it and is taken back when anyone asks (see Lease)."""
        client = self._client(client_id)
        now = self._clock(now)
        group = client.group
        # Time first: a holder past its deadline expires now (and a waiter
        # may be granted), so "free" is judged as of now.
        out = self._step(now, [])
        if not self.config.lease_at_start or self._holding is not None or self._waiting_groups or group.capped:
            return out
        usage = self._usage(group, now)
        if self._capped_out(group, usage, now) or self._in_debt(group, usage, now):
            return out
        group.vtime = self._vtime(group, now)
        holding = self._hold(client, usage, now)
        holding.leased = True
        holding.deadline = math.inf
        out.append(Grant(client_id, holding.token_id, holding.quantum))
        self.decisions += 1
        return out

    def cancel(self, client_id: str, now: float) -> list[Decision]:
        client = self._client(client_id)
        now = self._clock(now)
        self._stop_waiting(client)
        return self._step(now, [])

    def _stop_waiting(self, client: _Client) -> None:
        group = client.group
        if group.waiters.pop(client.client_id, None) is not None and not group.waiters:
            del self._waiting_groups[group]
            group.waiting_since = math.inf

    @staticmethod
    def _check_used(used) -> float:
        if not (used.__class__ is float and 0.0 <= used < math.inf) and (
                not _is_real(used) or not math.isfinite(used) or used < 0):
            raise InvalidArgument(f"used time {used!r} s is invalid: expected a finite number >= 0")
        return float(used)

    def _check_work_item(self, work_item) -> float | None:
        if work_item is None:
            return None
        if not _is_real(work_item) or not math.isfinite(work_item) or not 0 <= work_item <= self._window:
            raise InvalidArgument(
                f"work item {work_item!r} s is invalid: expected 0 <= work item <= window ({self._window:g} s)"
            )
        return float(work_item)

    def _held(self, client: _Client, token_id: int) -> _Holding:
        holding = self._holding
        if holding is None or holding.client is not client or holding.token_id != token_id:
            if holding is not None and holding.client is client:
                held = f"it holds token {holding.token_id}"
            else:
                held = "it holds no token"
            raise FailedPrecondition(
                f"this client does not hold token {token_id!r} ({held}): already released"
            )
        return holding

    def _slice_charge(self, holding: _Holding, used: float, now: float) -> float:
        """What a slice ending now is charged: what the client measured,
        but at least the time held less the transit allowance (the grant's
        and the release's messages, when the GPU runs none of its work); a
        lease resumed by the client accrued nothing here: its measure."""
        if holding.leased:
            return used
        return max(now - holding.grant_time - self.config.transit_allowance, used)

    def release(self, client_id: str, token_id: int, used: float, now: float, idle: bool = False,
                keep_lease: bool = False) -> list[Decision]:
        """Give token_id back, charging max(time held, `used`).

        A release of a token taken back at expiry is accepted too: the GPU
        time it used beyond what the expiry charged is charged now (debt the
        group pays back before it is served again). `keep_lease` (with
        `idle`): keep the right to the token while nobody else waits, so the
        next burst needs no round trip; see ``holds_lease``."""
        client = self._client(client_id)
        used = self._check_used(used)
        expired = self._expired.get(client_id)
        holding = self._holding
        if expired is not None and expired[0] == token_id and not (
                holding is not None and holding.client is client and holding.token_id == token_id):
            now = self._clock(now)
            del self._expired[client_id]
            out: list[Decision] = []
            self._expire_due(now, out)  # its newer token's expiry, if due, comes first
            self._charge(client.group, now, max(0.0, used - expired[1]))
            return self._step(now, out)
        holding = self._held(client, token_id)
        now = self._clock(now)
        charged = self._slice_charge(holding, used, now)
        group = client.group
        self._charge(group, now, charged)
        if not (holding.leased and used == 0.0):  # a lease given back unused says nothing
            self._adapt_quantum(client, holding, charged, used, idle)
            group.last_release = now
        if idle and not group.waiters:
            group.idle_since = now
        if keep_lease and idle and not holding.revoked and not group.capped and not self._waiting_groups:
            holding.leased = True
            holding.grant_time = now
            holding.deadline = math.inf
            return self._step(now, [])
        self._holding = None
        return self._step(now, [])

    def renew(self, client_id: str, token_id: int, used: float, now: float,
              work_item: float | None = None) -> list[Decision]:
        """The holder's quantum is over but it has more work: if nobody else
        would be served now, charge the slice and grant it a fresh one at
        once (a ``Grant`` with ``renewed=True``; the holder never stops).
        Otherwise decide nothing: it keeps token_id and releases it as usual.
        A capped group is never renewed (its smooth cap wants a pause)."""
        client = self._client(client_id)
        used = self._check_used(used)
        work_item = self._check_work_item(work_item)
        holding = self._held(client, token_id)
        now = self._clock(now)
        if work_item is not None:
            client.work_item = work_item
        group = client.group
        if holding.revoked or now >= holding.deadline or group.capped:
            return self._step(now, [])
        best = self._candidate(now)
        if best is not None and not self._outranks(group, self._holder_key_tier(now, holding), best[0], best[2][0]):
            return self._step(now, [])
        if client.work_item >= self.config.quantum_max and self._waiter_eligible_within(now, client.work_item, group):
            # Another long item now would keep a waiter that comes out of its
            # cap's pause meanwhile off the GPU for the whole item.
            return self._step(now, [])
        charged = self._slice_charge(holding, used, now)
        self._charge(group, now, charged)
        self._adapt_quantum(client, holding, charged, used, False)
        quantum = self._grant_quantum(client, group, self._usage(group, now), now)
        token = self._next_token
        self._next_token += 1
        # `used` may reach past now: the holder renews while its queued work
        # (a long kernel) still runs, and measures the slice to that work's
        # end. The new slice starts there, so its quantum covers the work it
        # is renewed for (from now, a 1 s kernel queued behind another ran
        # past the deadline: the expiry handed the GPU to the next holder
        # while it ran, and both were charged for the overlap). At most one
        # work item or quantum_max ahead.
        ahead = min(max(0.0, used - (now - holding.grant_time)), max(client.work_item, self.config.quantum_max))
        self._holding = _Holding(client, token, now + ahead, quantum, self.config.grace)
        self.tokens_granted[group.name] += 1
        return self._step(now, [Grant(client_id, token, quantum, renewed=True)])

    def holds_lease(self, client_id: str, token_id: int) -> bool:
        """Is token_id kept by client_id as a lease (after an idle release
        with keep_lease)? The client may start a new slice without asking."""
        holding = self._holding
        return (holding is not None and holding.leased and holding.client.client_id == client_id
                and holding.token_id == token_id)

    def _adapt_quantum(self, client: _Client, holding: _Holding, charged: float, used: float, idle: bool) -> None:
        config = self.config
        if idle:
            quantum = 0.5 * client.quantum + 0.5 * _IDLE_HEADROOM * used
        elif not holding.revoked and charged >= _FULL_USE_FRACTION * holding.quantum:
            quantum = 2.0 * client.quantum
        else:
            return
        client.quantum = min(config.quantum_max, max(config.quantum_min, quantum))

    def advance(self, now: float) -> list[Decision]:
        return self._step(self._clock(now), [])

    # ------------------------------------------------------------ accounting

    def _charge(self, group: _Group, end: float, amount: float) -> None:
        """Charge `amount` seconds as the interval ending at `end`."""
        if end > group.last_active:
            group.last_active = end
        if amount <= 0.0:
            return
        if group.capped and self.config.cap_period > 0:
            # Smooth cap (a GCRA): `amount` of GPU time buys amount / limit of
            # wall time, so the group is next served after a pause of
            # amount * (1 - limit) / limit. Over any interval its usage is
            # then at most limit x interval + one slice.
            # Tolerance pace_credit (see _hold): a grant made late (a timer,
            # message transit, another group's long kernel) is made up on the
            # next pauses instead of lost for good (each lost ms at a 21 ms
            # slice costs a 30% cap 0.4 points).
            begin = end - amount
            group.pace_until = max(group.pace_until, begin - group.pace_credit) + amount / group.limit
        # Debt spacing (see _in_debt): the same pacing at the group's fair
        # fraction of the groups contending now.
        # Waiting groups count even while capped out (a smooth cap's pause):
        # they take their part as soon as it ends. Counted only when
        # eligible, a capped group's short pauses let a 1 s item's group
        # space its items for the whole GPU (a 70% group got 73-74%).
        requests = group.request_usage + sum(other.request_usage for other in self._groups.values()
                                             if other is not group and (other.waiters or self._contending(other, end)))
        if requests > group.request_usage:
            begin = end - amount
            group.fair_pace_until = max(group.fair_pace_until, begin) + amount * requests / group.request_usage
        self.charged_total[group.name] += amount
        self._advance_vtime(group, amount)
        intervals = group.intervals
        start = end - amount
        point = 0.0
        if intervals and start < intervals[-1][1]:
            # Reaches back over the group's previous interval: keep intervals
            # disjoint and hold the excess as a point charge at `end`.
            start = intervals[-1][1]
            point = amount - (end - start)
        if intervals and point == 0.0 and intervals[-1][2] == 0.0 and start - intervals[-1][1] <= 1e-12:
            intervals[-1][1] = end  # contiguous with the previous one: extend it
        else:
            intervals.append([start, end, point])
        group.charged += amount

    def _usage(self, group: _Group, now: float) -> float:
        """Charged time of `group` inside (now - window, now], the holder's time included."""
        window_start = now - self._window
        intervals = group.intervals
        if intervals:
            if intervals[0][1] <= window_start:
                charged = group.charged
                while intervals and intervals[0][1] <= window_start:
                    start, end, point = intervals.popleft()
                    charged -= end - start + point
                # Re-add exactly when it empties so round-off cannot accumulate.
                group.charged = charged if intervals else 0.0
            usage = group.charged
            if intervals:
                first_start = intervals[0][0]
                if first_start < window_start:
                    usage -= window_start - first_start
        else:
            usage = 0.0
        holding = self._holding
        if holding is not None and holding.client.group is group and not holding.leased:
            # Accrues until the deadline: past it, an expiry charges no more.
            start = holding.grant_time if holding.grant_time > window_start else window_start
            end = now if now < holding.deadline else holding.deadline
            if end > start:   # a renewed slice may start ahead of now (see renew)
                usage += end - start
        return usage

    def _active(self, group: _Group, now: float) -> bool:
        """Waiting, holding (a lease too), or active within quantum_max."""
        holding = self._holding
        return bool(group.waiters) or (holding is not None and holding.client.group is group) or (
            group.last_active >= now - self.config.quantum_max)

    def _vtime(self, group: _Group, now: float) -> float:
        """The group's virtual time: what it was charged while active, per
        unit of its request, the holder's slice counting as it accrues (as
        in _usage). A group becoming active starts at the floor (the lowest
        active group's virtual time), so time it spent idle is no claim on
        the others. Busy groups level their virtual times (stride
        scheduling's pass): unlike usage in the sliding window, it does not
        drop a slice at a time as old charges leave the window. Compared by
        window usage, each group's oldest slice leaving made it look behind
        by up to that slice; the fair slices chased that echo and 1 s shares
        swung by a slice (a 30% group with 5 ms kernels: 23-37%)."""
        vtime = group.vtime
        holding = self._holding
        if holding is not None and holding.client.group is group:
            if not holding.leased:
                end = now if now < holding.deadline else holding.deadline
                if end > holding.grant_time:
                    vtime += (end - holding.grant_time) / group.spec.request
        elif not group.waiters and group.last_active < now - self.config.quantum_max:
            vtime = max(vtime, self._vfloor)
        return vtime

    def _advance_vtime(self, group: _Group, amount: float) -> None:
        """Charge `amount` to the group's virtual time; keep every active
        group within one window of the furthest ahead (a group that could
        not be served, by class or its cap, catches up on at most a window's
        worth of its request, as with window usage) and raise the floor."""
        group.vtime += amount / group.spec.request
        now = self._now
        active = [other for other in self._groups.values() if other is group or self._active(other, now)]
        top = max(other.vtime for other in active)
        for other in active:
            if other.vtime < top - self._window:
                other.vtime = top - self._window
        lowest = min(other.vtime for other in active)
        if lowest > self._vfloor:
            self._vfloor = lowest

    def _time_usage_reaches(self, group: _Group, target: float, now: float) -> float | None:
        """Earliest time >= now at which the group's past charges inside the
        window fall to `target` or below (no new charges assumed)."""
        window_start = now - self._window
        usage = self._usage(group, now)
        holding = self._holding
        if holding is not None and holding.client.group is group and not holding.leased:
            return None  # still accruing: the release is the event to wait for
        need = usage - target
        if need <= 0.0:
            return now
        for start, end, point in group.intervals:
            low = start if start > window_start else window_start
            length = end - low
            if need <= length:
                return low + need + self._window
            need -= length
            if need <= point:
                return self._leaves_window(end)  # the point leaves with its interval
            need -= point
        if target >= 0.0 and group.intervals:
            # Round-off: `usage` (a running sum) exceeds the intervals' lengths
            # by a hair. Once the last interval leaves, usage is exactly 0.
            return self._leaves_window(group.intervals[-1][1])
        return None  # target below zero: never

    def _leaves_window(self, end: float) -> float:
        """Earliest time at which an interval ending at `end` is out of the
        window: now - window >= end exactly, in floats (else _usage keeps it
        one more call)."""
        moment = end + self._window
        while moment - self._window < end:
            moment = math.nextafter(moment, math.inf)
        return moment

    # ---------------------------------------------------------------- choice

    def _client_quantum(self, client: _Client) -> float:
        """The slice `client` asks for: its adapted quantum, shortened for a
        capped group to what its smooth cap spreads out (cap_period), and
        never shorter than its work item (plus quantum_min) so a long kernel
        or graph does not expire under it."""
        quantum = client.quantum
        group = client.group
        if group.capped and self.config.cap_period > 0:
            smooth = self.config.cap_period * group.limit / (1.0 - group.limit)
            quantum = min(quantum, max(self.config.quantum_min, smooth))
        if client.work_item > 0.0:
            quantum = max(quantum, client.work_item + self.config.quantum_min)
        return quantum

    def _threshold(self, group: _Group) -> float:
        """Room in the window a capped group needs before it is served: its
        head client's slice; with smooth caps (which space slices out
        already) a minimal slice, or its work item less quantum_min. Items
        that divide the cap exactly (three 1 s kernels in a 30% cap's 3 s)
        are each charged a hair more than their length: asking room for the
        whole item (or item + quantum_min) made the last one never fit, so a
        30% cap with 1 s kernels got 20%. On a GPU shared with others "a
        hair" is up to ~1.5% (a context switch, the neighbour's tail): with
        quantum_min (5 ms) of slack every third 1 s item waited 2.3 s more
        (26.7%), so the slack is the larger of quantum_min and
        _ITEM_ROOM_SLACK of the item. The smooth cap's pace spaces the
        items; the window may so be exceeded by that slack at most."""
        head = self._clients[next(iter(group.waiters))]
        if self.config.cap_period > 0:
            slack = max(self.config.quantum_min, _ITEM_ROOM_SLACK * head.work_item)
            quantum = max(self.config.quantum_min, head.work_item - slack)
        else:
            quantum = self._client_quantum(head)
        return quantum if quantum < group.cap else group.cap

    def _grant_quantum(self, client: _Client, group: _Group, usage: float, now: float) -> float:
        quantum = self._client_quantum(client)
        if group.capped and self.config.cap_period > 0 and now > group.pace_until:
            # Catching up (served late: another group's long kernel held the
            # GPU): the back-to-back slices its tolerance allows, as one.
            # Each slice's grant and release idle the GPU (~1 ms on a loaded
            # machine), uncharged but lost to the group: in 21 ms slices a
            # 30% cap beside 1 s kernels got 28.6%, not 30%.
            behind = min(group.pace_credit, now - group.pace_until)
            owed = behind * group.limit / (1.0 - group.limit)
            quantum = max(quantum, min(owed, self.config.quantum_max))
        fair = self._fair_slice(group, usage, now)
        if fair is not None and fair < quantum:
            quantum = max(self.config.quantum_min, fair, client.work_item + self.config.quantum_min)
        if group.capped and group.cap - usage < quantum:
            # Never below its work item: a slice cut under the item it was
            # admitted for would not start it (the shim's wrap-up).
            quantum = max(self.config.quantum_min, group.cap - usage,
                          min(quantum, client.work_item + self.config.quantum_min))
        return quantum

    def _capped_out(self, group: _Group, usage: float, now: float) -> bool:
        """At its limit: too little room in the window for the slice it asks
        for, or inside its smooth-cap pause."""
        if not group.capped:
            return False
        if now < group.pace_until - _TIME_EPSILON:
            return True
        threshold = self._threshold(group) if group.waiters else self.config.quantum_min
        if group.cap - usage >= threshold - _TIME_EPSILON:
            return False
        lookahead = self._room_lookahead(group)
        if lookahead == 0.0:
            return True
        moment = self._time_usage_reaches(group, group.cap - threshold, now)
        return moment is None or moment - lookahead > now + _TIME_EPSILON

    def _room_lookahead(self, group: _Group) -> float:
        """How far ahead a waiting capped group's window room is judged: its
        head's work item, with smooth caps on (0 otherwise). The room that
        matters for an item is the window's when the item ends: charges
        leave the window while it runs. Judged now, a 30% cap's fourth 1 s
        kernel had to wait until the first had left the window entirely
        (every 11 s instead of every 10: 27%)."""
        if not group.waiters or self.config.cap_period <= 0:
            return 0.0
        holding = self._holding
        if holding is not None and holding.client.group is group and not holding.leased:
            return 0.0  # still accruing: its release decides
        return self._clients[next(iter(group.waiters))].work_item

    def _contending(self, group: _Group, now: float) -> bool:
        """Could `group` use the GPU now? Waiting and not capped out, or gave
        the token back less than quantum_min ago (idle or not: a busy client
        stalled between two launches looks idle; its request may follow)."""
        if not group.waiters and group.last_release <= now - self.config.quantum_min + _TIME_EPSILON:
            return False
        return not self._capped_out(group, self._usage(group, now), now)

    def _in_debt(self, group: _Group, usage: float, now: float, also_contending: _Group | None = None) -> bool:
        """Debt: the group is ahead of the pace of a contending group by more
        than its own fair slice minus half its work item. It waits (the GPU
        goes to the others) until paid back, so an overrun or a work item
        longer than a slice is paid back before it is served again, and its
        long-run share stays right whatever its kernels' length.
        `also_contending`: a group counted as contending whatever it does
        now (one about to ask, see preemptors)."""
        head = self._clients[next(iter(group.waiters))] if group.waiters else None
        if head is None or head.work_item < self.config.quantum_max:
            # Work that fits in slices is kept in proportion by the fair slice
            # alone; holding such a group back would only idle the GPU (and
            # delay a bursty group that used idle capacity before).
            return False
        fair = self._fair_slice(group, usage, now, contending_only=True, also_contending=also_contending)
        if fair is None:
            return False
        # Spacing: after a work item it waits item x (1 - f) / f (f: its
        # fraction of the contending requests), so its items are spread out;
        # the window alone lets them come in clumps that echo every window
        # (old items leave the window together, new ones replace them).
        if now < group.fair_pace_until - _TIME_EPSILON:
            return True
        return fair + 0.5 * head.work_item < -_TIME_EPSILON

    def _order_key(self, group: _Group, usage: float, now: float) -> tuple[int, int, float]:
        """(tier, -class, pace): tier 0 below request (window usage), 1 at or
        above it; pace is the group's virtual time (charged per unit of
        request while active), so the least-served group relative to what
        it asked for goes first (largest relative shortfall)."""
        return (0 if usage < group.request_usage else 1, -group.priority, self._vtime(group, now))

    def _candidate(self, now: float):
        """Best eligible waiting (group, usage, key), or None.

        Groups at their limit are skipped. A group in debt is served only
        when every eligible waiter is in debt and no group that is not in
        debt released less than quantum_min ago (its request may follow:
        the GPU waits that long for it rather than deepen the debt)."""
        best = best_free = None
        free = []
        for group in self._waiting_groups:
            usage = self._usage(group, now)
            if self._capped_out(group, usage, now):
                continue
            key = (*self._order_key(group, usage, now), next(iter(group.waiters.values())))
            if best is None or key < best[2]:
                best = (group, usage, key)
            if not self._in_debt(group, usage, now):
                free.append((group, usage, key))
                if best_free is None or key < best_free[2]:
                    best_free = (group, usage, key)
        if best_free is not None:
            return self._first_in_line(best_free, free)
        if best is None:
            return None
        # Only groups in debt are eligible. One whose item is long would hold
        # the GPU for that item; a waiter out of its cap's pause before the
        # item would end waits for it instead (the GPU idles at most until
        # then), so 1 s items do not come back to back past a capped group's
        # short pause.
        head = self._clients[next(iter(best[0].waiters))]
        if head.work_item >= self.config.quantum_max and self._waiter_eligible_within(now, head.work_item, best[0]):
            return None
        recent = now - self.config.quantum_min + _TIME_EPSILON
        for group in self._groups.values():
            if group.waiters or group.last_release <= recent:
                continue
            usage = self._usage(group, now)
            if not self._capped_out(group, usage, now) and not self._in_debt(group, usage, now):
                return None
        return best

    def _first_in_line(self, best, candidates):
        """Among `candidates` in best's tier and class whose pace is level
        with best's (ahead of it by less than quantum_min of their own
        request's time), the one waiting longest. Busy groups' paces differ
        by round-off and handoff jitter; ordered by pace alone they took
        turns in a new order every round (one group served twice, another
        skipped), and a 5 ms group's 1 s windows swung 23-37% around its
        30%. In turn, every group is served once a round; the fair slice's
        "ahead" term keeps their usage in proportion. A group behind by
        more than that (back from idle) still goes first."""
        key = best[2]
        chosen = best
        for candidate in candidates:
            other, _, other_key = candidate
            if other_key[:2] != key[:2] or other_key[3] >= chosen[2][3]:
                continue
            ahead = (other_key[2] - key[2]) * other.spec.request
            if ahead < self.config.quantum_min:
                chosen = candidate
        return chosen

    def _step(self, now: float, out: list[Decision]) -> list[Decision]:
        """Apply the time-driven rules at `now`: expiry, then grant or preemption."""
        holding = self._expire_due(now, out)
        if self._waiting_groups:
            if holding is None:
                self._grant(now, out)
            elif holding.leased:
                best = None if holding.revoked else self._candidate(now)
                if best is not None:
                    # The reason reaches the lessee: the group, never the waiting client's id.
                    waiter_group = best[0]
                    reason = f"lease taken back: a client of group {waiter_group.name!r} waits"
                    # A preemption by the rule a slice's follows (and `preemptors`
                    # publishes): a strictly higher class in a tier no worse.
                    outranks = self._outranks(waiter_group, best[2][0], holding.client.group,
                                              self._holder_key_tier(now, holding))
                    if outranks and self.config.preempt_handover:
                        # The waiter is granted now.
                        self.preemptions[holding.client.group.name] += 1
                        self._hand_over(now, holding, out, reason)
                    else:
                        self._revoke(now, holding, out, reason, lease_reclaim=not outranks)
            elif not holding.revoked and self._preempting_priority(holding):
                self._maybe_revoke(now, holding, out)
        self.decisions += len(out)
        return out

    def _expire_due(self, now: float, out: list[Decision]) -> _Holding | None:
        """Take the token back if its deadline passed; returns the holding left.
        A token handed over at a preemption and still not released within
        grace is charged grace more and reported (an Expire after_revoke)."""
        for client_id, (token_id, charged, due) in self._expired.items():
            if now >= due:
                grace = self.config.grace
                self._expired[client_id] = (token_id, charged + grace, math.inf)
                group = self._clients[client_id].group
                self._charge(group, due, grace)
                self.expiries[group.name] += 1
                out.append(Expire(client_id, token_id, grace, after_revoke=True))
        holding = self._holding
        if holding is not None and now >= holding.deadline:
            # A lease taken back is charged from the Revoke on (the client may
            # have resumed it); a slice, quantum + grace.
            start = holding.revoked_at if holding.leased else holding.grant_time
            charged = holding.deadline - start
            group = holding.client.group
            self._charge(group, holding.deadline, charged)
            self._holding = None
            self._expired[holding.client.client_id] = (holding.token_id, charged, math.inf)
            self.expiries[group.name] += 1
            out.append(Expire(holding.client.client_id, holding.token_id, charged))
            holding = None
        return holding

    def _grant(self, now: float, out: list[Decision]) -> None:
        best = self._candidate(now)
        if best is None:
            return
        group, usage, key = best
        client_id = next(iter(group.waiters))
        del group.waiters[client_id]
        if not group.waiters:
            del self._waiting_groups[group]
        holding = self._hold(self._clients[client_id], usage, now)
        # Its other waiters wait behind its own slice from now on.
        group.waiting_since = now if group.waiters else math.inf
        group.room_from = -math.inf
        out.append(Grant(client_id, holding.token_id, holding.quantum))
        if self._waiting_groups and self._preempting_priority(holding):
            self._maybe_revoke(now, holding, out)

    def _hold(self, client: _Client, usage: float, now: float) -> _Holding:
        """`client` holds a new token from `now` (its group's `usage` sizes the quantum)."""
        group = client.group
        if group.capped:
            # Smooth cap's tolerance: how late the group is served after its
            # pause ended while it waited (quantum_min at least: a timer, a
            # message). Another group's kernel that cannot be cut (1 s) may
            # hold the GPU meanwhile; the tolerance lets the group catch up
            # on back-to-back slices afterwards instead of losing that time
            # (a 30% cap with 1 ms kernels beside 1 s kernels got 2%). The
            # window still caps it over any 10 s.
            # A busy group (asked again within quantum_min of its release)
            # that is still catching up keeps its credit: its pace_until lags.
            # Not late while its own window had no room: a 30% cap with
            # items of 0.4-1.1 s, back from a window-long pause, was credited
            # the pause and ran its whole 3 s window back to back (2.9 s in
            # 3 s; found by hypothesis, test_scheduler_debt_and_caps.py).
            late = now - max(group.pace_until, group.waiting_since, group.room_from)
            busy = group.waiting_since <= group.last_release + self.config.quantum_min
            kept = group.pace_credit if busy and group.pace_until < now else 0.0
            group.pace_credit = min(self._window, max(self.config.quantum_min, late, kept))
        token_id = self._next_token
        self._next_token += 1
        self._holding = _Holding(client, token_id, now, self._grant_quantum(client, group, usage, now),
                                 self.config.grace)
        self.tokens_granted[group.name] += 1
        return self._holding

    def _fair_slice(self, granted: _Group, usage: float, now: float, contending_only: bool = False,
                    also_contending: _Group | None = None) -> float | None:
        """Slice length that keeps the active groups' usage proportional to
        their requests (None when no other group is active).

        With one busy client per group the token alternates between groups
        whatever the choice rule (the releasing client re-requests a moment
        after its release), so slice length is what sets the split: a
        group's fair slice is quantum_max scaled by its request over the
        largest request among active groups (stride scheduling), minus the
        time it is ahead of the pace of the furthest-behind active group
        (so overruns and early releases are paid back, and a group that
        fell behind catches up). Active = waiting, or released within the
        last quantum_max; with `contending_only`, groups that could use the
        GPU now (see _contending), and `also_contending`."""
        recent = now - self.config.quantum_max
        slowest_vtime = math.inf
        largest_request = granted.request_usage
        for group in self._groups.values():
            if group is granted:
                continue
            if contending_only:
                if group is not also_contending and not self._contending(group, now):
                    continue
            elif not group.waiters and group.last_active < recent:
                continue
            slowest_vtime = min(slowest_vtime, self._vtime(group, now))
            largest_request = max(largest_request, group.request_usage)
        if slowest_vtime == math.inf:
            return None
        ahead = (self._vtime(granted, now) - slowest_vtime) * granted.spec.request
        return self.config.quantum_max * granted.request_usage / largest_request - ahead

    def _preempting_priority(self, holding: _Holding) -> bool:
        """Cheap pre-check: does any waiting group outrank the holder's class?"""
        holder_priority = holding.client.group.priority
        for group in self._waiting_groups:
            if group.priority > holder_priority:
                return True
        return False

    def _holder_key_tier(self, now: float, holding: _Holding) -> int:
        group = holding.client.group
        return 0 if self._usage(group, now) < group.request_usage else 1

    @staticmethod
    def _outranks(group: _Group, tier: int, other: _Group, other_tier: int) -> bool:
        """Does `group` (in `tier`) come before `other` whatever their pace:
        a strictly higher class, in a tier no worse. A waiter that outranks
        the holder preempts it; a holder that outranks every waiter is
        renewed (it would be served first anyway, so its burst is not cut in
        two by a handoff and a new request)."""
        return group.priority > other.priority and tier <= other_tier

    def _maybe_revoke(self, now: float, holding: _Holding, out: list[Decision]) -> None:
        best = self._candidate(now)
        if best is None:
            return
        group, _, key = best
        holder_group = holding.client.group
        if not self._outranks(group, key[0], holder_group, self._holder_key_tier(now, holding)):
            return
        self.preemptions[holder_group.name] += 1
        # The reason reaches the preempted tenant: it names the group, never
        # the waiting client's id (a bearer credential).
        reason = (f"preempted by a waiting client of group {group.name!r} "
                  f"({Priority(group.priority).name} > {Priority(holder_group.priority).name})")
        if self.config.preempt_handover:
            self._hand_over(now, holding, out, reason)
        else:
            self._revoke(now, holding, out, reason)

    def _hand_over(self, now: float, holding: _Holding, out: list[Decision], reason: str) -> None:
        """Preempt without waiting for the holder: charge it up to now, take
        the token back (its release is still accepted and charges what it
        measured beyond, like a late release after an expiry), Revoke it and
        grant the waiter in the same step."""
        client = holding.client
        # A lease accrues nothing: the lessee's release charges the slice it
        # started on it, as measured.
        charged = 0.0 if holding.leased else max(0.0, now - holding.grant_time)
        self._charge(client.group, now, charged)
        client.group.last_release = now
        self._holding = None
        self._expired[client.client_id] = (holding.token_id, charged, now + self.config.grace)
        out.append(Revoke(client.client_id, holding.token_id, reason))
        self._grant(now, out)

    def _revoke(self, now: float, holding: _Holding, out: list[Decision], reason: str,
                lease_reclaim: bool = False) -> None:
        holding.revoked = True
        holding.revoked_at = now
        if holding.leased:
            holding.deadline = now + self.config.grace
        out.append(Revoke(holding.client.client_id, holding.token_id, reason, lease_reclaim))

    def next_wakeup(self) -> float | None:
        """Earliest time at which advance() could decide something; None if
        only an event can. Never later than needed; possibly earlier (then
        advance() decides nothing and the next wakeup lies strictly later)."""
        now = self._now
        holding = self._holding
        times: list[float] = []
        if holding is not None and holding.deadline < math.inf:
            times.append(holding.deadline)
        times.extend(due for _, _, due in self._expired.values() if due < math.inf)
        if self._waiting_groups:
            if holding is None or (holding.leased and not holding.revoked):
                # Token free (or leased) yet nobody served: every waiting group
                # is capped out or in debt; wake when one could be served.
                times.extend(self._unblock_times(now))
            elif not holding.revoked:
                times.extend(self._preemption_times(now, holding))
        return min(times) if times else None

    def _eligible_at(self, group: _Group, now: float) -> float | None:
        """When a waiting capped-out group comes out of its cap: room in the
        window (judged at its item's end) and its smooth-cap pause over;
        None if no room is in sight."""
        room = self._time_usage_reaches(group, group.cap - self._threshold(group), now)
        if room is None:
            return None
        return max(room - self._room_lookahead(group), group.pace_until, now)

    def _waiter_eligible_within(self, now: float, horizon: float, other_than: _Group) -> bool:
        """Does a waiting group other than `other_than`, capped out now,
        come out of its cap within `horizon`?"""
        for group in self._waiting_groups:
            if group is other_than or not self._capped_out(group, self._usage(group, now), now):
                continue
            moment = self._eligible_at(group, now)
            if moment is not None and moment < now + horizon:
                return True
        return False

    def _unblock_times(self, now: float) -> list[float]:
        """When could a waiting group stop being capped out or in debt? Room
        in the window, the end of a smooth-cap pause, or the moment a group
        that just released stops holding the GPU for itself."""
        if self._candidate(now) is not None:
            return [now]  # servable already (a query moved the clock without deciding)
        times = []
        in_debt = False
        for group in self._waiting_groups:
            if self._capped_out(group, self._usage(group, now), now):
                moment = self._eligible_at(group, now)
                if moment is not None:
                    times.append(moment)
            else:
                in_debt = True
        if in_debt:
            for group in self._groups.values():
                moment = group.last_release + self.config.quantum_min
                if moment > now:
                    times.append(moment)
        return times

    def _preemption_times(self, now: float, holding: _Holding) -> list[float]:
        """When could a waiting higher class come to preempt the holder? As
        the window slides, a capped group gains room, a group above its
        request drops into tier 0, and the holder's group rises into tier 1."""
        holder_group = holding.client.group
        holder_tier = self._holder_key_tier(now, holding)
        times = []
        above_request = False
        for group in self._waiting_groups:
            if group.priority <= holder_group.priority:
                continue
            usage = self._usage(group, now)
            threshold = self._threshold(group)
            if group.capped and now < group.pace_until - _TIME_EPSILON:
                moment = group.pace_until
            elif group.capped and group.cap - usage < threshold - _TIME_EPSILON:
                moment = self._time_usage_reaches(group, group.cap - threshold, now)
                if moment is not None:
                    moment = max(now, moment - self._room_lookahead(group))
            elif usage >= group.request_usage:
                moment = self._time_usage_reaches(group, group.request_usage - 1e-9, now)
                above_request = True
            else:
                continue  # tier 0 already: only events change what it may do
            if moment is not None:
                times.append(moment)
        if above_request and holder_tier == 0:
            # The holder's usage rises at most 1 s per s, so it cannot reach
            # its request before `shortfall` seconds; re-check then.
            shortfall = holder_group.request_usage - self._usage(holder_group, now)
            times.append(now + max(shortfall, self.config.quantum_min / 10))
        return times

    # ------------------------------------------------------------------ views

    def holder(self) -> tuple[str, int] | None:
        holding = self._holding
        return None if holding is None else (holding.client.client_id, holding.token_id)

    def last_time(self) -> float:
        """The latest `now` seen (later calls with earlier times are clamped to it)."""
        return self._now

    def holder_since(self) -> float | None:
        """Grant time of the current token (None when free)."""
        return None if self._holding is None else self._holding.grant_time

    def waiting(self) -> list[str]:
        """Waiting client ids in the order they would be served if nothing
        changed; groups waiting for room under their limit come last."""
        now = self._now
        ordered = []
        for group in self._waiting_groups:
            usage = self._usage(group, now)
            blocked = self._capped_out(group, usage, now)
            key = (2, -group.priority, usage) if blocked else self._order_key(group, usage, now)
            for client_id, sequence in group.waiters.items():
                ordered.append((key, sequence, client_id))
        ordered.sort()
        return [client_id for _, _, client_id in ordered]

    def preemptors(self, now: float) -> frozenset[str]:
        """Groups a client of which, asking at `now`, would preempt the
        current holder: not waiting yet, strictly higher class and a tier no
        worse than the holder's group, not capped out, and ahead of every
        group already waiting that is not in debt once it asks (it then
        contends: a waiter with long work items may fall into debt).
        Published on the preemption doorbell (tokend/preempt_doorbell.py)
        so such a client can tell the holder to stop before the Revoke
        reaches it. Exact, as of the latest event, for a client that
        reports no work item of quantum_max or more (debt) in an uncapped
        group; for others a hint (a ring tokend does not follow costs the
        holder one bounded pause)."""
        holding = self._holding
        if holding is None or holding.revoked or not self._groups:
            return frozenset()
        holder_group = holding.client.group
        higher = [group for group in self._groups.values()
                  if group.priority > holder_group.priority and not group.waiters and group.clients]
        if not higher:
            return frozenset()
        now = self._clock(now)
        if now >= holding.deadline - _TIME_EPSILON:
            return frozenset()  # the next event expires it: nobody preempts
        holder_tier = self._holder_key_tier(now, holding)
        queued = []  # waiters that could be served now: (group, usage, key)
        for group in self._waiting_groups:
            usage = self._usage(group, now)
            if not self._capped_out(group, usage, now):
                queued.append((group, usage, self._order_key(group, usage, now)))
        found = []
        for group in higher:
            usage = self._usage(group, now)
            if group.capped and (group.cap - usage < self.config.quantum_min - _TIME_EPSILON
                                 or now < group.pace_until - _TIME_EPSILON):
                continue
            key = self._order_key(group, usage, now)
            if not self._outranks(group, key[0], holder_group, holder_tier):
                continue
            if any(other_key <= key and not self._in_debt(other, other_usage, now, also_contending=group)
                   for other, other_usage, other_key in queued):
                continue  # a waiter already queued (so first on equal keys) is served first
            found.append(group.name)
        return frozenset(found)

    def _note_arrival(self, group: _Group, now: float) -> None:
        """A request of a group none of whose clients waits or holds: an
        arrival, kept when it follows an idle release (a group that came
        back from a preemption or an expiry was busy, not periodic)."""
        if group.idle_since is None:
            group.arrivals.clear()
            group.think_gaps.clear()
        else:
            group.arrivals.append(now)
            group.think_gaps.append(now - group.idle_since)
        group.idle_since = None

    @staticmethod
    def _expected_arrival(group: _Group) -> tuple[float, float] | None:
        """(earliest, latest) time of the group's next arrival while it is
        idle: after its last arrival by its recent periods (open loop), or
        after its idle release by its recent think gaps (closed loop),
        whichever agree within _PERIODIC_SPREAD, the tighter if both; else None."""
        arrivals, gaps = group.arrivals, group.think_gaps
        if group.idle_since is None or len(arrivals) < _ARRIVALS:
            return None  # both shapes need as many arrivals since the count restarted
        periods = [later - earlier for earlier, later in zip(arrivals, list(arrivals)[1:])]
        windows = [  # (spread, start, end): opening half the spread before the shortest (module docstring)
            (max(periods) - min(periods), arrivals[-1] + min(periods) - (max(periods) - min(periods)) / 2,
             arrivals[-1] + max(periods) + _EXPECTED_SLACK),
            (max(gaps) - min(gaps), group.idle_since + min(gaps) - (max(gaps) - min(gaps)) / 2,
             group.idle_since + max(gaps) + _EXPECTED_SLACK),
        ]
        regular = [w for w in windows if w[0] <= _PERIODIC_SPREAD]
        if not regular:
            return None
        _, start, end = min(regular, key=lambda w: w[0])
        return start, end

    def expected_preemption(self, now: float, preemptors: frozenset[str] | None = None) -> tuple[float, float] | None:
        """The earliest window ``(start, end)`` in which a periodic group
        that would preempt the current holder (``preemptors``) is expected
        to ask, if one ends after `now`; else None. Published on the
        preemption doorbell: the holder starts no long kernel that would
        still run at ``start`` before ``end`` has passed (a hint, like the
        flags: see the module docstring, Anticipation). `preemptors`: what
        ``preemptors(now)`` just returned, if the caller has it."""
        if not self.config.anticipate_preemption:
            return None
        best = None
        for name in self.preemptors(now) if preemptors is None else preemptors:
            window = self._expected_arrival(self._groups[name])
            if window is not None and window[1] > self._now and (best is None or window[0] < best[0]):
                best = window
        return best

    def holder_outranks_waiters(self, now: float) -> bool:
        """Does the holder (a slice, not a lease) outrank every group waiting
        that could be served (a strictly higher class, in a tier no worse)?
        Then it is renewed past them and none preempts it: what it queues
        delays nobody it would not delay anyway. Published on the doorbell
        page; a holder that outranks every waiter does not pace its
        launches (a high-priority burst paced beside a low-priority waiter
        came out 2x slower at p99 on the simulated GPU)."""
        holding = self._holding
        if holding is None or holding.leased:
            return False
        now = self._clock(now)
        group = holding.client.group
        if not any(other is not group for other in self._waiting_groups):
            return False
        best = self._candidate(now)
        return best is None or self._outranks(group, self._holder_key_tier(now, holding), best[0], best[2][0])

    def holder_alone(self) -> bool:
        """Is the holder the only client attached, in a group without a
        limit? Nobody can then wait behind what it queues: published on the
        doorbell page, its shim keeps more queued (hook/queue_bound.c), as
        the driver does bare, so that a stall of its launching thread does
        not idle the GPU. A second client attaching clears it, before that
        client's first launch."""
        holding = self._holding
        return holding is not None and len(self._clients) == 1 and not holding.client.group.capped

    def next_on_release(self, now: float) -> str | None:
        """The waiter granted if the holder released now: the first in line
        of the group served next (None: nobody holds, or nobody would be
        granted). Published on the doorbell page: at the holder's handback
        that waiter starts before its grant (hook/gate_handback.c), a hint
        like the flags: a later event may pick another, whose provisional
        slice then waits out its bound."""
        if self._holding is None:
            return None
        best = self._candidate(self._clock(now))
        return None if best is None else next(iter(best[0].waiters))

    def others_waiting(self) -> bool:
        """Does a client of a group other than the holder's wait (any waiter
        when the token is free)?"""
        holder_group = self._holding.client.group if self._holding is not None else None
        return any(group is not holder_group for group in self._waiting_groups)

    def is_waiting(self, client_id: str) -> bool:
        return client_id in self._client(client_id).group.waiters

    def usage(self, group: str, now: float) -> float:
        target = self._group(group)
        return self._usage(target, self._clock(now))

    def charged_seconds(self, group: str, now: float) -> float:
        """GPU time charged to `group` since it was created, the holder's
        slice so far included (up to its deadline, like usage)."""
        target = self._group(group)
        now = self._clock(now)
        total = self.charged_total[target.name]
        holding = self._holding
        if holding is not None and holding.client.group is target and not holding.leased:
            total += max(0.0, min(now, holding.deadline) - holding.grant_time)
        return total

    def share(self, group: str, now: float) -> float:
        return self.usage(group, now) / self._window

    def accounting(self, group: str, now: float) -> GroupAccounting:
        """`group`'s charges, for the next daemon (restore_accounting). The
        holder's slice so far is not in it: a daemon stops after its clients
        are detached, which charges them."""
        target = self._group(group)
        self._usage(target, self._clock(now))  # drops what left the window
        return GroupAccounting(tuple((start, end, point) for start, end, point in target.intervals),
                               target.pace_until, self.charged_total[target.name],
                               self.tokens_granted[target.name], self.preemptions[target.name],
                               self.expiries[target.name])

    def restore_accounting(self, group: str, accounting: GroupAccounting, now: float) -> None:
        """Carry a previous daemon's charges over to `group`, just added and
        not yet charged: its window usage, smooth-cap pace and counters go on
        where they stopped, so a cap holds across a restart and counters keep
        counting since the group was created. Times are this clock's (the
        same boot); intervals must be sorted, disjoint and not after `now`."""
        target = self._group(group)
        now = self._clock(now)
        if target.intervals or self.charged_total[target.name] or target.clients:
            raise FailedPrecondition(f"group {group!r} already has charges or clients: restore only a new group")
        previous_end = -math.inf
        for interval in accounting.intervals:
            start, end, point = interval
            if not all(_is_real(v) and math.isfinite(v) for v in interval) or not (
                    previous_end <= start <= end <= now and point >= 0.0):
                raise InvalidArgument(f"interval {interval!r} of group {group!r} is invalid: expected finite "
                                      f"start <= end <= now ({now:g}), after the previous one, point >= 0")
            previous_end = end
        counters = (accounting.tokens_granted, accounting.preemptions, accounting.expiries)
        if not all(isinstance(c, int) and c >= 0 for c in counters) or not (
                _is_real(accounting.charged_total) and math.isfinite(accounting.charged_total)
                and accounting.charged_total >= 0.0) or not _is_real(accounting.pace_until) or math.isnan(
                accounting.pace_until):
            raise InvalidArgument(f"counters {accounting!r} of group {group!r} are invalid: expected counts >= 0 "
                                  "and finite seconds >= 0")
        target.intervals.extend([start, end, point] for start, end, point in accounting.intervals)
        target.charged = sum(end - start + point for start, end, point in accounting.intervals)
        if accounting.intervals:
            target.last_active = max(target.last_active, accounting.intervals[-1][1])
        target.pace_until = max(target.pace_until, min(accounting.pace_until, now + self._window))
        self.charged_total[target.name] = accounting.charged_total
        self.tokens_granted[target.name] = accounting.tokens_granted
        self.preemptions[target.name] = accounting.preemptions
        self.expiries[target.name] = accounting.expiries

    def busy_fraction(self, now: float) -> float:
        """Charged time of all live groups over the window / window (at most 1)."""
        now = self._clock(now)
        total = sum(self._usage(group, now) for group in self._groups.values())
        return min(1.0, total / self._window)

    def client_group(self, client_id: str) -> str:
        return self._client(client_id).group.name

    def client_quantum(self, client_id: str) -> float:
        """The quantum this client would be granted now, before any cap by its group's room."""
        return self._client(client_id).quantum

    def clients(self) -> list[str]:
        return sorted(self._clients)

    def group_clients(self, name: str) -> list[str]:
        return sorted(self._group(name).clients)

    def group_waiting(self, name: str) -> int:
        return len(self._group(name).waiters)
