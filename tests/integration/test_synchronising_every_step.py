"""Two groups, 30/70, whose processes synchronise after every 1 ms kernel,
on the simulated GPU through the shim and tokend: their shares hold.

Their synchronisations are not a burst's end (hook/gate_burst_end.c): that
needs idle gaps of 4 ms on average. Measured from after an idle release's
round trip, a gap took in the wait for the next grant, such a process
looked bursty and ended its slice at every synchronisation: the split came
out 49/51 (benchmarks/exp_shares.py, sync-every-step, 24 points off)."""
from __future__ import annotations

import time

from gslice.experiment import SharingExperiment, shares_between


def test_processes_synchronising_every_step_keep_their_shares():
    with SharingExperiment(gpu="sim") as exp:
        for name, request in (("steps-30", 0.3), ("steps-70", 0.7)):
            exp.add_group(name, request=request, limit=1.0, memory="1GiB")
            exp.spawn_workload(name, ["spin", "--kernel-us", "1000", "--sync-every", "1", "--seconds", "10"])
        time.sleep(1.5)
        start = exp.sample()
        time.sleep(5.0)
        shares = shares_between(start, exp.sample())
    assert abs(shares["steps-30"] - 0.30) <= 0.03, shares
    assert abs(shares["steps-70"] - 0.70) <= 0.03, shares
