"""Fixtures for the packaging tests live in packaging_harness (importable by the tests under a unique name)."""
from packaging_harness import *  # noqa: F401,F403
