"""From a claim's allocation to the group it needs, and the opaque configs."""
from __future__ import annotations

from pathlib import Path

import pytest

from gslice.client import Priority
from gslice.kubernetes.claim_plan import PlanError, plan_claim
from gslice.kubernetes.fake_cluster import InMemoryCluster
from gslice.kubernetes.tokends import GpuTokend

GiB = 1024**3
GPU = GpuTokend(index=0, uuid="GPU-a", product_name="sim", memory_total=16 * GiB,
                admin_socket=Path("/run/gslice/gpu0/admin.sock"), client_socket=Path("/run/gslice/gpu0/client/client.sock"))
GPUS = {"gpu-0": GPU}
CONFIG = {"apiVersion": "gslice.dev/v1alpha1", "kind": "GroupConfig"}


def _plan(claim):
    return plan_claim(claim, claim["metadata"]["uid"], "gslice.dev", "node-a", GPUS)


def test_consumed_capacity_and_configs_become_the_group():
    claim = InMemoryCluster().allocate_claim("c", "node-a", "gpu-0", compute="250", memory="3Gi",
                                             class_config={**CONFIG, "priority": "low", "limit": "40%"},
                                             claim_config={**CONFIG, "limit": "90%"})
    plan = _plan(claim)
    assert (plan.request, plan.limit, plan.memory, plan.priority) == (0.25, 0.9, 3 * GiB, Priority.LOW)
    assert plan.group == "k8s-" + claim["metadata"]["uid"]


def test_class_limit_applies_when_the_claim_sets_none():
    claim = InMemoryCluster().allocate_claim("c", "node-a", "gpu-0", compute="250", memory="3Gi",
                                             class_config={**CONFIG, "limit": "40%"})
    assert _plan(claim).limit == 0.4


def test_without_consumed_capacity_the_group_gets_the_whole_gpu():
    claim = InMemoryCluster().allocate_claim("c", "node-a", "gpu-0", compute=None, memory=None)
    plan = _plan(claim)
    assert (plan.request, plan.limit, plan.memory) == (1.0, 1.0, 16 * GiB)


def test_other_nodes_and_drivers_are_not_ours():
    claim = InMemoryCluster().allocate_claim("c", "node-b", "gpu-0")
    assert plan_claim(claim, claim["metadata"]["uid"], "gslice.dev", "node-a", GPUS) is None
    claim = InMemoryCluster().allocate_claim("c", "node-a", "gpu-0", driver="other.example.com")
    assert _plan(claim) is None


def test_two_gslice_devices_in_one_claim_are_refused():
    claim = InMemoryCluster().allocate_claim("c", "node-a", "gpu-0")
    results = claim["status"]["allocation"]["devices"]["results"]
    results.append({**results[0], "request": "second"})
    with pytest.raises(PlanError, match="one gslice group only"):
        _plan(claim)


@pytest.mark.parametrize("config,message", [
    ({**CONFIG, "limit": "abc"}, "limit 'abc' is invalid"),
    ({"apiVersion": "other/v1", "kind": "GroupConfig"}, "not understood"),
    ({**CONFIG, "memory": "1Gi"}, "memory not allowed"),
])
def test_bad_claim_configs_say_what_is_wrong(config, message):
    claim = InMemoryCluster().allocate_claim("c", "node-a", "gpu-0", claim_config=config)
    with pytest.raises(PlanError, match=message):
        _plan(claim)

