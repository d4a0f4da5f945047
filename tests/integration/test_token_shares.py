"""Two groups asking 30% and 70% of the GPU, both always wanting more: the
daemon's accounting and the clients' own clocks over the same sliding window
both show a 30/70 split."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

RUN_SECONDS = 6.0
WINDOW = 4.0
TOLERANCE = 0.05


@pytest.mark.slow
def test_two_groups_get_their_requested_shares(tokend_factory, tmp_path):
    tokend = tokend_factory(window=WINDOW)
    admin = tokend.admin()
    small = admin.create_group("small", request="30%", limit="100%", memory="1GiB")
    large = admin.create_group("large", request="70%", limit="100%", memory="1GiB")
    start_at = time.time() + 2.0  # both workers have attached by then
    workers = [
        subprocess.Popen([sys.executable, "-m", "gslice.testing", "share-worker", "--socket",
                          str(tokend.client_socket), "--group", name, "--secret", created.secret,
                          "--seconds", str(RUN_SECONDS), "--start-at", str(start_at)],
                         stdout=subprocess.PIPE, stderr=open(tmp_path / f"{name}.err", "wb"), text=True)
        for name, created in (("small", small), ("large", large))
    ]
    try:
        # Sample the daemon's window (the last WINDOW seconds) near the end of the run.
        time.sleep(max(0.0, start_at + RUN_SECONDS - 0.5 - time.time()))
        status = admin.status()
        sampled_at = time.time()
        results = []
        for worker, name in zip(workers, ("small", "large")):
            out = worker.communicate(timeout=60)[0]
            assert worker.returncode == 0 and out.strip(), (
                f"share worker {name!r} exited {worker.returncode} without a report:\n"
                + (tmp_path / f"{name}.err").read_text(errors="replace")[-3000:])
            results.append(json.loads(out))
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
            worker.wait()
    daemon_small, daemon_large = status.group("small").share, status.group("large").share
    daemon_fraction = daemon_small / (daemon_small + daemon_large)
    # The clients' own clocks over the same window the daemon reported.
    window_start = sampled_at - WINDOW
    held = {r["group"]: sum(max(0.0, min(end, sampled_at) - max(start, window_start)) for start, end in r["slices"])
            for r in results}
    client_fraction = held["small"] / (held["small"] + held["large"])
    whole_run = {r["group"]: r["held_seconds"] for r in results}
    print(f"daemon window shares small={daemon_small:.3f} large={daemon_large:.3f} "
          f"(small fraction {daemon_fraction:.3f}); clients in that window small={held['small']:.2f} s "
          f"large={held['large']:.2f} s (small fraction {client_fraction:.3f}); whole run small "
          f"{whole_run['small']:.2f} s, large {whole_run['large']:.2f} s; busy {status.busy_fraction:.2f}")
    assert daemon_fraction == pytest.approx(0.3, abs=TOLERANCE)
    assert client_fraction == pytest.approx(0.3, abs=TOLERANCE)
    # The token hardly idled while both wanted it: the daemon charged (nearly)
    # the whole window, and the clients held it for all but the handoffs.
    assert status.busy_fraction >= 0.95
    assert (held["small"] + held["large"]) / WINDOW >= 0.9
