"""A ReleaseMemory that reached tokend but got no answer in time is never
sent again: tokend applies a release whenever it reads it (on client.calls
and the Calls stream a release carries no wait and is never cancelled), so
sending it a second time counts memory free that the driver still holds,
and other processes of the group could then overshoot the quota. Lost
instead, it only over-counts until the process re-attaches."""
from __future__ import annotations

import signal
import time

import pytest

from ledger_harness import MiB, LedgerProbe, group_used, ledger_probe, wait_group_used  # noqa: F401
from shim_harness import group_env

RELEASE_WAIT_S = 5.0   # memory_ledger.c RELEASE_WAIT_MS: the flush's wait for ReleaseMemory's answer


@pytest.mark.parametrize("transport", ["client.calls", "Calls stream"])
def test_a_release_answered_too_late_is_not_sent_again(runner, tokend, ledger_probe, transport):
    created = tokend.admin().create_group("g", request=0.5, memory="2GiB")
    probe = LedgerProbe(runner, ledger_probe, **group_env(tokend, "g", created.secret),
                        GSLICE_CALLS_SOCKET="1" if transport == "client.calls" else "0")
    probe.alloc(256 * MiB)
    freed = probe.alloc(64 * MiB)
    assert wait_group_used(tokend, "g", 320 * MiB) == 320 * MiB

    # tokend stalls past the flush's wait: the release is sent, its answer late.
    tokend.process.send_signal(signal.SIGSTOP)
    try:
        probe.free(freed)            # the gate keeper flushes the release at once
        time.sleep(RELEASE_WAIT_S + 1.5)
    finally:
        tokend.process.send_signal(signal.SIGCONT)
    assert wait_group_used(tokend, "g", 256 * MiB) == 256 * MiB   # tokend applied it once it ran again

    probe.ask("info")                # a memory query flushes whatever is still pending
    time.sleep(0.5)
    held = probe.stats()["held"]
    assert held == 256 * MiB
    used = group_used(tokend, "g")
    assert used == held, (f"tokend counts {used // MiB} MiB for the group while the process holds "
                          f"{held // MiB} MiB: the release was applied twice")
    assert "not sent again" in probe.stderr()
