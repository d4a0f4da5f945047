"""The charge for a context's own memory (process_overhead.c) is not given
back while an allocation is in flight on another thread: the ledger holds
its reservation from before the driver's call, NVML's per-process figure
shows the memory only once the driver made it, and read naively the
context's memory seemed to vanish (NVML's used minus the allocations
charged: nothing), so the whole charge went back in the middle of the
process's largest allocation."""
from __future__ import annotations

from ledger_harness import (MiB, LedgerProbe, gate_files, group_used, ledger_probe,  # noqa: F401
                            slow_alloc_libcuda, wait_for_file, wait_group_used)
from shim_harness import group_env

CONTEXT = 256 * MiB      # the simulated context's own memory (NVML shows it, no allocation does)
MARGIN = 64 * MiB        # GSLICE_CONTEXT_GROWTH_MARGIN_MIB's default
LARGE = 1024 * MiB


def test_the_context_charge_stays_while_a_large_allocation_is_in_flight(runner, tokend, ledger_probe,
                                                                         slow_alloc_libcuda, tmp_path):
    created = tokend.admin().create_group("g", request=0.5, memory="4GiB")
    gate, entered, go = gate_files(tmp_path)
    probe = LedgerProbe(runner, ledger_probe, **group_env(tokend, "g", created.secret),
                        GSLICE_SIM_CONTEXT_MEMORY=CONTEXT, GSLICE_REAL_LIBCUDA=slow_alloc_libcuda,
                        GSLICE_TEST_SLOW_ALLOC_BYTES=LARGE, GSLICE_TEST_SLOW_ALLOC_GATE=gate)
    probe.alloc(MiB)
    charged = MiB + CONTEXT + MARGIN
    assert probe.stats()["held"] == charged
    assert wait_group_used(tokend, "g", charged) == charged

    # Another thread's cuMemAlloc: reserved, held inside the driver.
    probe.ask("alloc-thread %d" % LARGE)
    wait_for_file(entered)
    try:
        probe.ask("info")                    # a memory query reconciles against NVML meanwhile
        held = probe.stats()["held"]
        used = wait_group_used(tokend, "g", charged + LARGE)
    finally:
        go.touch()
    assert held == charged + LARGE, (f"the process holds {held // MiB} MiB at tokend while its context uses "
                                     f"{CONTEXT // MiB} MiB, its allocations {(MiB + LARGE) // MiB} MiB")
    assert used == held

    ident, rc = probe.ask("join")
    assert rc == "0" and int(ident) >= 0
    probe.ask("info")
    assert probe.stats()["held"] == charged + LARGE
    assert wait_group_used(tokend, "g", charged + LARGE) == charged + LARGE
