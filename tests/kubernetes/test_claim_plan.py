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
    """The claim's only plan (None when none is ours)."""
    plans = plan_claim(claim, claim["metadata"]["uid"], "gslice.dev", "node-a", GPUS)
    assert len(plans) <= 1
    return plans[0] if plans else None


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
    assert plan_claim(claim, claim["metadata"]["uid"], "gslice.dev", "node-a", GPUS) == []
    claim = InMemoryCluster().allocate_claim("c", "node-a", "gpu-0", driver="other.example.com")
    assert _plan(claim) is None


def test_each_gslice_device_of_a_claim_gets_its_own_group():
    claim = InMemoryCluster().allocate_claim("c", "node-a", "gpu-0", compute="200", memory="1Gi",
                                             claim_config={**CONFIG, "limit": "50%"})
    results = claim["status"]["allocation"]["devices"]["results"]
    results.append({**results[0], "request": "second", "consumedCapacity": {"compute": "400", "memory": "2Gi"}})
    uid = claim["metadata"]["uid"]
    first, second = plan_claim(claim, uid, "gslice.dev", "node-a", GPUS)
    assert (first.group, first.cdi_name, first.request, first.limit) == (f"k8s-{uid}-0", f"{uid}-0", 0.2, 0.5)
    # the claim config names request "gpu" only: "second" keeps limit = request
    assert (second.group, second.cdi_name, second.request, second.limit) == (f"k8s-{uid}-1", f"{uid}-1", 0.4, 0.4)
    assert second.labels["gslice.dev/request"] == "second"


@pytest.mark.parametrize("config,message", [
    ({**CONFIG, "limit": "abc"}, "limit 'abc' is invalid"),
    ({"apiVersion": "other/v1", "kind": "GroupConfig"}, "not understood"),
    ({**CONFIG, "memory": "1Gi"}, "memory not allowed"),
])
def test_bad_claim_configs_say_what_is_wrong(config, message):
    claim = InMemoryCluster().allocate_claim("c", "node-a", "gpu-0", claim_config=config)
    with pytest.raises(PlanError, match=message):
        _plan(claim)

