"""Issue 9, finding 8: a forked child and its parent's connection to tokend.
Before the fix, the child kept its copy of the parent's socket open until it
first used CUDA itself (and closed it then by number, which might by then be
another of its descriptors, or one the parent's I/O thread had just closed
and freed): a parent killed with -9 stayed attached, its token and memory
held, for as long as the child lived."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from shim_harness import group_env

CHILD_PROGRAM = r"""
import ctypes, json, os, sys, time
from gslice.workloads import Driver
drv = Driver()
ptr = ctypes.c_uint64()
drv._check("cuMemAlloc_v2", drv.mem_alloc(ctypes.byref(ptr), 1 << 20))
pid = os.fork()
if pid == 0:
    time.sleep(30)      # a child that never uses CUDA
    os._exit(0)
print(json.dumps({"child": pid}), flush=True)
time.sleep(60)
"""


def test_killed_parent_is_detached_while_its_forked_child_lives(runner, tokend):
    admin = tokend.admin()
    created = admin.create_group("g", request=0.5, memory="1GiB")
    env = runner.env(**group_env(tokend, "g", created.secret))
    parent = subprocess.Popen([sys.executable, "-c", CHILD_PROGRAM], env=env, stdout=subprocess.PIPE, text=True)
    child = None
    try:
        child = json.loads(parent.stdout.readline())["child"]
        assert admin.status().group("g").clients == 1
        assert admin.status().group("g").memory_used == 1 << 20
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 5
        while admin.status().group("g").clients and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(child, 0)  # the child still lives
        assert admin.status().group("g").clients == 0
        # The parent's memory comes back once the driver has freed it (the
        # simulated GPU tears the parent down for 130 ms, NVML listing it).
        while admin.status().group("g").memory_used and time.monotonic() < deadline + 5:
            time.sleep(0.05)
        assert admin.status().group("g").memory_used == 0
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if child:
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass
