"""Engine handoffs between processes: the simulated GPU records every time
its engine goes from one process's work to another's, with the idle gap
between them, in a ring of the last HANDOFF_RING records."""
from __future__ import annotations

import time

from gslice import simgpu


def assert_one_chain(records: list[simgpu.Handoff]):
    """Consecutive handoffs continue each other: the engine went to to_pid,
    so the next handoff leaves from it, and not before it started."""
    for earlier, later in zip(records, records[1:]):
        assert later.number == earlier.number + 1, (earlier, later)
        assert later.from_pid == earlier.to_pid, (earlier, later)
        assert later.at_ns - later.gap_ns >= earlier.at_ns, (earlier, later)


def open_when_made(name: str) -> simgpu.SimGpu:
    """A view of the simulated GPU a just-started process is creating."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return simgpu.SimGpu(name)
        except (FileNotFoundError, RuntimeError) as error:  # not there yet, or not yet sized / filled in
            assert time.monotonic() < deadline, f"simulated GPU {name!r} not made in 30 s: {error}"
            time.sleep(0.01)


def test_two_processes_launching_alternately_record_handoffs_between_them(programs, processes, sim_name):
    kernel_ns, count = 5_000_000, 40  # 200 ms each: long enough to overlap on a loaded machine
    a, b = processes.spin_side_by_side(programs["driver_check"], sim_name, ("a", "b"), kernel_ns, count)

    with simgpu.SimGpu(sim_name) as gpu:
        total = gpu.handoff_count()
        records = gpu.handoffs()
        procs = {p.pid: p for p in gpu.processes()}
    # Both launch back to back and the engine alternates between waiters.
    assert total >= 2
    assert [r.number for r in records] == list(range(total))
    for r in records:
        assert {r.from_pid, r.to_pid} == {a.pid, b.pid}, r
        assert r.gap_ns >= 0, r
        # it happened while the receiver was running kernels
        assert procs[r.to_pid].first_activity_ns <= r.at_ns < procs[r.to_pid].last_activity_ns, r
    assert_one_chain(records)
    with simgpu.SimGpu(sim_name) as gpu:
        assert gpu.handoffs(since_count=total - 1) == records[-1:]
        assert gpu.handoffs(since_count=total) == []


def test_one_process_with_many_threads_and_streams_hands_off_to_nobody(programs, processes, sim_name, parse):
    # 4 threads x 100: kernels on their own and per-thread streams, and memsets (engine work too)
    values = parse(processes.run([programs["driver_check"], "threads", 4], simgpu.env(sim_name)).stdout)
    assert values["threads_done"] == "4"
    with simgpu.SimGpu(sim_name) as gpu:
        [process] = gpu.processes()
        assert process.kernels_completed == 4 * 100
        assert gpu.handoff_count() == 0
        assert gpu.handoffs() == []


def test_device_side_copies_and_fills_take_the_engine_from_another_process(programs, processes, sim_name):
    kernels = processes.start([programs["driver_check"], "spin", 5_000_000, 40], simgpu.env(sim_name))
    with open_when_made(sim_name) as gpu:
        deadline = time.monotonic() + 30
        while not gpu.kernels_completed() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert gpu.kernels_completed(), "the spinning process ran no kernel in 30 s"
        # memsets only, no kernel; its first engine use follows the spinner's kernel
        copier = processes.start([programs["driver_check"], "fills", 64 << 20, 20], simgpu.env(sim_name))
        out, err = copier.communicate(timeout=60)
        assert copier.returncode == 0, (out, err)
        kernels.communicate(timeout=60)
        copied = gpu.process(copier.pid)
        assert copied.kernels_completed == 0 and copied.busy_ns > 0
        to_copier = [r for r in gpu.handoffs() if r.to_pid == copier.pid]
        assert to_copier and to_copier[0].from_pid == kernels.pid


def test_the_ring_keeps_the_newest_records_once_it_wraps(programs, processes, sim_name):
    # Short kernels, launched back to back by two processes: thousands of
    # handoffs a second. They are stopped once the ring has wrapped.
    wanted = simgpu.HANDOFF_RING + 1000
    spinners = [processes.start([programs["driver_check"], "spin", 20_000, 1_000_000], simgpu.env(sim_name))
                for _ in range(2)]
    with open_when_made(sim_name) as gpu:
        deadline = time.monotonic() + 60
        while gpu.handoff_count() < wanted:
            assert all(p.poll() is None for p in spinners), "a spinner exited early"
            assert time.monotonic() < deadline, f"only {gpu.handoff_count()} handoffs in 60 s, wanted {wanted}"
            time.sleep(0.05)
        for proc in spinners:
            proc.kill()
            proc.wait(timeout=10)

        total = gpu.handoff_count()
        records = gpu.handoffs()
        # the oldest slot may be being overwritten while a reader copies: left out
        assert [r.number for r in records] == list(range(total - simgpu.HANDOFF_RING + 1, total))
        assert {r.from_pid for r in records} == {r.to_pid for r in records} == {p.pid for p in spinners}
        assert all(r.gap_ns >= 0 for r in records)
        assert_one_chain(records)
        assert gpu.handoffs(since_count=total - 10) == records[-10:]
        assert gpu.handoffs(since_count=5) == records  # overwritten ones are not made up
