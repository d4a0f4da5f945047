"""Simulated workloads around the scheduler on a fake clock: achieved shares,
caps and preemption latency over 60 s of simulated time (well under a
second of real time each)."""
from __future__ import annotations

import dataclasses

import pytest

from gslice.tokend.scheduler import GroupSpec, Priority, Scheduler, SchedulerConfig
try:  # tests/unit is a rootdir-style test directory (no __init__.py) ...
    from scheduler_sim import ClientBehaviour, simulate
except ImportError:  # ... unless someone makes it a package
    from .scheduler_sim import ClientBehaviour, simulate

CONFIG = SchedulerConfig(window=10.0, quantum_min=0.005, quantum_max=0.100, grace=0.200)
SIM_END = 60.0
WARM_UP = 10.0  # one window


def run_busy(requests, limits=None, clients_per_group=1):
    s = Scheduler(CONFIG)
    limits = limits or [1.0] * len(requests)
    behaviours = {}
    for i, (request, limit) in enumerate(zip(requests, limits)):
        s.add_group(GroupSpec(f"g{i}", request, limit, 1 << 30), 0.0)
        for k in range(clients_per_group):
            behaviours[f"g{i}-c{k}"] = ClientBehaviour(group=f"g{i}", first_request=0.001 * k)
    result = simulate(s, behaviours, SIM_END)
    shares = [result.held_between(f"g{i}", WARM_UP, SIM_END) / (SIM_END - WARM_UP) for i in range(len(requests))]
    return s, result, shares


@pytest.mark.parametrize("requests", [(0.3, 0.7), (0.1, 0.9), (0.1, 0.2, 0.3, 0.4)])
@pytest.mark.parametrize("clients_per_group", [1, 3])
def test_busy_groups_get_their_requests_within_one_point(requests, clients_per_group):
    _, _, shares = run_busy(requests, clients_per_group=clients_per_group)
    for share, request in zip(shares, requests):
        assert share == pytest.approx(request, abs=0.01), shares
    assert sum(shares) == pytest.approx(1.0, abs=0.01)  # never idle while someone waits


def test_lone_group_with_small_request_gets_the_whole_gpu():
    _, _, [share] = run_busy([0.3], [1.0])
    assert share >= 0.99


def test_lone_group_is_capped_at_its_limit():
    s, result, [share] = run_busy([0.3], [0.3])
    one_quantum = CONFIG.quantum_max / CONFIG.window
    assert share <= 0.3 + one_quantum
    assert share >= 0.3 - one_quantum
    # Over every full window, not just on average.
    t = CONFIG.window
    while t <= SIM_END:
        assert result.held_between("g0", t - CONFIG.window, t) <= 0.3 * CONFIG.window + CONFIG.quantum_max
        t += 0.5


def test_spare_capacity_is_split_in_proportion_to_requests():
    # Requests sum to 0.4; the remaining 0.6 is split like the requests (weighted fair share).
    _, _, shares = run_busy([0.1, 0.3])
    assert shares[0] == pytest.approx(0.25, abs=0.02)
    assert shares[1] == pytest.approx(0.75, abs=0.02)


def test_capped_group_leaves_its_excess_to_others():
    _, _, shares = run_busy([0.2, 0.2], [0.25, 1.0])
    # The capped group gets its limit, not less; the other gets the rest.
    assert shares[0] == pytest.approx(0.25, abs=0.01), shares
    assert shares[1] == pytest.approx(0.75, abs=0.01), shares


@pytest.mark.parametrize("preempt_handover", [True, False])
def test_bursty_high_priority_client_waits_at_most_one_low_quantum(preempt_handover):
    # Waits far under one low quantum (quantum_max): with the handover the
    # high client is granted in the Revoke's own step (no wait at all);
    # without it, at the low holder's release, revoke_delay later.
    revoke_delay = 0.002
    s = Scheduler(dataclasses.replace(CONFIG, preempt_handover=preempt_handover))
    s.add_group(GroupSpec("hi", 0.2, 1.0, 1 << 30, Priority.HIGH), 0.0)
    s.add_group(GroupSpec("lo", 0.8, 1.0, 1 << 30, Priority.LOW), 0.0)
    behaviours = {
        "h": ClientBehaviour("hi", busy=False, burst=0.010, period=0.37, first_request=0.05),
        # The low clients give the token back at their next launch, 2 ms later.
        "l1": ClientBehaviour("lo", revoke_delay=revoke_delay),
        "l2": ClientBehaviour("lo", revoke_delay=revoke_delay),
    }
    result = simulate(s, behaviours, SIM_END)
    waits = [wait for _, wait in result.waits["h"]]
    assert len(waits) > 100
    expected_wait = 0.0 if preempt_handover else revoke_delay
    assert max(waits) == pytest.approx(expected_wait, abs=1e-6), max(waits)
    assert s.preemptions["lo"] >= len(waits) * 0.9
    # The low group still gets what the high one leaves.
    assert result.held_between("lo", WARM_UP, SIM_END) / (SIM_END - WARM_UP) >= 0.95


def test_tokens_of_a_client_that_never_releases_expire_and_the_others_keep_running():
    s = Scheduler(CONFIG)
    s.add_group(GroupSpec("stuck", 0.5, 1.0, 1 << 30), 0.0)
    s.add_group(GroupSpec("good", 0.5, 1.0, 1 << 30), 0.0)
    behaviours = {
        "stuck1": ClientBehaviour("stuck", ignores_tokens=True),
        "good1": ClientBehaviour("good"),
    }
    result = simulate(s, behaviours, SIM_END)
    assert s.expiries["stuck"] > 50
    waits = [wait for _, wait in result.waits["good1"]]
    assert max(waits) <= CONFIG.quantum_max + CONFIG.grace + 1e-9
    # The token alternates; each expired turn costs at least quantum_min +
    # grace, each good turn is one quantum: the good group keeps that ratio.
    good = result.held_between("good", WARM_UP, SIM_END) / (SIM_END - WARM_UP)
    floor = CONFIG.quantum_max / (CONFIG.quantum_max + CONFIG.quantum_max + CONFIG.grace)
    assert good >= floor - 0.01
