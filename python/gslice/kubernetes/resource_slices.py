"""The node's ResourceSlice: one device per GPU, shareable
(allowMultipleAllocations, KEP-5075 consumable capacity) with two capacities
the scheduler keeps within bounds across all claims on the device:

  compute  per mille of the GPU's time (1000 = the whole GPU): the group's request
  memory   the GPU's memory minus a reserve: the group's memory quota

A claim that names no capacity gets the request policy's default: the whole
GPU. The pool is the node's; its generation goes up whenever the devices change."""
from __future__ import annotations

import logging
import re

from .cluster_api import ClusterApi
from .tokends import GpuTokend

log = logging.getLogger("gslice.dra")

COMPUTE_TOTAL = 1000  # per mille
COMPUTE_STEP = 10     # 1% of the GPU
MEMORY_STEP = 256 * 1024**2
MiB = 1024**2


def _mebibytes(value: int) -> str:
    return f"{value // MiB}Mi"


def device_entry(gpu: GpuTokend, memory_reserve: int) -> dict:
    # A whole number of steps, so that the default (all of it) is a valid request.
    memory = max(0, gpu.memory_total - memory_reserve)
    memory = memory - memory % MEMORY_STEP
    return {
        "name": gpu.device_name,
        "allowMultipleAllocations": True,
        "attributes": {
            "uuid": {"string": gpu.uuid},
            "productName": {"string": gpu.product_name[:64]},
            "index": {"int": gpu.index},
        },
        "capacity": {
            "compute": {"value": str(COMPUTE_TOTAL), "requestPolicy": {
                "default": str(COMPUTE_TOTAL),
                "validRange": {"min": str(COMPUTE_STEP), "max": str(COMPUTE_TOTAL), "step": str(COMPUTE_STEP)}}},
            "memory": {"value": _mebibytes(memory), "requestPolicy": {
                "default": _mebibytes(memory),
                "validRange": {"min": _mebibytes(MEMORY_STEP), "step": _mebibytes(MEMORY_STEP)}}},
        },
    }


def slice_name(driver: str, node: str) -> str:
    """A DNS subdomain from the node and driver names (both DNS subdomains)."""
    return re.sub(r"[^a-z0-9.-]", "-", f"{node}-{driver}".lower())[:253].strip("-.")


def build_slice(driver: str, node: str, gpus: list[GpuTokend], memory_reserve: int, generation: int,
                node_uid: str | None = None) -> dict:
    metadata = {"name": slice_name(driver, node)}
    if node_uid:
        # Owned by the Node: deleting the Node deletes its slice.
        metadata["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid,
                                        "controller": True}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": metadata,
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": [device_entry(gpu, memory_reserve) for gpu in gpus],
        },
    }


def _same_devices(current: list[dict], wanted: list[dict]) -> bool:
    """Whether the published devices already say what we would write, as the
    API server stores it (otherwise every round would replace the slice and
    raise the pool's generation forever):
      - capacity quantities compare by value: the server keeps the canonical
        form ("1000" comes back "1k", "39936Mi" comes back "39Gi");
      - a field of ours the server does not have is no difference: it drops
        fields behind disabled feature gates (allowMultipleAllocations,
        requestPolicy without DRAConsumableCapacity), and writing them again
        would not bring them back;
      - fields the server adds on its own are not ours to compare."""
    return len(current) == len(wanted) and all(_same(have, want) for have, want in zip(current, wanted))


def _same(have, want, quantities: bool = False) -> bool:
    if isinstance(want, dict):
        return isinstance(have, dict) and all(
            key not in have or _same(have[key], value, quantities or key == "capacity")
            for key, value in want.items())
    if isinstance(want, list):
        return isinstance(have, list) and len(have) == len(want) and all(
            _same(h, w, quantities) for h, w in zip(have, want))
    if quantities and isinstance(want, str) and isinstance(have, str):
        from kubernetes.utils.quantity import parse_quantity  # imported where used, as in claim_plan
        try:
            return parse_quantity(have) == parse_quantity(want)
        except ValueError:  # not a quantity after all: compare as written
            pass
    return have == want


def publish(api: ClusterApi, driver: str, node: str, gpus: list[GpuTokend], memory_reserve: int) -> dict | None:
    """Make the API server's slices for this node say what `gpus` are: one
    slice, replaced only when its devices changed (generation + 1); other
    slices of this driver on this node are deleted. With no GPU, no slice."""
    existing = api.list_slices(driver, node)
    name = slice_name(driver, node)
    current = next((s for s in existing if s["metadata"]["name"] == name), None)
    for stale in existing:
        if stale is not current:
            api.delete_slice(stale["metadata"]["name"])
    if not gpus:
        if current is not None:
            api.delete_slice(name)
        return None
    devices = [device_entry(gpu, memory_reserve) for gpu in gpus]
    if current is None:
        body = build_slice(driver, node, gpus, memory_reserve, generation=1, node_uid=api.node_uid(node))
        log.info("publishing ResourceSlice %s with %d GPU(s)", name, len(gpus))
        return api.create_slice(body)
    if _same_devices(current["spec"].get("devices") or [], devices):
        return current
    generation = int(current["spec"]["pool"].get("generation", 0)) + 1
    body = build_slice(driver, node, gpus, memory_reserve, generation)
    body["metadata"] = {**current["metadata"], "name": name}  # keeps owner and resourceVersion
    log.info("updating ResourceSlice %s: %d GPU(s), pool generation %d", name, len(gpus), generation)
    return api.replace_slice(name, body)
