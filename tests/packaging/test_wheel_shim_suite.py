"""The shim from the wheel passes the shim test folder (tests/shim, pointed
at it with GSLICE_SHIM_LIBRARY), less the seconds-long timing measurements
(marked `timing`: the same sources, measured by the in-tree run; one of
each mechanism stays unmarked) and the builds with a feature cut (made
from the sources, so they skip)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from packaging_harness import ROOT

pytestmark = [pytest.mark.packaging, pytest.mark.slow]


def test_tests_shim_pass_against_the_wheels_shim(wheel_shim):
    env = {**os.environ, "GSLICE_SHIM_LIBRARY": str(wheel_shim)}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-m", "not timing",
                        "tests/shim"],
                       env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
    tail = r.stdout[-4000:] + r.stderr[-2000:]
    assert r.returncode == 0, tail
    summary = r.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "failed" not in summary and "error" not in summary, tail
