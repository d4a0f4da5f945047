"""Opaque device configs for the gslice driver, from the DeviceClass (trusted:
set by the cluster admin) or from the claim (the user's).

    parameters:
      apiVersion: gslice.dev/v1alpha1
      kind: GroupConfig
      priority: high        # class only: a claim cannot raise its own priority
      limit: "60%"          # cap on GPU time; class: the default, claim: its own

The class's config comes first in the allocation, the claim's after it; a
later limit wins. A claim config that sets priority is refused."""
from __future__ import annotations

from dataclasses import dataclass

from gslice.client import Priority
from gslice.errors import InvalidValue
from gslice.units import parse_share

API_VERSION = "gslice.dev/v1alpha1"
KIND = "GroupConfig"
SOURCE_CLASS = "FromClass"
SOURCE_CLAIM = "FromClaim"
_CLASS_FIELDS = {"apiVersion", "kind", "priority", "limit"}
_CLAIM_FIELDS = {"apiVersion", "kind", "limit"}


class ConfigError(ValueError):
    """A config the user or admin can fix; the message says which and how."""


@dataclass(frozen=True)
class GroupSettings:
    priority: Priority = Priority.NORMAL
    limit: float | None = None  # None: the claim's compute request


def _parse_one(parameters, source: str, where: str) -> dict:
    if not isinstance(parameters, dict):
        raise ConfigError(f"{where}: parameters must be an object with apiVersion {API_VERSION} and kind {KIND}, "
                          f"got {parameters!r}")
    if parameters.get("apiVersion") != API_VERSION or parameters.get("kind") != KIND:
        raise ConfigError(f"{where}: apiVersion/kind {parameters.get('apiVersion')!r}/{parameters.get('kind')!r} "
                          f"not understood; expected {API_VERSION}/{KIND}")
    allowed = _CLASS_FIELDS if source == SOURCE_CLASS else _CLAIM_FIELDS
    unknown = sorted(set(parameters) - allowed)
    if unknown:
        hint = " (priority comes from the DeviceClass: pick another class)" if "priority" in unknown else ""
        raise ConfigError(f"{where}: field(s) {', '.join(unknown)} not allowed here{hint}; "
                          f"allowed: {', '.join(sorted(allowed - {'apiVersion', 'kind'}))}")
    out = {}
    if "priority" in parameters:
        try:
            out["priority"] = Priority.parse(parameters["priority"])
        except InvalidValue as exc:
            raise ConfigError(f"{where}: {exc}") from None
    if "limit" in parameters:
        try:
            out["limit"] = parse_share(parameters["limit"])
        except InvalidValue as exc:
            raise ConfigError(f"{where}: limit {parameters['limit']!r} is invalid ({exc}); "
                              "expected a share such as \"60%\" or 0.6") from None
    return out


def settings_for(configs: list[dict], driver: str, request: str) -> GroupSettings:
    """Settings for one allocated request from the allocation's `config` list
    (status.allocation.devices.config), in order: class first, claim after."""
    settings = {}
    for index, entry in enumerate(configs or []):
        opaque = entry.get("opaque") or {}
        if opaque.get("driver") != driver:
            continue
        requests = entry.get("requests") or []
        if requests and request not in requests and not any(request.startswith(r + "/") for r in requests):
            continue
        source = entry.get("source", SOURCE_CLAIM)
        where = f"{'DeviceClass' if source == SOURCE_CLASS else 'claim'} config #{index} for driver {driver}"
        settings.update(_parse_one(opaque.get("parameters"), source, where))
    return GroupSettings(**settings)
