"""The charge for memory beyond allocations (process_overhead.c) with one
tokend per GPU (GSLICE_SOCKET_DIR): each GPU's charge is its own, and
finding this process's figure in NVML attaches to no other GPU's tokend.
NVML lists every GPU of the node (CUDA_VISIBLE_DEVICES does not apply to
it); the simulated GPU is one, so programs/nvml_more_gpus.c lists more
before it."""
from __future__ import annotations

import json

from ledger_harness import (MiB, LedgerProbe, gpu_socket_dir, ledger_probe, nvml_more_gpus,  # noqa: F401
                            serve_gpu, wait_group_used)

CONTEXT = 256 * MiB      # the simulated context's own memory (NVML shows it, no allocation does)
MARGIN = 64 * MiB        # GSLICE_CONTEXT_GROWTH_MARGIN_MIB's default
OTHER_GPUS = [f"GPU-{i:08x}-0000-4000-8000-000000000000" for i in (1, 2, 3)]


def probe_env(sim_daemon, socket_dir, secret: str, nvml: str, **extra) -> dict:
    return {"GSLICE_SOCKET_DIR": socket_dir, "GSLICE_GROUP": "g", "GSLICE_GROUP_SECRET": secret,
            "GSLICE_SIM_NAME": sim_daemon.sim_name, "GSLICE_SIM_CONTEXT_MEMORY": CONTEXT,
            "GSLICE_REAL_LIBNVML": nvml, **extra}


def give_group_secret(daemon, group: str, secret: str) -> None:
    """The group on daemon takes `secret` (one secret for the process's GPUs, as a deployment writes it)."""
    daemon.stop()
    path = daemon.state_dir / "groups.json"
    table = json.loads(path.read_text())

    def rewrite(node):
        if isinstance(node, dict):
            if node.get("name") == group and "secret" in node:
                node["secret"] = secret
            for value in node.values():
                rewrite(value)
        elif isinstance(node, list):
            for value in node:
                rewrite(value)
    rewrite(table)
    path.write_text(json.dumps(table))
    daemon.start()


def test_finding_its_nvml_figure_attaches_to_no_other_gpu(runner, tokend_factory, ledger_probe, nvml_more_gpus,
                                                          gpu_socket_dir):
    gpu = tokend_factory(gpu="sim")
    created = gpu.admin().create_group("g", request=0.5, memory="4GiB")
    serve_gpu(gpu_socket_dir, gpu.gpu_uuid, gpu)
    probe = LedgerProbe(runner, ledger_probe, **probe_env(gpu, gpu_socket_dir, created.secret, nvml_more_gpus,
                                                          GSLICE_TEST_NVML_EXTRA_UUIDS=",".join(OTHER_GPUS)))
    probe.alloc(64 * MiB)
    stats = probe.stats()
    assert stats["slots"] == 1, f"{stats['slots']} tokend connections for a process on one GPU"
    charged = 64 * MiB + CONTEXT + MARGIN       # its context found on its own GPU's NVML entry
    assert stats["held"] == charged
    assert wait_group_used(gpu, "g", charged) == charged


def test_each_gpu_keeps_its_own_charge(runner, tokend_factory, ledger_probe, nvml_more_gpus, gpu_socket_dir):
    a = tokend_factory(gpu="sim")                # the CUDA device: the simulated GPU
    b = tokend_factory(gpu="fake")               # another GPU the process uses (NVML shows it there)
    created = a.admin().create_group("g", request=0.5, memory="4GiB")
    b.admin().create_group("g", request=0.5, memory="4GiB")
    give_group_secret(b, "g", created.secret)
    serve_gpu(gpu_socket_dir, a.gpu_uuid, a)
    serve_gpu(gpu_socket_dir, b.gpu_uuid, b)
    on_b = 512 * MiB
    probe = LedgerProbe(runner, ledger_probe, **probe_env(a, gpu_socket_dir, created.secret, nvml_more_gpus,
                                                          GSLICE_TEST_NVML_EXTRA_UUIDS=b.gpu_uuid,
                                                          GSLICE_TEST_NVML_EXTRA_USED=on_b))
    probe.alloc(64 * MiB)
    charged_a = 64 * MiB + CONTEXT + MARGIN
    assert wait_group_used(a, "g", charged_a) == charged_a

    assert probe.ask("nvml-info 0")[-1] == "0"  # B's memory view: B's slot reconciles against B's NVML entry
    assert wait_group_used(b, "g", on_b + MARGIN) == on_b + MARGIN, "B's charge is short of what B shows"
    probe.ask("info")                            # A reconciles again
    assert wait_group_used(a, "g", charged_a) == charged_a, "A's charge moved with B's"
