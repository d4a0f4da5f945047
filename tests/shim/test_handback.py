"""The GPU handed back at a burst's end, with the real shim and tokend on the
simulated GPU, read from the simulator's kernel trace: a high-priority
process bursting (8 x 0.5 ms, synchronise, think 20 ms) beside a
low-priority one that never stops launching 0.25 ms kernels.

- Handback (hook/gate_handback.c): the burst's process tells the next
  group on the doorbell page when its slice ends, and the neighbour starts
  before tokend's grant reaches it (without it: the release's round trip,
  then the grant's).
- Burst end (hook/gate_burst_end.c): the burst's process ends its slice
  when its own synchronisation finds nothing left on the GPU, not at the
  keeper's next idle check.

Each is compared with the same run with it turned off (GSLICE_HANDBACK=0,
GSLICE_BURST_END=0): what the GPU idles between a burst's last kernel and
the neighbour's next one, median over the bursts."""
from __future__ import annotations

import statistics
import time

import pytest

from shim_harness import group_env, parse_kv, wait_for_line

MS = 1_000_000  # ns


def _burst_ends(burst_runs) -> list[int]:
    """Each burst's last kernel's end, ns (kernels more than 5 ms apart
    start a new burst)."""
    ends, last_end = [], None
    for run in sorted(burst_runs, key=lambda r: r.start_ns):
        if last_end is not None and run.start_ns - last_end > 5 * MS:
            ends.append(last_end)
        last_end = run.end_ns if last_end is None else max(last_end, run.end_ns)
    return ends


def _gaps_after_bursts(burst_runs, neighbour_runs) -> list[int]:
    """Per burst: its last kernel's end to the neighbour's next kernel's
    start, ns."""
    starts = sorted(r.start_ns for r in neighbour_runs)
    gaps = []
    for end in _burst_ends(burst_runs):
        later = [s for s in starts if s >= end]
        if later:
            gaps.append(later[0] - end)
    return gaps


def _neighbours_launching_after_bursts(burst_runs, runs_by_neighbour, within_ns: int) -> list[int]:
    """Per burst: how many neighbour processes had a kernel reach the driver
    within `within_ns` of its end. One slice at a time, only the process
    holding its group's slice launches there."""
    return [sum(any(end <= run.enqueued_ns < end + within_ns for run in runs) for runs in runs_by_neighbour)
            for end in _burst_ends(burst_runs)]


