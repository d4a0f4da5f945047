"""What the shipped DeviceClasses and example claims say is understood by the
plugin's own code, not only by the API schema: their opaque configs pass the
driver's config parser with the source the scheduler gives them (class
first, claim after), each class yields the priority its name promises, the
capacities asked fit the slice's request policy, and the attributes named in
constraints are ones the slice publishes."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from kubernetes.utils.quantity import parse_quantity

from gslice.client import Priority
from gslice.kubernetes import DRIVER_NAME
from gslice.kubernetes.group_config import SOURCE_CLAIM, SOURCE_CLASS, settings_for
from gslice.kubernetes.resource_slices import device_entry
from gslice.kubernetes.tokends import GpuTokend

ROOT = Path(__file__).resolve().parents[2]
DOCS = [d for p in sorted((ROOT / "deploy" / "kubernetes").rglob("*.yaml"))
        for d in yaml.safe_load_all(p.read_text()) if d]
CLASSES = {d["metadata"]["name"]: d for d in DOCS if d["kind"] == "DeviceClass"}
TEMPLATES = [d for d in DOCS if d["kind"] == "ResourceClaimTemplate"]
GPU = GpuTokend(index=0, uuid="GPU-a", product_name="NVIDIA H100 80GB HBM3", memory_total=80 * 1024**3,
                admin_socket=Path("/run/gslice/gpu0/admin.sock"),
                client_socket=Path("/run/gslice/gpu0/client/client.sock"))


def _opaque(configs, source, request=None):
    return [{"source": source, "requests": c.get("requests") or ([request] if request else []),
             "opaque": c["opaque"]} for c in configs or [] if "opaque" in c]


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_device_class_config_gives_the_priority_its_name_says(name):
    settings = settings_for(_opaque(CLASSES[name]["spec"].get("config"), SOURCE_CLASS), DRIVER_NAME, "gpu")
    expected = Priority.HIGH if "-high." in name else Priority.LOW if "-low." in name else Priority.NORMAL
    assert settings.priority == expected


@pytest.mark.parametrize("template", TEMPLATES, ids=[t["metadata"]["name"] for t in TEMPLATES])
def test_example_claims_are_understood_by_the_plugin(template):
    devices = template["spec"]["spec"]["devices"]
    policy = device_entry(GPU, 512 * 1024**2)["capacity"]
    published = {f"{DRIVER_NAME}/{a}" for a in device_entry(GPU, 0)["attributes"]}
    for request in devices["requests"]:
        exactly = request["exactly"]
        assert exactly["deviceClassName"] in CLASSES
        configs = (_opaque(CLASSES[exactly["deviceClassName"]]["spec"].get("config"), SOURCE_CLASS, request["name"])
                   + _opaque(devices.get("config"), SOURCE_CLAIM))
        settings_for(configs, DRIVER_NAME, request["name"])   # raises ConfigError on what the plugin refuses
        for capacity, asked in ((exactly.get("capacity") or {}).get("requests") or {}).items():
            assert capacity in policy, (capacity, sorted(policy))
            valid = policy[capacity]["requestPolicy"]["validRange"]
            value = parse_quantity(asked)
            step = parse_quantity(valid["step"])
            assert value >= parse_quantity(valid["min"]) and value % step == 0, (capacity, asked)
            if "max" in valid:
                assert value <= parse_quantity(valid["max"])
    for constraint in devices.get("constraints") or []:
        attribute = constraint.get("matchAttribute") or constraint.get("distinctAttribute")
        assert attribute in published, (attribute, sorted(published))
