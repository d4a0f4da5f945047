"""CDI (Container Device Interface) spec files, one per prepared claim.

The container runtime (containerd, CRI-O, podman) reads *.json from the CDI
directory and applies the device's containerEdits to the container: here the
shim's LD_PRELOAD from a versioned read-only host folder, the client socket's
DIRECTORY (a mounted directory survives tokend restarts; a mounted socket file
does not), the group name, and the group secret as a read-only file named by
GSLICE_GROUP_SECRET_FILE (never in the environment or on a command line).

Rules that bit others: write to a temporary name the runtime ignores, then
rename; declare the lowest cdiVersion that allows what the spec uses (runtimes
reject versions newer than they know); a device's containerEdits must not be
empty. A CDI env entry replaces the container's own variable of that name."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from gslice import paths
from gslice.atomic_file import write_atomically

CLASS = "claim"
# Where things appear inside the container.
CONTAINER_ROOT = "/run/gslice"
CONTAINER_LIB_DIR = f"{CONTAINER_ROOT}/lib"
CONTAINER_SOCKET_DIR = f"{CONTAINER_ROOT}/socket"
CONTAINER_SECRET_FILE = f"{CONTAINER_ROOT}/group-secret"
SHIM_NAME = "libgslice.so"
MOUNT_OPTIONS = ["ro", "nosuid", "nodev", "bind"]
# The preemption doorbell is the one thing a tenant writes: mounted over its
# name inside the read-only socket directory.
DOORBELL_MOUNT_OPTIONS = ["rw", "nosuid", "nodev", "bind"]

# Naming rules of the CDI spec: vendor and class of the kind, device names.
_VENDOR = re.compile(r"[A-Za-z]([A-Za-z0-9._-]*[A-Za-z0-9])?")
_CLASS = re.compile(r"[A-Za-z]([A-Za-z0-9_-]*[A-Za-z0-9])?")
_DEVICE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?")


class CdiError(ValueError):
    pass


def check_names(kind: str, device: str) -> None:
    vendor, _, klass = kind.partition("/")
    if not _VENDOR.fullmatch(vendor) or not _CLASS.fullmatch(klass):
        raise CdiError(f"CDI kind {kind!r} is invalid: expected VENDOR/CLASS, vendor of [A-Za-z0-9._-] and class "
                       "of [A-Za-z0-9_-], each starting with a letter and ending with a letter or digit")
    if not _DEVICE.fullmatch(device):
        raise CdiError(f"CDI device name {device!r} is invalid: expected [A-Za-z0-9_.:-] starting and ending "
                       "with a letter or digit")


def required_version(spec: dict) -> str:
    """The lowest cdiVersion that allows what `spec` uses (podman 4.3 knows up
    to 0.5.0; newer features are refused here rather than silently declared)."""
    if spec.get("annotations") or any(d.get("annotations") for d in spec["devices"]):
        raise CdiError("annotations need cdiVersion 0.6.0, which older runtimes reject; gslice does not use them")
    edits = [d["containerEdits"] for d in spec["devices"]] + [spec.get("containerEdits") or {}]
    if any(not d["name"][:1].isalpha() for d in spec["devices"]):
        return "0.5.0"  # device names starting with a digit (claim UIDs)
    if any(node.get("hostPath") for e in edits for node in e.get("deviceNodes") or []):
        return "0.5.0"
    if any(mount.get("type") for e in edits for mount in e.get("mounts") or []):
        return "0.4.0"
    return "0.3.0"


@dataclass(frozen=True)
class ClaimEdits:
    """What one claim's containers get."""
    shim_lib_dir: Path      # host folder holding libgslice.so (versioned, read-only)
    client_socket_dir: Path  # host folder holding tokend's client.sock only
    secret_file: Path       # host file with the group secret
    group: str
    # tokend's preemption doorbell beside client.sock (None: tokend keeps none,
    # e.g. --preempt-doorbell off; preemptions then go through the Revoke only)
    doorbell_file: Path | None = None