def _bursts_beside_a_neighbour(runner, tokend, trace_dir, neighbours: int = 1, neighbour_kernel_ns: int = MS // 4,
                               **setting) -> tuple[dict, list[dict], float, list[int]]:
    """One run: the processes' counters (the neighbours' in a list), the
    median gap (us) after a burst, and per burst how many neighbours
    launched within the provisional slice's bound (2 ms) of its end."""
    from gslice.simgpu import kernel_trace

    admin = tokend.admin()
    groups = {}
    for kind in ("low", "high"):
        name = f"{kind}-{trace_dir.name}"
        groups[kind] = (name, admin.create_group(name, request=0.2, limit=1.0, memory="1GiB", priority=kind).secret)
    trace_dir.mkdir()

    def env(kind):
        return {**group_env(tokend, *groups[kind]), **setting, kernel_trace.ENV_KERNEL_TRACE: str(trace_dir)}

    looping = [runner.start("loop", "driver", 3, neighbour_kernel_ns, 0, **env("low")) for _ in range(neighbours)]
    for neighbour in looping:
        wait_for_line(neighbour, "ready=1")
    time.sleep(0.3)
    bursting = runner.start("bursts", "driver", 1.5, MS // 2, 8, 20, **env("high"))
    burst_text, err = bursting.communicate(timeout=60)
    assert bursting.returncode == 0, err
    burst_out = parse_kv(burst_text)
    outs = []
    for neighbour in looping:
        out_text, err_text = neighbour.communicate(timeout=30)
        assert neighbour.returncode == 0, err_text
        outs.append(parse_kv(out_text))
    assert int(burst_out["bursts"]) >= 20, burst_out
    burst_runs = kernel_trace.read(trace_dir, bursting.pid)
    runs_by_neighbour = [kernel_trace.read(trace_dir, neighbour.pid) for neighbour in looping]
    gaps = _gaps_after_bursts(burst_runs, [run for runs in runs_by_neighbour for run in runs])
    assert len(gaps) >= 15, gaps
    for name, _ in groups.values():  # room for the next run's requests
        admin.delete_group(name)
    return (burst_out, outs, statistics.median(gaps) / 1e3,
            _neighbours_launching_after_bursts(burst_runs, runs_by_neighbour, 2 * MS))


def _with_and_without(runner, tokend, tmp_path, **off) -> tuple[tuple, tuple]:
    """The bursts beside a neighbour with a mechanism and without it (the
    `off` setting), pair after pair until the one with it leaves the GPU
    less idle after a burst, two pairs at most: on a busy machine one
    pair's medians can come out the wrong way round. The counters, not
    the gaps, show the mechanism cut (no handback, no burst end at all)."""
    for attempt in range(2):
        on = _bursts_beside_a_neighbour(runner, tokend, tmp_path / f"on{attempt}")
        without = _bursts_beside_a_neighbour(runner, tokend, tmp_path / f"off{attempt}", **off)
        if on[2] < without[2]:
            break
    return on, without


@pytest.mark.timing
def test_the_neighbour_starts_at_the_bursts_handback_not_at_its_grant(runner, tokend, tmp_path):
    (burst, [neighbour], gap_us, _), (burst_off, [neighbour_off], gap_off_us, _) = _with_and_without(
        runner, tokend, tmp_path, GSLICE_HANDBACK=0)
    bursts = int(burst["bursts"])
    print(f"GPU idle after a burst, median: {gap_us:.0f} us with the handback, {gap_off_us:.0f} us without; "
          f"{bursts} bursts, {neighbour['shim_handback_starts']} handback starts "
          f"({neighbour['shim_handback_lapses']} lapsed)")
    # Not after every burst: a lapse (a grant past the 2 ms bound, as on a
    # busy machine) makes the neighbour ignore handbacks for 100 ms, about
    # 4 bursts.
    assert int(burst["shim_handbacks_sent"]) >= bursts // 5, burst
    assert int(neighbour["shim_handback_starts"]) >= bursts // 5, neighbour
    assert int(burst_off["shim_handbacks_sent"]) == 0 and int(neighbour_off["shim_handback_starts"]) == 0
    assert gap_us < gap_off_us


def test_a_neighbour_of_2_ms_kernels_starts_at_handbacks_too(runner, tokend, tmp_path):
    """Its kernels are at the head start's limit (2 ms of work per item).
    Its GPU time per launch, a mean over back-to-back launches, carries the
    gaps between them (~2016 us): read as its work item, it refused every
    head start (latency benchmark, two 2 ms groups: GPU busy 76 -> 72%)."""
    burst, [neighbour], _, _ = _bursts_beside_a_neighbour(runner, tokend, tmp_path / "two-ms",
                                                          neighbour_kernel_ns=2 * MS)
    assert int(neighbour["shim_handback_starts"]) >= int(burst["bursts"]) // 5, neighbour


def test_only_the_waiter_tokend_names_starts_at_a_handback(runner, tokend, tmp_path):
    # Two processes of the neighbour's group wait at each burst's end; tokend
    # grants one (its first in line) and names it on the page. Had both
    # started, they would share the GPU until the grant, and the other's
    # provisional slice would lapse (then it ignores handbacks for 100 ms).
    # Read from the kernel trace, not the lapse count: a grant later than
    # the provisional bound on a busy machine is a lapse too.
    burst, neighbours, _, launching = _bursts_beside_a_neighbour(runner, tokend, tmp_path / "two", neighbours=2)
    bursts = int(burst["bursts"])
    starts = sum(int(n["shim_handback_starts"]) for n in neighbours)
    lapses = sum(int(n["shim_handback_lapses"]) for n in neighbours)
    one, both = launching.count(1), launching.count(2)
    print(f"{bursts} bursts: {starts} handback starts, {lapses} lapsed; "
          f"within 2 ms of a burst's end one waiter launched after {one}, both after {both}")
    assert starts >= bursts // 5, neighbours
    assert both <= max(1, (one + both) // 10), launching


@pytest.mark.timing
def test_a_bursts_slice_ends_at_its_own_synchronisation(runner, tokend, tmp_path):
    (burst, _, gap_us, _), (burst_off, _, gap_off_us, _) = _with_and_without(runner, tokend, tmp_path,
                                                                             GSLICE_BURST_END=0)
    print(f"GPU idle after a burst, median: {gap_us:.0f} us ending at the sync, {gap_off_us:.0f} us at idle checks")
    assert int(burst["shim_burst_ends"]) >= int(burst["bursts"]) // 5, burst
    assert int(burst_off["shim_burst_ends"]) == 0, burst_off
    assert gap_us < gap_off_us

