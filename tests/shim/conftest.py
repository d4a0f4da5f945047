"""Fixtures for the shim tests live in shim_harness (importable by the tests under a unique name)."""
from shim_harness import *  # noqa: F401,F403
