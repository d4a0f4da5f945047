"""CDI specs as the plugin writes them: schema, naming and version rules,
atomic writes, NVIDIA's spec found beside ours."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gslice.kubernetes import cdi

import cdi_rules

EDITS = cdi.ClaimEdits(shim_lib_dir=Path("/opt/gslice/0.1.0/lib"), client_socket_dir=Path("/run/gslice/gpu0/client"),
                       secret_file=Path("/var/lib/gslice-dra/claims/x/group-secret"), group="k8s-x")


@pytest.mark.parametrize("device,version", [
    ("0d7b4dec-018d-49bb-844f-c601b80de035", "0.5.0"),  # claim UIDs may start with a digit
    ("d7b4dec0-018d-49bb-844f-c601b80de035", "0.3.0"),
])
def test_spec_validates_with_the_lowest_version(device, version):
    spec = cdi.build_spec("gslice.dev", {device: EDITS})
    assert spec["cdiVersion"] == version
    assert cdi_rules.problems(spec) == []
    assert cdi.device_ids(spec) == {device: f"gslice.dev/claim={device}"}


def test_a_claim_with_two_devices_is_one_spec_with_two_devices():
    other = cdi.ClaimEdits(shim_lib_dir=EDITS.shim_lib_dir, client_socket_dir=Path("/run/gslice/gpu1/client"),
                           secret_file=Path("/var/lib/gslice-dra/claims/x/group-secret-1"), group="k8s-x-1")
    spec = cdi.build_spec("gslice.dev", {"x-0": EDITS, "x-1": other})
    assert cdi_rules.problems(spec) == []
    assert cdi.device_ids(spec) == {"x-0": "gslice.dev/claim=x-0", "x-1": "gslice.dev/claim=x-1"}
    second = spec["devices"][1]["containerEdits"]
    assert "GSLICE_GROUP=k8s-x-1" in second["env"]
    assert {m["hostPath"] for m in second["mounts"]} >= {"/run/gslice/gpu1/client",
                                                         "/var/lib/gslice-dra/claims/x/group-secret-1"}


def test_the_checker_catches_broken_specs():
    spec = cdi.build_spec("gslice.dev", {"0abc": EDITS})
    assert cdi_rules.problems({**spec, "cdiVersion": "0.3.0"})  # digit-first name needs 0.5.0
    assert cdi_rules.problems({**spec, "cdiVersion": "0.6.0"})  # newer than podman 4.3 reads
    assert cdi_rules.problems({**spec, "kind": "gslice.dev"})
    assert cdi_rules.problems({**spec, "devices": [{"name": "a", "containerEdits": {}}]})
    assert cdi_rules.problems({**spec, "devices": [{"name": "a"}]})  # schema: containerEdits required
    assert cdi_rules.problems({**spec, "extra": 1})                   # schema: no other fields


def test_mount_type_and_annotations_raise_or_need_versions():
    spec = cdi.build_spec("gslice.dev", {"abc": EDITS})
    spec["devices"][0]["containerEdits"]["mounts"][0]["type"] = "bind"
    assert cdi.required_version(spec) == "0.4.0"
    spec["devices"][0]["annotations"] = {"a": "b"}
    with pytest.raises(cdi.CdiError):
        cdi.required_version(spec)


@pytest.mark.parametrize("kind,device", [("gslice.dev/cl.aim", "a"), ("-gslice.dev/claim", "a"),
                                         ("gslice.dev/claim", "-a"), ("gslice.dev/claim", "a/b")])
def test_bad_names_are_refused(kind, device):
    with pytest.raises(cdi.CdiError):
        cdi.check_names(kind, device)


def test_spec_carries_the_secret_as_a_file_never_a_value():
    spec = cdi.build_spec("gslice.dev", {"abc": EDITS})
    env = dict(e.split("=", 1) for e in spec["devices"][0]["containerEdits"]["env"])
    assert env == {"LD_PRELOAD": "/run/gslice/lib/libgslice.so", "GSLICE_SOCKET": "/run/gslice/socket/client.sock",
                   "GSLICE_GROUP": "k8s-x", "GSLICE_GROUP_SECRET_FILE": "/run/gslice/group-secret"}
    mounts = spec["devices"][0]["containerEdits"]["mounts"]
    assert all("ro" in m["options"] for m in mounts)
    assert {m["hostPath"] for m in mounts} == {"/opt/gslice/0.1.0/lib", "/run/gslice/gpu0/client",
                                               "/var/lib/gslice-dra/claims/x/group-secret"}


def test_write_is_atomic_and_leaves_no_temporary(tmp_path, monkeypatch):
    path = cdi.spec_path(tmp_path, "gslice.dev", "abc")
    spec = cdi.build_spec("gslice.dev", {"abc": EDITS})
    cdi.write_spec(path, spec)
    assert json.loads(path.read_text()) == spec and os.listdir(tmp_path) == [path.name]
    assert cdi.our_spec_files(tmp_path, "gslice.dev") == {"abc": path}

    def fail(*_):
        raise OSError("disk full")
    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError):
        cdi.write_spec(path, {**spec, "cdiVersion": "0.5.0"})
    assert os.listdir(tmp_path) == [path.name] and json.loads(path.read_text()) == spec


def test_nvidia_spec_is_found_in_json_and_yaml(tmp_path):
    uuid = "GPU-12345678-1234-1234-1234-123456789abc"
    assert cdi.nvidia_device_id([tmp_path], uuid) is None
    (tmp_path / "nvidia.yaml").write_text(
        f"cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: {uuid}\n  containerEdits: {{}}\n")
    assert cdi.nvidia_device_id([tmp_path], uuid) == f"nvidia.com/gpu={uuid}"
    assert cdi.nvidia_device_id([tmp_path], "GPU-other") is None


def test_the_doorbell_is_mounted_writable_only_when_tokend_keeps_one():
    without = cdi.build_spec("gslice.dev", {"x": EDITS})["devices"][0]["containerEdits"]["mounts"]
    assert all(m["containerPath"] != "/run/gslice/socket/client.doorbell" for m in without)
    assert all("ro" in m["options"] for m in without)
    doorbell = Path("/run/gslice/gpu0/client/client.doorbell")
    spec = cdi.build_spec("gslice.dev", {"x": cdi.ClaimEdits(**{**EDITS.__dict__, "doorbell_file": doorbell})})
    assert cdi_rules.problems(spec) == []
    mounts = spec["devices"][0]["containerEdits"]["mounts"]
    [bell] = [m for m in mounts if m["containerPath"] == "/run/gslice/socket/client.doorbell"]
    assert bell["hostPath"] == str(doorbell) and "rw" in bell["options"] and "ro" not in bell["options"]
    # Over its name inside the (read-only) socket directory: after it.
    assert mounts.index(bell) > [m["containerPath"] for m in mounts].index("/run/gslice/socket")
