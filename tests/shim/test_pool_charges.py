"""Stream-ordered pools and the graph memory pool under the shim, with the
real tokend, on the simulated GPU behind a driver that can hold a call
inside the driver (programs/pausing_driver.c as the shim's real libcuda):

- a pool's growth charged for a call still in the driver is not given
  back by a reconciliation on another thread, and a second call's growth
  does not count on the first one's (cuMemAllocAsync, graph launches);
- growth found after the fact while tokend is away is not waited for (a
  free on another thread does not block behind it);
- cuMemAllocPitch's unmetered top-up is not given back at the free;
- a destroyed pool's charge goes (kept while blocks are outstanding);
- any number of pools is charged by its footprint (40 here);
- a cuMemAlloc block freed with cuMemFreeAsync stays charged until its
  stream reaches the free.

The interleavings are forced (the first call waits in the driver until
the program releases it), not left to chance."""
from __future__ import annotations

import subprocess
import time

import pytest

from shim_harness import PROGRAMS, ROOT, group_env, parse_kv, wait_for_line

MiB = 1 << 20


@pytest.fixture(scope="session")
def pausing_driver(build_dir, sim_lib_dir):
    out = build_dir / "libpausing_driver.so"
    subprocess.run(["gcc", "-O2", "-Wall", "-shared", "-fPIC", f"-I{ROOT / 'include'}",
                    str(PROGRAMS / "pausing_driver.c"), "-Wl,-soname,libpausing_driver.so", f"-L{sim_lib_dir}", "-Wl,--no-as-needed",
                    "-l:libcuda.so.1", "-ldl", "-lpthread", "-o", str(out)], check=True)
    return out


@pytest.fixture(scope="session")
def pool_probe(build_dir, sim_lib_dir):
    out = build_dir / "pool_probe"
    subprocess.run(["gcc", "-O2", "-Wall", f"-I{ROOT / 'include'}", str(PROGRAMS / "pool_probe.c"),
                    f"-L{sim_lib_dir}", "-l:libcuda.so.1", "-ldl", "-lpthread", "-o", str(out)], check=True)
    return out


def probe_env(runner, tokend, pausing_driver, memory, on_daemon_loss=None, **extra):
    created = tokend.admin().create_group("g", request=0.5, memory=memory, on_daemon_loss=on_daemon_loss)
    return runner.env(**group_env(tokend, "g", created.secret), GSLICE_REAL_LIBCUDA=str(pausing_driver), **extra)


