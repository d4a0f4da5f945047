"""Graph memory under the shim on the strict simulated GPU with the real
tokend: a graph captured with a stream-ordered allocation takes its bytes
from the device's graph memory pool at each launch or upload; the pool
keeps them after the graph frees them, so the group stays charged until
cuDeviceGraphMemTrim; a launch whose memory does not fit the quota is
refused before the driver takes anything."""
from __future__ import annotations

import subprocess

import pytest

from shim_harness import group_env, parse_kv

MiB = 1 << 20


def run_probe(runner, tokend, memory_probe, mode, *args):
    created = tokend.admin().create_group("g", request=0.5, memory="2GiB")
    env = runner.env(**group_env(tokend, "g", created.secret))
    r = subprocess.run([str(memory_probe), mode, *args], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, (r.stdout, r.stderr)
    return parse_kv(r.stdout)


def test_launched_graph_memory_keeps_its_charge_until_trimmed(runner, tokend, memory_probe):
    out = run_probe(runner, tokend, memory_probe, "graph")
    assert out["after_instantiate"] == "0"                # captured: nothing allocated yet
    assert out["after_launch"] == str(256 * MiB)          # the graph memory pool grew at the launch
    assert out["reserved_after_launch"] == str(256 * MiB)
    assert out["after_query"] == str(256 * MiB)           # freed inside the graph, still reserved by the pool
    assert out["after_relaunch"] == str(256 * MiB)        # the relaunch reuses the pool
    assert out["after_exec_destroy"] == str(256 * MiB)    # the pool keeps it until trimmed
    assert out["after_trim"] == "0"
    assert out["reserved_after_trim"] == "0"
    assert out["after_upload"] == str(64 * MiB)           # an upload takes the graph's memory too
    assert out["after_second_trim"] == "0"


@pytest.mark.parametrize("earlier_graphs", [0, 300], ids=["first_graph", "after_300_graphs"])
def test_graph_launch_beyond_the_quota_is_refused(runner, tokend, memory_probe, earlier_graphs):
    """Also after 300 other graphs with memory nodes: the shim once followed
    256 at most, and launched the next ones before charging them."""
    out = run_probe(runner, tokend, memory_probe, "graph_over", str(earlier_graphs))  # 3 GiB of graph memory, quota 2 GiB
    assert out["launch_rc"] == "2"                        # CUDA_ERROR_OUT_OF_MEMORY
    assert out["upload_rc"] == "2"
    assert out["after_refused_launch"] == "0"
    assert out["reserved_after_refused_launch"] == "0"    # the driver took nothing


def test_graph_memory_of_an_unseen_instantiate_is_charged_at_the_next_query(runner, tokend, memory_probe):
    """cuGraphInstantiate_v2 is not in the table (see hook/README.md): the
    launch cannot be refused in advance, but the graph memory pool's
    footprint is charged at the next memory query and given back at trim."""
    out = run_probe(runner, tokend, memory_probe, "graph_unseen")
    assert out["after_query"] == str(64 * MiB)
    assert out["after_trim"] == "0"
