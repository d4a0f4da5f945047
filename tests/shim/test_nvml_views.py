"""What nvidia-smi / NVML show inside a group: the process listing holds
only the group's processes (all three struct versions), and the group's
memory view agrees with the charge (context reserves included)."""
from __future__ import annotations

import json
import subprocess
import sys

from shim_harness import group_env, wait_for_line

MiB = 1 << 20

LISTING = r"""
import json, os, pynvml
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
out = {}
for name in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetComputeRunningProcesses_v2",
             "nvmlDeviceGetComputeRunningProcesses_v3"):
    out[name] = sorted(p.pid for p in getattr(pynvml, name)(h))
m = pynvml.nvmlDeviceGetMemoryInfo(h)
out["memory"] = [m.total, m.free, m.used]
print(json.dumps(out))
"""


def test_process_listing_shows_only_the_groups_processes(runner, tokend):
    admin = tokend.admin()
    a = admin.create_group("a", request=0.5, memory="2GiB")
    b = admin.create_group("b", request=0.5, memory="2GiB")
    reserve = 100
    env_a = group_env(tokend, "a", a.secret, GSLICE_CONTEXT_RESERVE_MIB=reserve)
    env_b = group_env(tokend, "b", b.secret, GSLICE_CONTEXT_RESERVE_MIB=reserve)
    mine = [runner.start("hold", "driver", 64 * MiB, **env_a) for _ in range(2)]
    theirs = runner.start("hold", "driver", 64 * MiB, **env_b)
    for p in (*mine, theirs):
        wait_for_line(p, "ready=", timeout=30)
    r = subprocess.run([sys.executable, "-c", LISTING], env=runner.env(**env_a), capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    expected = sorted(p.pid for p in mine)
    for name in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetComputeRunningProcesses_v2",
                 "nvmlDeviceGetComputeRunningProcesses_v3"):
        assert out[name] == expected, (name, out, theirs.pid)
    total, free, used = out["memory"]
    assert total == 2 << 30
    assert used == 2 * (64 + reserve) * MiB     # the group's charge: allocations + context reserves
    assert free == total - used
    # Unmetered (no group): the driver's own listing, everyone.
    r = subprocess.run([sys.executable, "-c", LISTING], env=runner.env(), capture_output=True, text=True, timeout=60)
    everyone = json.loads(r.stdout)["nvmlDeviceGetComputeRunningProcesses_v3"]
    assert set(expected + [theirs.pid]) <= set(everyone)
