"""The wheel installed into a fresh venv, with no compiler or build tool on
the PATH: the CLI works, the shim is the wheel's, and the sharing demo's
short form runs on the simulated GPU that ships in the wheel."""
from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest

from packaging_harness import project_version, running_tokend

pytestmark = pytest.mark.packaging


def run(venv: Path, env: dict, *argv: str, timeout: float = 120, **extra_env) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), env={**env, **extra_env}, cwd=venv.parent, capture_output=True, text=True,
                          timeout=timeout)


def test_gslice_version_and_lib_path(installed_venv):
    venv, env = installed_venv
    r = run(venv, env, "gslice", "--version")
    assert r.returncode == 0 and r.stdout.strip() == f"gslice {project_version()}", r.stdout + r.stderr
    r = run(venv, env, "gslice", "lib-path")
    assert r.returncode == 0, r.stderr
    lib = Path(r.stdout.strip())
    assert lib.is_file() and venv in lib.parents, lib
    r = run(venv, env, "python", "-c", "import gslice, gslice.v1.client_pb2_grpc; print(gslice.__file__)")
    assert r.returncode == 0 and venv in Path(r.stdout.strip()).parents, r.stdout + r.stderr
    # The shim reports the package's version too.
    assert f"gslice-shim {project_version()}".encode() in lib.read_bytes()


def test_demo_short_form_on_the_simulated_gpu(installed_venv):
    venv, env = installed_venv
    r = run(venv, env, "python", "-m", "gslice.demo", "--seconds", "2", "--gpu", "sim", timeout=240)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "gslice demo on the simulated GPU" in r.stdout
    assert "over the whole run:" in r.stdout
    for group in ("training", "inference"):
        assert f"  {group:<10} asked" in r.stdout
    # The shim (from the wheel) enforced the 1 GiB quota.
    assert "then CUDA_ERROR_OUT_OF_MEMORY" in r.stdout, r.stdout


def test_tokend_group_and_run(installed_venv, tmp_path):
    """gslice tokend + gslice group create + gslice run, from the wheel."""
    venv, env = installed_venv
    sim_name = f"wheeltest-{uuid.uuid4().hex[:10]}"
    r = run(venv, env, "python", "-c", "import gslice.simgpu as s; print(s.lib_dir())")
    assert r.returncode == 0, r.stderr
    sim_env = {**env, "LD_LIBRARY_PATH": r.stdout.strip(), "GSLICE_SIM_NAME": sim_name, "GSLICE_SIM_MEMORY": "4GiB",
               # the per-context reserve charged to the group (default 512 MiB), explicit here
               "GSLICE_CONTEXT_RESERVE_MIB": "256"}
    try:
        with running_tokend(["gslice", "tokend", "--state-dir", str(tmp_path / "state")], sim_env,
                            tmp_path / "tokend.log") as sockets:
            admin = ["--admin-socket", str(sockets / "admin.sock")]
            r = run(venv, sim_env, "gslice", *admin, "group", "create", "team-a", "--request", "50%",
                    "--limit", "100%", "--memory", "1GiB")
            assert r.returncode == 0, r.stdout + r.stderr
            r = run(venv, sim_env, "gslice", *admin, "run", "--group", "team-a", "--", "python", "-m",
                    "gslice.workloads", "alloc", "--chunk-mib", "256", "--count", "8", timeout=120)
            assert r.returncode == 0, r.stdout + r.stderr
            result = json.loads(r.stdout.strip().splitlines()[-1])
            # The context's 256 MiB reserve and three 256 MiB chunks fill the 1 GiB
            # quota; the fourth chunk is refused by the shim.
            assert result["chunks"] == 3 and result["refused"] >= 1, result
    finally:
        Path(f"/dev/shm/gslice-sim-{sim_name}").unlink(missing_ok=True)
