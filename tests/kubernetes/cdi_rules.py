"""Checks a CDI spec the way a runtime would: the CDI JSON schema, the naming
rules of kind and device names, a non-empty containerEdits per device, and a
cdiVersion no newer than podman 4.3 understands that still allows what the
spec uses. Written from the CDI spec, independently of gslice.kubernetes.cdi."""
from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT7

SCHEMA_DIR = Path(__file__).parent / "cdi_schema"
OLDEST_RUNTIME_KNOWS = (0, 5, 0)  # podman 4.3 (Debian 12)

VENDOR = re.compile(r"^[A-Za-z][A-Za-z0-9._-]*[A-Za-z0-9]$")
CLASS_BEFORE_060 = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*[A-Za-z0-9]$")
DEVICE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]*[A-Za-z0-9]$|^[A-Za-z0-9]$")


def _validator() -> jsonschema.Draft7Validator:
    schema = json.loads((SCHEMA_DIR / "schema.json").read_text())
    defs = json.loads((SCHEMA_DIR / "defs.json").read_text())
    registry = Registry().with_resource("defs.json", Resource.from_contents(defs, default_specification=DRAFT7))
    return jsonschema.Draft7Validator(schema, registry=registry)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split("."))


def problems(spec: dict) -> list[str]:
    found = [f"schema: {e.message} at {list(e.absolute_path)}" for e in _validator().iter_errors(spec)]
    if found:
        return found
    version = _version(spec["cdiVersion"])
    if version > OLDEST_RUNTIME_KNOWS:
        found.append(f"cdiVersion {spec['cdiVersion']} is newer than podman 4.3 accepts")
    vendor, _, klass = spec["kind"].partition("/")
    if not VENDOR.match(vendor) or not CLASS_BEFORE_060.match(klass):
        found.append(f"kind {spec['kind']!r} breaks the vendor/class naming rules")
    for device in spec["devices"]:
        name = device["name"]
        if not DEVICE.match(name):
            found.append(f"device name {name!r} breaks the naming rules")
        if name[:1].isdigit() and version < (0, 5, 0):
            found.append(f"device name {name!r} starts with a digit: needs cdiVersion 0.5.0, declared "
                         f"{spec['cdiVersion']}")
        edits = device["containerEdits"]
        if not any(edits.get(k) for k in ("env", "mounts", "deviceNodes", "hooks")):
            found.append(f"device {name!r} has empty containerEdits")
        for mount in edits.get("mounts") or []:
            if mount.get("type") and version < (0, 4, 0):
                found.append("mount type needs cdiVersion 0.4.0")
            if not mount["containerPath"].startswith("/") or not mount["hostPath"].startswith("/"):
                found.append(f"mount {mount} has a relative path")
        for env in edits.get("env") or []:
            if "=" not in env:
                found.append(f"env entry {env!r} is not NAME=VALUE")
    if (spec.get("annotations") or any(d.get("annotations") for d in spec["devices"])) and version < (0, 6, 0):
        found.append("annotations need cdiVersion 0.6.0")
    return found
