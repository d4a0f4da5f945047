"""The API server stores a ResourceSlice's quantities in canonical form
("1000" comes back "1k", "16384Mi" comes back "16Gi") and drops fields behind
disabled feature gates (allowMultipleAllocations, requestPolicy without
DRAConsumableCapacity). Publishing the same GPUs again must see no change:
otherwise every round replaces the slice and raises the pool's generation
forever. A real change is still written."""
from __future__ import annotations

from pathlib import Path

import pytest

from gslice.kubernetes import resource_slices
from gslice.kubernetes.fake_cluster import InMemoryCluster

GiB = 1024**3
DRIVER, NODE = "gslice.dev", "node-a"


def _gpu(memory: int):
    from gslice.kubernetes.tokends import GpuTokend
    return GpuTokend(index=0, uuid="GPU-a", product_name="sim", memory_total=memory,
                     admin_socket=Path("/run/gslice/gpu0/admin.sock"),
                     client_socket=Path("/run/gslice/gpu0/client/client.sock"))


def _published(cluster: InMemoryCluster) -> dict:
    [published] = cluster.list_slices(DRIVER, NODE)
    return published


@pytest.mark.parametrize("consumable_capacity", [True, False], ids=["all-gates", "no-consumable-capacity"])
def test_the_same_gpus_do_not_rewrite_the_slice(consumable_capacity):
    cluster = InMemoryCluster(consumable_capacity=consumable_capacity)
    resource_slices.publish(cluster, DRIVER, NODE, [_gpu(16 * GiB)], 0)
    stored = _published(cluster)
    capacity = stored["spec"]["devices"][0]["capacity"]
    # The fake stores what the API server would: the test reproduces the bug.
    assert (capacity["compute"]["value"], capacity["memory"]["value"]) == ("1k", "16Gi")
    assert ("requestPolicy" in capacity["compute"]) is consumable_capacity
    for _ in range(3):
        resource_slices.publish(cluster, DRIVER, NODE, [_gpu(16 * GiB)], 0)
    again = _published(cluster)
    assert again["spec"]["pool"]["generation"] == 1
    assert again["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"], "the slice was rewritten"


@pytest.mark.parametrize("consumable_capacity", [True, False], ids=["all-gates", "no-consumable-capacity"])
def test_a_changed_gpu_still_rewrites_the_slice(consumable_capacity):
    cluster = InMemoryCluster(consumable_capacity=consumable_capacity)
    resource_slices.publish(cluster, DRIVER, NODE, [_gpu(16 * GiB)], 0)
    resource_slices.publish(cluster, DRIVER, NODE, [_gpu(80 * GiB)], 0)
    again = _published(cluster)
    assert again["spec"]["pool"]["generation"] == 2
    assert again["spec"]["devices"][0]["capacity"]["memory"]["value"] == "80Gi"


def test_quantities_compare_by_value_and_only_under_capacity():
    wanted = [resource_slices.device_entry(_gpu(16 * GiB), 0)]
    same = [resource_slices.device_entry(_gpu(16 * GiB), 0)]
    same[0]["capacity"]["memory"]["value"] = "16Gi"
    same[0]["capacity"]["compute"]["requestPolicy"]["validRange"]["max"] = "1k"
    assert resource_slices._same_devices(same, wanted)
    other = [resource_slices.device_entry(_gpu(16 * GiB), 0)]
    other[0]["capacity"]["compute"]["requestPolicy"]["validRange"]["step"] = "20"
    assert not resource_slices._same_devices(other, wanted)
    renamed = [resource_slices.device_entry(_gpu(16 * GiB), 0)]
    renamed[0]["attributes"]["productName"] = {"string": "simulated"}
    assert not resource_slices._same_devices(renamed, wanted)
