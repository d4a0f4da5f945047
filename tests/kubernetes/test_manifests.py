"""Every manifest in deploy/kubernetes validates strictly (unknown fields are
errors) against the API schemas of Kubernetes 1.34, 1.35 and 1.36; the
ResourceSlice the plugin publishes does too."""
from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from gslice.kubernetes.resource_slices import build_slice
from gslice.kubernetes.tokends import GpuTokend

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = sorted((ROOT / "deploy" / "kubernetes").rglob("*.yaml"))
VERSIONS = ["1.34.0", "1.35.0", "1.36.0"]


def _documents():
    for path in MANIFESTS:
        for index, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if doc is not None:
                yield pytest.param(doc, id=f"{path.relative_to(ROOT / 'deploy' / 'kubernetes')}#{index}:{doc['kind']}")


def test_the_deployment_is_complete():
    kinds = {doc.values[0]["kind"] for doc in _documents()}
    assert {"DaemonSet", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "DeviceClass",
            "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "ResourceClaimTemplate"} <= kinds


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("doc", list(_documents()))
def test_manifest_validates_strictly(doc, version):
    kubernetes_validate.validate(doc, version, strict=True)


@pytest.mark.parametrize("version", VERSIONS)
def test_published_resource_slice_validates_strictly(version):
    gpus = [GpuTokend(index=i, uuid=f"GPU-0000000{i}-1111-2222-3333-444444444444", product_name="NVIDIA H100 80GB HBM3",
                      memory_total=80 * 1024**3, admin_socket=Path(f"/run/gslice/gpu{i}/admin.sock"),
                      client_socket=Path(f"/run/gslice/gpu{i}/client/client.sock")) for i in range(2)]
    kubernetes_validate.validate(build_slice("gslice.dev", "node-a", gpus, 512 * 1024**2, 1,
                                                 node_uid="7d1f3c2e-5b8a-4f6e-9c0d-1a2b3c4d5e6f"), version, strict=True)


def test_strict_validation_catches_an_unknown_field():
    doc = next(d.values[0] for d in _documents() if d.values[0]["kind"] == "DeviceClass")
    broken = {**doc, "spec": {**doc["spec"], "priority": "high"}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, "1.36.0", strict=True)


def test_memory_capacity_is_a_whole_number_of_steps():
    from gslice.kubernetes.resource_slices import MEMORY_STEP, device_entry
    from kubernetes.utils.quantity import parse_quantity
    gpu = GpuTokend(index=0, uuid="GPU-a", product_name="NVIDIA H100 80GB HBM3", memory_total=85520809984,
                    admin_socket=Path("/a"), client_socket=Path("/c/client.sock"))
    memory = device_entry(gpu, 512 * 1024**2)["capacity"]["memory"]
    value = int(parse_quantity(memory["value"]))
    assert value % MEMORY_STEP == 0 and 85520809984 - 512 * 1024**2 - MEMORY_STEP < value <= 85520809984 - 512 * 1024**2
    assert memory["requestPolicy"]["default"] == memory["value"]
