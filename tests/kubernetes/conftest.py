"""Fixtures for the Kubernetes tests live in dra_node (importable by the tests under a unique name)."""
from dra_node import *  # noqa: F401,F403
