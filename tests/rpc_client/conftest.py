"""Fixtures for the rpc client tests live in rpc_harness (importable by the tests under a unique name)."""
from rpc_harness import *  # noqa: F401,F403
