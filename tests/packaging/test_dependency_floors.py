"""The declared dependency floors are true: the wheel installs and works
(tokend, group create, `gslice run` of a simulated-GPU workload, status)
with exactly the floor of every dependency, with the newest, and as it is
installed on a stock PyTorch image (`pip install --no-deps --target`, the
image's grpcio and protobuf, no cffi)."""
from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest

from packaging_harness import IMAGE_PACKAGES, declared_floors, installed_versions, make_venv, pip, running_tokend

pytestmark = pytest.mark.packaging

ENVIRONMENTS = {"floors": "floor_venv", "newest": "installed_venv", "pytorch_image": "image_target",
                "pytorch_image_oldest_health": "image_target_oldest_health"}


@pytest.fixture(params=list(ENVIRONMENTS))
def environment(request):
    return request.param, *request.getfixturevalue(ENVIRONMENTS[request.param])


def run(venv: Path, env: dict, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), env=env, cwd=venv.parent, capture_output=True, text=True, timeout=timeout)


def test_floor_venv_holds_exactly_the_floors(floor_venv):
    venv, env = floor_venv
    found = installed_versions(venv, env)
    floors = declared_floors()
    assert {name: found.get(name) for name in floors} == floors


def test_image_target_holds_the_images_versions_and_no_cffi(image_target):
    venv, env = image_target
    found = installed_versions(venv, env)
    assert {name: found.get(name) for name in IMAGE_PACKAGES} == IMAGE_PACKAGES
    assert "cffi" not in found
    r = run(venv, env, "python", "-c", "import gslice, gslice.client; print(gslice.__file__)")
    assert r.returncode == 0, r.stderr
    assert "/target/gslice/" in r.stdout, r.stdout


def test_every_module_imports(environment):
    """The generated stubs (gslice.v1, gslice.kubelet), the client API, the
    daemon and the CLI import without a version complaint."""
    name, venv, env = environment
    code = ("import warnings; warnings.simplefilter('error');"
            "import gslice.client, gslice.cli, gslice.tokend.daemon, gslice.v1.admin_pb2_grpc,"
            " gslice.v1.client_pb2_grpc, gslice.kubelet.dra_v1_pb2_grpc, gslice.kubelet.dra_v1beta1_pb2_grpc,"
            " gslice.kubelet.pluginregistration_v1_pb2_grpc, grpc, google.protobuf;"
            "print(grpc.__version__, google.protobuf.__version__)")
    r = run(venv, env, "python", "-c", code)
    assert r.returncode == 0, f"{name}: {r.stderr[-3000:]}"


def test_tokend_group_create_run_and_status(environment, tmp_path):
    name, venv, env = environment
    sim_name = f"wheeltest-{uuid.uuid4().hex[:10]}"
    r = run(venv, env, "python", "-c", "import gslice.simgpu as s; print(s.lib_dir())")
    assert r.returncode == 0, r.stderr
    sim_env = {**env, "LD_LIBRARY_PATH": r.stdout.strip(), "GSLICE_SIM_NAME": sim_name, "GSLICE_SIM_MEMORY": "4GiB",
               # the per-context reserve charged to the group (default 512 MiB), explicit here
               "GSLICE_CONTEXT_RESERVE_MIB": "256",
               # no headroom for context growth on top: the simulated context is
               # exactly the reserve, so the chunk count below stays exact
               "GSLICE_CONTEXT_GROWTH_MARGIN_MIB": "0"}
    try:
        with running_tokend(["gslice", "tokend", "--state-dir", str(tmp_path / "state")], sim_env,
                            tmp_path / "tokend.log") as sockets:
            admin = ["--admin-socket", str(sockets / "admin.sock")]
            r = run(venv, sim_env, "gslice", *admin, "group", "create", "team-a", "--request", "50%",
                    "--limit", "100%", "--memory", "1GiB")
            assert r.returncode == 0 and "created group 'team-a'" in r.stdout, f"{name}: {r.stdout}{r.stderr}"
            r = run(venv, sim_env, "gslice", *admin, "run", "--group", "team-a", "--", "python", "-m",
                    "gslice.workloads", "alloc", "--chunk-mib", "256", "--count", "8", timeout=120)
            assert r.returncode == 0, f"{name}: {r.stdout}{r.stderr}"
            result = json.loads(r.stdout.strip().splitlines()[-1])
            # The context's 256 MiB reserve and three 256 MiB chunks fill the 1 GiB
            # quota; the fourth chunk is refused by the shim, on the daemon's word.
            assert result["chunks"] == 3 and result["refused"] >= 1, (name, result)
            # The standard health service (grpcio-health-checking's stubs, both ends).
            r = run(venv, sim_env, "python", "-c", "import sys; from gslice.client import health_status; "
                    "print(health_status(sys.argv[1]))", str(sockets / "admin.sock"))
            assert r.returncode == 0 and r.stdout.strip() == "SERVING", f"{name}: {r.stdout}{r.stderr}"
            r = run(venv, sim_env, "gslice", *admin, "status", "--json")
            assert r.returncode == 0, f"{name}: {r.stdout}{r.stderr}"
            status = json.loads(r.stdout)
            groups = {g["group"]["name"]: g for g in status["groups"]}
            assert set(groups) == {"team-a"}, status
            # The run's process is gone: its memory is back, and it was counted.
            assert groups["team-a"]["memory_used"] == 0 and groups["team-a"]["group"]["memory_quota"] == 1 << 30, \
                groups["team-a"]
    finally:
        Path(f"/dev/shm/gslice-sim-{sim_name}").unlink(missing_ok=True)


# One release per protobuf major line the images of the last two years carry
# (docs/packaging.md), oldest first: the stubs (protobuf 4.25.0 gencode, no
# version check) must load and round-trip a message under each.
PROTOBUF_LINES = ["4.25.0", "5.26.1", "5.29.5", "6.30.0", "6.33.5", "7.34.0", "7.36.2"]


def test_stubs_load_under_each_protobuf_line(wheel_tree, tmp_path):
    venv, env = make_venv(tmp_path, [f"grpcio=={declared_floors()['grpcio']}"])
    env = {**env, "PYTHONPATH": str(wheel_tree)}
    code = ("import warnings; warnings.simplefilter('error');"
            "import google.protobuf, gslice.v1.admin_pb2 as a, gslice.v1.client_pb2_grpc, gslice.kubelet.dra_v1_pb2_grpc;"
            "g = a.Group(name='x', memory_quota=5); g.labels['k'] = 'v';"
            "r = a.UpdateGroupRequest(name='x', limit=0.5);"
            "assert a.Group.FromString(g.SerializeToString()) == g;"
            "assert a.UpdateGroupRequest.FromString(r.SerializeToString()).HasField('limit');"
            "print(google.protobuf.__version__)")
    loaded = {}
    for version in PROTOBUF_LINES:
        pip(venv, env, "install", "-q", "--only-binary", ":all:", f"protobuf=={version}")
        r = run(venv, env, "python", "-c", code)
        loaded[version] = r.stdout.strip() if r.returncode == 0 else r.stderr.strip().splitlines()[-1]
    assert loaded == {v: v for v in PROTOBUF_LINES}
