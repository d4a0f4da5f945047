"""An in-memory API server for tests: ResourceClaims (with the allocation the
scheduler would have written) and ResourceSlices, behind the ClusterApi
interface of cluster_api.py."""
from __future__ import annotations

import copy
import threading
import uuid

from . import DRIVER_NAME
from .cluster_api import ApiUnavailable


_BINARY = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
_DECIMAL = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}


def canonical_quantity(text: str) -> str:
    """A quantity as the API server stores it (resource.Quantity's canonical
    form): binary suffixes stay binary with the largest power of 1024 that
    keeps the number whole ("39936Mi" -> "39Gi"), other values take the
    largest decimal SI suffix that keeps it whole ("1000" -> "1k"). Enough
    for the quantities this plugin writes (no exponents)."""
    from kubernetes.utils.quantity import parse_quantity
    value = parse_quantity(text)
    if value == 0:
        return "0"
    if text.rstrip("0123456789.").endswith("i") and value == int(value) and abs(value) >= 1024:
        power = max(p for p in range(len(_BINARY)) if value % 1024**p == 0)
        return f"{int(value // 1024**power)}{_BINARY[power]}"
    for exponent in sorted(_DECIMAL, reverse=True):
        mantissa = value.scaleb(-exponent)
        if mantissa == int(mantissa):
            return f"{int(mantissa)}{_DECIMAL[exponent]}"
    return text


def _as_stored(value, quantities: bool = False):
    """What the API server keeps of a ResourceSlice body: capacity quantities canonical."""
    if isinstance(value, dict):
        return {k: _as_stored(v, quantities or k == "capacity") for k, v in value.items()}
    if isinstance(value, list):
        return [_as_stored(v, quantities) for v in value]
    return canonical_quantity(value) if quantities and isinstance(value, str) else value


def _drop_consumable_capacity(body: dict) -> None:
    """What the API server drops without the DRAConsumableCapacity feature gate."""
    for device in body.get("spec", {}).get("devices") or []:
        device.pop("allowMultipleAllocations", None)
        for capacity in (device.get("capacity") or {}).values():
            capacity.pop("requestPolicy", None)


class InMemoryCluster:
    def __init__(self, consumable_capacity: bool = True):
        self._lock = threading.Lock()
        # False: as an API server without the DRAConsumableCapacity feature gate.
        self.consumable_capacity = consumable_capacity
        self.claims: dict[tuple[str, str], dict] = {}
        self.slices: dict[str, dict] = {}
        self.nodes: dict[str, str] = {}  # name -> uid; unknown names get one on first look
        self.unavailable = False  # True: every call raises ApiUnavailable
        self._version = 0

    def _check(self) -> None:
        if self.unavailable:
            raise ApiUnavailable("API server unreachable (test switch)")

    def _next_version(self) -> str:
        self._version += 1
        return str(self._version)

    # -- what the scheduler would do
    def allocate_claim(self, name: str, node: str, device: str, *, namespace: str = "default",
                       compute: str | None = "300", memory: str | None = "8Gi", request: str = "gpu",
                       class_config: dict | None = None, claim_config: dict | None = None,
                       pods: tuple[str, ...] = ("trainer",), driver: str = DRIVER_NAME) -> dict:
        """A claim allocated on `device` of `node`'s pool, reserved for `pods`."""
        consumed = {}
        if compute is not None:
            consumed["compute"] = compute
        if memory is not None:
            consumed["memory"] = memory
        result = {"request": request, "driver": driver, "pool": node, "device": device,
                  "shareID": str(uuid.uuid4())}
        if consumed:
            result["consumedCapacity"] = consumed
        configs = []
        for source, params in (("FromClass", class_config), ("FromClaim", claim_config)):
            if params is not None:
                configs.append({"source": source, "requests": [request],
                                "opaque": {"driver": driver, "parameters": params}})
        claim = {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace, "uid": str(uuid.uuid4())},
            "spec": {"devices": {"requests": [{"name": request, "exactly": {"deviceClassName": "gpu.gslice.dev"}}]}},
            "status": {
                "allocation": {"devices": {"results": [result], "config": configs}},
                "reservedFor": [{"resource": "pods", "name": pod, "uid": str(uuid.uuid4())} for pod in pods],
            },
        }
        with self._lock:
            claim["metadata"]["resourceVersion"] = self._next_version()
            self.claims[(namespace, name)] = claim
        return copy.deepcopy(claim)

    def delete_claim(self, name: str, namespace: str = "default") -> None:
        with self._lock:
            del self.claims[(namespace, name)]

    # -- ClusterApi
    def read_claim(self, namespace: str, name: str) -> dict | None:
        self._check()
        with self._lock:
            claim = self.claims.get((namespace, name))
            return copy.deepcopy(claim) if claim is not None else None

    def node_uid(self, node: str) -> str | None:
        self._check()
        with self._lock:
            return self.nodes.setdefault(node, str(uuid.uuid4()))

    def list_slices(self, driver: str, node: str) -> list[dict]:
        self._check()
        with self._lock:
            return [copy.deepcopy(s) for s in self.slices.values()
                    if s["spec"]["driver"] == driver and s["spec"].get("nodeName") == node]

    def _stored_slice(self, body: dict) -> dict:
        body = _as_stored(body)
        if not self.consumable_capacity:
            _drop_consumable_capacity(body)
        return body

    def create_slice(self, body: dict) -> dict:
        self._check()
        with self._lock:
            body = self._stored_slice(body)
            meta = body.setdefault("metadata", {})
            if "name" not in meta:
                meta["name"] = meta.pop("generateName", "slice-") + uuid.uuid4().hex[:5]
            if meta["name"] in self.slices:
                raise ApiUnavailable(f"409 Conflict: resourceslice {meta['name']} exists")
            meta["resourceVersion"] = self._next_version()
            self.slices[meta["name"]] = body
            return copy.deepcopy(body)

    def replace_slice(self, name: str, body: dict) -> dict:
        self._check()
        with self._lock:
            if name not in self.slices:
                raise ApiUnavailable(f"404 Not Found: resourceslice {name}")
            body = self._stored_slice(body)
            body["metadata"]["resourceVersion"] = self._next_version()
            self.slices[name] = body
            return copy.deepcopy(body)

    def delete_slice(self, name: str) -> None:
        self._check()
        with self._lock:
            self.slices.pop(name, None)