def _container_edits(edits: ClaimEdits) -> dict:
    return {
        "env": [
            f"LD_PRELOAD={CONTAINER_LIB_DIR}/{SHIM_NAME}",
            f"{paths.ENV_SOCKET}={CONTAINER_SOCKET_DIR}/{paths.CLIENT_SOCKET_NAME}",
            f"{paths.ENV_GROUP}={edits.group}",
            f"{paths.ENV_GROUP_SECRET_FILE}={CONTAINER_SECRET_FILE}",
        ],
        "mounts": [
            {"hostPath": str(edits.shim_lib_dir), "containerPath": CONTAINER_LIB_DIR, "options": MOUNT_OPTIONS},
            # The socket's directory, not the socket: it survives daemon restarts.
            {"hostPath": str(edits.client_socket_dir), "containerPath": CONTAINER_SOCKET_DIR,
             "options": MOUNT_OPTIONS},
            {"hostPath": str(edits.secret_file), "containerPath": CONTAINER_SECRET_FILE, "options": MOUNT_OPTIONS},
            *([{"hostPath": str(edits.doorbell_file),
                "containerPath": f"{CONTAINER_SOCKET_DIR}/{paths.DOORBELL_FILE_NAME}",
                "options": DOORBELL_MOUNT_OPTIONS}] if edits.doorbell_file else []),
        ],
    }


def build_spec(vendor: str, devices: dict[str, ClaimEdits]) -> dict:
    """One spec (one file) for a claim: a CDI device per gslice device of the claim."""
    kind = f"{vendor}/{CLASS}"
    for name in devices:
        check_names(kind, name)
    spec = {"cdiVersion": "", "kind": kind,
            "devices": [{"name": name, "containerEdits": _container_edits(edits)} for name, edits in devices.items()]}
    spec["cdiVersion"] = required_version(spec)
    return spec


def device_ids(spec: dict) -> dict[str, str]:
    """device name -> fully qualified CDI device ID (vendor/class=name)."""
    return {d["name"]: f"{spec['kind']}={d['name']}" for d in spec["devices"]}


def spec_path(cdi_dir: Path, vendor: str, device: str) -> Path:
    return Path(cdi_dir) / f"{vendor}-{CLASS}_{device}.json"


def write_spec(path: Path, spec: dict) -> None:
    """Atomically: a temporary name runtimes ignore (not *.json), then rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, (json.dumps(spec, indent=2) + "\n").encode(), mode=0o644)


def our_spec_files(cdi_dir: Path, vendor: str) -> dict[str, Path]:
    """device name -> spec file, for the specs this driver wrote."""
    prefix = f"{vendor}-{CLASS}_"
    found = {}
    for path in Path(cdi_dir).glob(f"{prefix}*.json"):
        found[path.name[len(prefix):-len(".json")]] = path
    return found


def nvidia_device_id(spec_dirs, gpu_uuid: str) -> str | None:
    """`nvidia.com/gpu=<uuid>` when NVIDIA's CDI spec (nvidia-ctk cdi generate)
    on this node names that GPU; it brings the device nodes and driver libraries."""
    for directory in spec_dirs:
        for path in sorted([*Path(directory).glob("*.json"), *Path(directory).glob("*.yaml")]):
            try:
                text = path.read_text()
                if path.suffix == ".json":
                    spec = json.loads(text)
                else:
                    import yaml  # a dependency of the kubernetes client
                    spec = yaml.safe_load(text)
            except (OSError, ValueError, ImportError, Exception):
                continue
            if isinstance(spec, dict) and spec.get("kind") == "nvidia.com/gpu":
                if any(isinstance(d, dict) and d.get("name") == gpu_uuid for d in spec.get("devices") or []):
                    return f"nvidia.com/gpu={gpu_uuid}"
    return None
