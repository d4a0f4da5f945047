"""Shared fixtures: real tokend daemons in temp directories (gslice.testing)."""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from gslice.testing import TokendProcess


@pytest.fixture
def tokend_factory(tmp_path):
    """Start daemons with custom options: tokend_factory(window=2, extra_args=[...]).
    Every daemon started is stopped and its directories removed at teardown."""
    started: list[TokendProcess] = []

    def start(**kwargs) -> TokendProcess:
        daemon = TokendProcess(tmp_path / f"tokend{len(started)}", **kwargs)
        started.append(daemon)
        return daemon.start()

    yield start
    for daemon in started:
        daemon.close()


@pytest.fixture
def tokend(tokend_factory) -> TokendProcess:
    """A running tokend with default options (simulated GPU if built, else a fake one)."""
    return tokend_factory()


@pytest.fixture(scope="session")
def build_dir():
    """A scratch folder for test programs compiled once per session."""
    path = Path(tempfile.mkdtemp(prefix="gs-test-build-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)
