"""Short form of the soak benchmark (benchmarks/exp_soak.py, 10 minutes in
`scripts/bench --only soak`): churning clients attach, allocate, detach and
are killed -9 at random while two groups saturate. Checks correctness only
(no errors, nothing leaked in the ledger); shares and memory growth are the
benchmark's figures, not asserted on a busy machine."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))


def test_soak_short_form_loses_nothing():
    pytest.importorskip("gslice.simgpu")
    import exp_soak
    result = exp_soak.soak(seconds=8.0, clients=6, warmup=1.0)
    figures = {m.name: m.value for m in result.metrics}
    assert figures["churners_started"] >= 5 and figures["churners_killed"] >= 1, figures
    assert figures["failed_workloads"] == 0, result.details
    assert figures["bad_requests"] == 0, result.details
    assert figures["leaked_bytes"] == 0 and figures["leftover_clients"] == 0, figures
