"""The ctypes driver-API workload (gslice.workloads, PTX spin kernel) on the
machine's real NVIDIA GPU under the real shim: its launches wait for tokens.
Needs no CuPy; skipped without a real GPU (tests/gpu/conftest.py)."""
from __future__ import annotations

import subprocess

import pytest

from gslice.experiment import SharingExperiment

from gpu_reports import finish_json

pytestmark = [pytest.mark.gpu]


def test_driver_api_workload_works_on_the_real_gpu(tmp_path):
    with SharingExperiment(tmp_path / "exp", gpu="real") as exp:
        exp.add_group("driver", request="50%", limit="100%", memory="1GiB")
        proc = exp.spawn_workload("driver", ["spin", "--kernel-us", "1000", "--seconds", "3", "--sync-every", "1"],
                                  stderr=subprocess.PIPE)
        report = finish_json(proc, "gslice.workloads spin (ctypes driver API) under the shim")
        granted = exp.admin.status().group("driver").tokens_granted
    print(f"gpu-result: driver-API spin kernels={report['kernels']} tokens_granted={granted}")
    assert report["kernels"] > 0
    assert granted > 0, "the driver-API workload's launches never asked tokend for a token"