def run_probe(pool_probe, env, mode):
    r = subprocess.run([str(pool_probe), mode], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, (r.stdout, r.stderr)
    return parse_kv(r.stdout)


def run_probe_losing_tokend(pool_probe, env, mode, tokend):
    """Runs mode; when it waits, stops tokend, then lets it go on."""
    p = subprocess.Popen([str(pool_probe), mode], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        before = wait_for_line(p, "waiting=", timeout=60, collect=True)
        tokend.stop()
        time.sleep(1.0)   # the shim's connection sees tokend gone
        rest, err = p.communicate("go\n", timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == 0, (before, rest, err)
    return parse_kv(before + rest), err


def test_pool_growth_in_flight_is_not_given_back_to_a_second_allocation(runner, tokend, pausing_driver, pool_probe):
    """Quota 100 MiB, two 64 MiB allocations from an empty pool at once, a
    memory query between them. Before: the query gave the first one's
    growth back, the second was granted it, and the pool ended at 128 MiB
    with 64 MiB charged."""
    out = run_probe(pool_probe, probe_env(runner, tokend, pausing_driver, "100MiB"), "alloc_race")
    assert out["held_while_first_in_driver"] == str(64 * MiB)
    assert out["held_after_query"] == str(64 * MiB)        # before: 0 (the growth given back)
    assert out["first_rc"] == "0"
    assert out["second_rc"] == "2"                          # CUDA_ERROR_OUT_OF_MEMORY
    assert out["pool_reserved"] == str(64 * MiB)
    assert out["held"] == out["pool_reserved"]


def test_graph_memory_in_flight_is_not_given_back_to_a_second_launch(runner, tokend, pausing_driver, pool_probe):
    """The same with two graphs that each take 64 MiB of graph memory.
    Before: the graph memory pool ended at 128 MiB with 64 MiB charged."""
    out = run_probe(pool_probe, probe_env(runner, tokend, pausing_driver, "100MiB"), "graph_race")
    assert out["held_while_first_in_driver"] == str(64 * MiB)
    assert out["held_after_query"] == str(64 * MiB)        # before: 0 (the growth given back)
    assert out["first_rc"] == "0"
    assert out["second_rc"] == "2"
    assert out["graph_reserved"] == str(64 * MiB)
    assert out["held"] == out["graph_reserved"]


def test_growth_seen_after_the_fact_never_waits_for_an_unreachable_tokend(runner, tokend, pausing_driver,
                                                                          pool_probe):
    """tokend stopped (policy wait, 5 s daemon wait) while an allocation is
    in the driver; the pool grows by 64 MiB nobody charged. Before: the
    allocation's reconciliation waited the 5 s for tokend holding the pools'
    lock, and a cuMemFreeAsync on another thread waited behind it."""
    env = probe_env(runner, tokend, pausing_driver, "1GiB", GSLICE_DAEMON_WAIT_MS=5000)
    out, err = run_probe_losing_tokend(pool_probe, env, "reconcile_wait", tokend)
    assert out["held_before_growth"] == str(MiB)
    assert out["alloc_rc"] == "0"
    assert float(out["alloc_after_release_s"]) < 1.0, err
    assert float(out["free_s"]) < 1.0, err


def test_pitch_top_up_unmetered_is_not_given_back_at_the_free(runner, tokend, pausing_driver, pool_probe):
    """A 1024-byte pitch over 300-byte rows (512 KiB reserved, 1 MiB
    allocated) while tokend is lost under the policy open. Before: the free
    gave back 1 MiB of which 512 KiB was never reserved."""
    env = probe_env(runner, tokend, pausing_driver, "1GiB", on_daemon_loss="open")
    out, err = run_probe_losing_tokend(pool_probe, env, "pitch_top_up", tokend)
    assert out["pitch"] == "1024"
    assert out["held_start"] == str(4 * MiB)
    assert out["held_with_worst_case"] == str(4 * MiB + 512 * 1024)
    assert out["held_after_alloc"] == str(4 * MiB + 512 * 1024), err
    assert out["held_after_free"] == str(4 * MiB), err


def test_destroyed_pool_gives_its_charge_back_unless_blocks_are_outstanding(runner, tokend, pausing_driver,
                                                                            pool_probe):
    out = run_probe(pool_probe, probe_env(runner, tokend, pausing_driver, "1GiB"), "pool_destroy")
    assert out["held_kept_by_pool"] == str(64 * MiB)
    assert out["held_after_destroy"] == "0"
    # cuda.h: with a block outstanding the pool's memory goes only after
    # it, which the shim cannot see: the charge stays (releasing late is safe)
    assert out["held_after_destroy_outstanding"] == str(32 * MiB)
    assert out["held_after_outstanding_freed"] == str(32 * MiB)


def test_pools_beyond_32_are_charged_by_their_footprint(runner, tokend, pausing_driver, pool_probe):
    """40 pools of 1 MiB each (the pool keeps what is freed). Before: the
    shim followed 32; the others were charged per allocation and given back
    at cuMemFreeAsync while their pool still held the block (the next
    query's NVML reconciliation then charged the bytes missing as the
    context's own memory, plus its 64 MiB margin: 104 MiB for 40 held)."""
    out = run_probe(pool_probe, probe_env(runner, tokend, pausing_driver, "1GiB"), "many_pools")
    for step in ("all", "after_free", "after_growth", "after_growth_free", "after_trim"):
        assert out[f"held_{step}"] == out[f"footprint_{step}"], step
    assert out["held_all"] == str(40 * MiB)
    assert out["held_after_free"] == str(40 * MiB)             # before: 39 MiB of allocations (104 in all)
    assert out["held_after_growth"] == str(47 * MiB)           # the idle 1 MiB reused, grown by 7
    assert out["held_after_growth_free"] == str(47 * MiB)      # before: 39 MiB of allocations
    assert out["held_after_trim"] == str(39 * MiB)             # the footprint shrank: given back now
    assert out["held_after_destroy_all"] == "0"


def test_stream_ordered_free_of_a_block_is_given_back_once_the_stream_passes(runner, tokend, pausing_driver,
                                                                              pool_probe):
    """cuMemAlloc of 64 MiB, cuMemFreeAsync behind a 300 ms kernel on its
    stream. Before: given back at the call, while the driver held it until
    the kernel ended (the query's NVML reconciliation then charged it as
    the context's own memory, plus its 64 MiB margin: 128 MiB)."""
    out = run_probe(pool_probe, probe_env(runner, tokend, pausing_driver, "1GiB"), "stream_free")
    assert out["held_allocated"] == str(64 * MiB)
    assert out["held_free_queued"] == str(64 * MiB)    # before: 0 for allocations (128 MiB in all)
    assert out["held_stream_passed"] == "0"
