"""The ctypes driver-API workload (gslice.workloads' PTX spin kernel, served
by gslice.workloads_served) on the machine's real NVIDIA GPU under the real
shim: its launches wait for tokens. Run bare first (skipped with the bare
failure when the workload itself is broken); tokens are counted only around
the checked launches, beside a busy group, after the attach (a lease at
start grants a token at attach, before any launch). Needs no CuPy; skipped
without a real GPU (tests/gpu/conftest.py)."""
from __future__ import annotations

import pytest

from gslice.experiment import SharingExperiment

from gpu_reports import bare_or_skip, served

pytestmark = [pytest.mark.gpu]


def test_driver_api_launches_wait_for_tokens_on_the_real_gpu(tmp_path):
    run = dict(unit="mm4096h", seconds=3.0, sync_every=4)
    with SharingExperiment(tmp_path / "exp", gpu="real") as exp:
        exp.add_group("busy", request="50%", limit="100%", memory="1GiB")
        exp.add_group("driver", request="50%", limit="100%", memory="1GiB")
        bare = served(exp, "driver", "driver", "bare", tmp_path, shim=False)
        busy = served(exp, "busy", "driver", "busy", tmp_path)
        shim = served(exp, "driver", "driver", "shim", tmp_path)
        alone = bare_or_skip(bare, "the driver-API spin loop", "throughput", **run)
        busy.wait_ready(60)
        shim.wait_ready(60)
        busy.call("neighbour_start", 30, unit="mm4096h", sync_every=4)
        before = exp.admin.status().group("driver").tokens_granted
        report = shim.call("throughput", 120, **run)
        granted = exp.admin.status().group("driver").tokens_granted - before
        busy.call("neighbour_stop", 60)
    print(f"gpu-result: driver-API spin: bare {alone['iterations']} kernels, beside a busy group "
          f"{report['iterations']} kernels, tokens granted during them {granted}")
    assert report["iterations"] > 0
    assert granted > 0, "the driver-API workload's launches beside a busy group never asked tokend for a token"
