"""What a claim needs on this node, from its allocation (pure: no I/O).

The scheduler wrote, in status.allocation.devices, one result per allocated
device (driver, pool, device, shareID, consumedCapacity) and the configs that
apply (class first, claim after). Each gslice result becomes one tokend group
(and one CDI device: a container that names the request gets that group):

  request = consumed compute / 1000     memory quota = consumed memory
  limit   = config limit, else request  priority     = the DeviceClass's config
"""
from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from gslice.client import Priority

from .group_config import ConfigError, settings_for
from .resource_slices import COMPUTE_TOTAL
from .tokends import GpuTokend

GROUP_PREFIX = "k8s-"
# Labels on the group (tokend keeps them; `gslice group ls` shows them).
LABEL_CLAIM = "gslice.dev/claim"          # namespace/name
LABEL_CLAIM_UID = "gslice.dev/claim-uid"
LABEL_PODS = "gslice.dev/pods"            # namespace/pod,...
LABEL_REQUEST = "gslice.dev/request"
LABEL_MANAGED_BY = "gslice.dev/managed-by"
MANAGED_BY = "gslice-dra"


class PlanError(ValueError):
    """The claim cannot be prepared as it is; the message is for the user
    (kubelet puts it in the pod's events)."""


class UnknownDevice(PlanError):
    """The allocated device is not served by a tokend this plugin knows (yet)."""


@dataclass(frozen=True)
class ClaimPlan:
    """One allocated gslice device of a claim: its group and CDI device.
    `suffix` is "" for a claim's only gslice device, "-<n>" when it has several."""
    suffix: str
    uid: str
    namespace: str
    name: str
    request_name: str
    pool: str
    device: str
    share_id: str | None
    gpu: GpuTokend
    group: str
    request: float
    limit: float
    memory: int
    priority: Priority
    labels: dict

    @property
    def claim_ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def cdi_name(self) -> str:
        return self.uid + self.suffix


def group_name(uid: str, suffix: str = "") -> str:
    return GROUP_PREFIX + uid + suffix


def parse_quantity(value) -> Decimal:
    from kubernetes.utils.quantity import parse_quantity as k8s_parse
    try:
        return k8s_parse(value)
    except ValueError as exc:
        raise PlanError(f"quantity {value!r} is not a Kubernetes quantity: {exc}") from None


def _pods(claim: dict) -> str:
    namespace = claim["metadata"].get("namespace", "")
    names = [f"{namespace}/{ref.get('name')}" for ref in (claim.get("status") or {}).get("reservedFor") or []
             if ref.get("resource") == "pods"]
    return ",".join(names)[:500]


def plan_claim(claim: dict, uid: str, driver: str, node: str, gpus: dict[str, GpuTokend]) -> list[ClaimPlan]:
    """The groups for this claim on this node, one per gslice device allocated
    here (none: not ours). Raises PlanError for what the user must fix."""
    meta = claim.get("metadata") or {}
    ref = f"{meta.get('namespace')}/{meta.get('name')}"
    if meta.get("uid") != uid:
        raise PlanError(f"claim {ref} has UID {meta.get('uid')}, kubelet asked for {uid}: "
                        "the claim was deleted and re-created; the pod must be re-created too")
    allocation = (claim.get("status") or {}).get("allocation")
    if not allocation:
        raise PlanError(f"claim {ref} is not allocated yet (status.allocation is empty)")
    devices = allocation.get("devices") or {}
    ours = [r for r in devices.get("results") or [] if r.get("driver") == driver and r.get("pool") == node]
    configs = devices.get("config") or []
    pods = _pods(claim)
    plans = []
    for index, result in enumerate(ours):
        suffix = "" if len(ours) == 1 else f"-{index}"
        plans.append(_plan_result(claim, uid, ref, result, suffix, configs, driver, node, gpus, pods))
    return plans


def _plan_result(claim: dict, uid: str, ref: str, result: dict, suffix: str, configs: list, driver: str, node: str,
                 gpus: dict[str, GpuTokend], pods: str) -> ClaimPlan:
    meta = claim["metadata"]
    request_name = result.get("request", "")
    where = f"claim {ref}" + (f" request {request_name}" if suffix else "")
    gpu = gpus.get(result.get("device"))
    if gpu is None:
        raise UnknownDevice(f"{where} was allocated device {result.get('device')!r} of pool {node}, which this "
                            f"node's tokends do not serve now (serving: {', '.join(sorted(gpus)) or 'none'}); "
                            "is tokend running for that GPU?")
    consumed = result.get("consumedCapacity") or {}
    # No consumedCapacity: the device was allocated whole (e.g. the
    # DRAConsumableCapacity feature gate is off): the group gets all of it.
    compute = parse_quantity(consumed.get("compute", COMPUTE_TOTAL))
    if not 0 < compute <= COMPUTE_TOTAL:
        raise PlanError(f"{where}: compute {consumed.get('compute')} is out of range; "
                        f"expected 1..{COMPUTE_TOTAL} (per mille of the GPU)")
    request = float(compute / COMPUTE_TOTAL)
    memory = int(parse_quantity(consumed["memory"])) if "memory" in consumed else gpu.memory_total
    if memory <= 0:
        raise PlanError(f"{where}: memory {consumed.get('memory')} must be more than 0")
    try:
        settings = settings_for(configs, driver, request_name)
    except ConfigError as exc:
        raise PlanError(f"{where}: {exc}") from None
    limit = settings.limit if settings.limit is not None else request
    if not request <= limit <= 1:
        raise PlanError(f"{where}: limit {limit:.0%} is below the claim's compute request {request:.1%}; "
                        "expected request <= limit <= 100%")
    labels = {LABEL_CLAIM: ref, LABEL_CLAIM_UID: uid, LABEL_REQUEST: request_name, LABEL_MANAGED_BY: MANAGED_BY}
    if pods:
        labels[LABEL_PODS] = pods
    return ClaimPlan(suffix=suffix, uid=uid, namespace=meta.get("namespace", ""), name=meta.get("name", ""),
                     request_name=request_name, pool=node, device=result["device"],
                     share_id=result.get("shareID"), gpu=gpu, group=group_name(uid, suffix), request=request,
                     limit=limit, memory=memory, priority=settings.priority, labels=labels)
