"""The simulated GPU's kernel trace (GSLICE_SIM_KERNEL_TRACE): each process
writes, at exit, when each of its kernels was queued, taken by its stream,
started and ended on the engine, and how long it was asked to run."""
from __future__ import annotations

from gslice import simgpu
from gslice.simgpu import kernel_trace


def traced_spin(programs, processes, sim_name, trace_dir, kernel_ns: int, count: int):
    """driver_check spin (batches of 8, then a synchronise) with the trace on:
    (its pid, its kernel runs)."""
    env = {**simgpu.env(sim_name), kernel_trace.ENV_KERNEL_TRACE: str(trace_dir)}
    proc = processes.start([programs["driver_check"], "spin", kernel_ns, count], env)
    proc.communicate(timeout=60)
    assert proc.returncode == 0
    return proc.pid, kernel_trace.read(trace_dir, proc.pid)


def test_a_traced_process_writes_one_record_per_kernel_in_order(programs, processes, sim_name, tmp_path):
    kernel_ns, count = 200_000, 20
    _, runs = traced_spin(programs, processes, sim_name, tmp_path, kernel_ns, count)
    assert len(runs) == count
    for run in runs:
        assert run.requested_ns == kernel_ns
        # Stream time: a kernel queued behind this context's previous one
        # starts where that one ended, which may be before its worker got
        # to it (ready); never before it was queued.
        assert run.enqueued_ns <= run.start_ns < run.end_ns and run.enqueued_ns <= run.ready_ns, run
        assert run.overrun_ns >= 0, run   # the engine is held at least as long as asked
    for earlier, later in zip(runs, runs[1:]):
        assert later.start_ns >= earlier.end_ns, (earlier, later)   # one stream: one after the other
        assert later.enqueued_ns >= earlier.enqueued_ns, (earlier, later)
    with simgpu.SimGpu(sim_name) as gpu:
        [process] = gpu.processes()
        # The trace and the device's own accounting agree on the engine time.
        assert process.busy_ns == sum(run.end_ns - run.start_ns for run in runs)


def test_without_the_variable_nothing_is_written(programs, processes, sim_name, tmp_path):
    proc = processes.run([programs["driver_check"], "spin", 100_000, 3], simgpu.env(sim_name), cwd=tmp_path)
    assert proc.returncode == 0
    assert list(tmp_path.iterdir()) == []


def test_an_unwritable_directory_is_reported_and_the_program_still_succeeds(programs, processes, sim_name,
                                                                           tmp_path):
    missing = tmp_path / "no-such-directory"
    env = {**simgpu.env(sim_name), kernel_trace.ENV_KERNEL_TRACE: str(missing)}
    result = processes.run([programs["driver_check"], "spin", 100_000, 3], env)
    assert "GSLICE_SIM_KERNEL_TRACE" in result.stderr and "writable directory" in result.stderr
    assert not missing.exists()


def test_a_contexts_queued_kernels_run_back_to_back_in_stream_time(programs, processes, sim_name, tmp_path):
    # driver_check spin launches batches of 8 and synchronises: inside a
    # batch each kernel is queued before the one ahead ends, so (as on a GPU)
    # it starts exactly where that one ended, not when the simulator's
    # worker thread woke (~50 us later on these VMs: 1 ms kernels back to
    # back kept the engine ~95% busy), and runs exactly as long as asked.
    kernel_ns, count = 1_000_000, 16
    _, runs = traced_spin(programs, processes, sim_name, tmp_path, kernel_ns, count)
    assert [run.end_ns - run.start_ns for run in runs] == [kernel_ns] * count
    in_batch = [(earlier, later) for i, (earlier, later) in enumerate(zip(runs, runs[1:])) if (i + 1) % 8]
    assert len(in_batch) == count - count // 8
    for earlier, later in in_batch:
        assert later.start_ns == earlier.end_ns, (earlier, later)
