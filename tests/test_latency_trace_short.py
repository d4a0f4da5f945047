"""benchmarks/gpu/latency_trace.py in a tiny run on the simulated GPU, so the
diagnosis a device session runs first cannot rot between runs on a GPU:
its five series, both gates' counters per series (read through
gslice_shim_stats, whose layout the C and Python sides must agree on), each
traced burst's kernel ends on the GPU, and the shims' debug logs. Figures
are not judged here."""
from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT / "benchmarks" / "gpu" / "latency_trace.py"


def test_latency_trace_records_every_series_with_the_gates_counters_and_the_gpu_marks(tmp_path):
    before = set(Path(tempfile.gettempdir()).glob("latency-trace-*"))
    result = subprocess.run([sys.executable, str(TRACE), "--gpu", "sim", "--shapes", "i", "--bursts", "20",
                             "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    report = json.loads((tmp_path / "latency_trace_driver.json").read_text())
    assert report["backend"] == "driver" and report["gpu"] == "sim"
    series = report["shapes"]["i_4096_sync4"]["series"]
    assert list(series) == ["alone_bare", "bare_beside", "gslice", "gslice_jitter", "gslice_traced"]
    assert series["alone_bare"]["latency_ms"]["n"] == 50
    for name in ("bare_beside", "gslice", "gslice_jitter", "gslice_traced"):
        assert series[name]["latency_ms"]["n"] == 20
        assert len(series[name]["starts_monotonic"]) == 20
        assert series[name]["neighbour"]["iterations"] > 0
    # Bare series have no shim to ask; shimmed ones report both gates over the series.
    assert series["bare_beside"]["shim_stats"] == {}
    for name, burster, neighbour in (("gslice", "burst_shim", "nb_shim"),
                                     ("gslice_traced", "burst_traced", "nb_traced")):
        stats = series[name]["shim_stats"]
        assert set(stats) == {burster, neighbour}
        for worker in stats.values():
            assert worker["available"] and worker["metered"] == 1, worker
            assert worker["checkpoint_interval"] >= 1 and worker["checkpoints"] > 0, worker
            assert 100 <= worker["launch_gpu_us"] <= 1000, worker   # 220 us kernels, as measured
        # A burst rings once, now and then twice (a ring whose pause ran
        # out before its grant). That the counters are the series' own is
        # test_counters_are_taken_over_the_series_and_levels_as_they_stand.
        assert 1 <= stats[burster]["doorbell_rings"] <= 40, stats[burster]
    marks = series["gslice_traced"]["gpu_marks_ms"]
    assert len(marks) == 20 and all(len(burst) == 8 for burst in marks)
    assert all(b >= a for burst in marks for a, b in zip(burst, burst[1:]))
    assert series["gslice"]["gpu_marks_ms"] is None
    # The GPU marks on the host's clock: each burst's first event is reached
    # after its start and before its end (a clock mapping off by more than a
    # millisecond fails), and the neighbour's units end in order, each after
    # its launch call.
    traced = series["gslice_traced"]
    for start, gpu_start, latency in zip(traced["starts_monotonic"], traced["gpu_starts_monotonic"],
                                         traced["latencies_ms"]):
        assert start - 0.001 <= gpu_start <= start + latency / 1e3 + 0.001, (start, gpu_start, latency)
    units = traced["neighbour_units"]
    assert len(units) >= traced["neighbour"]["iterations"] > 0
    assert all(end >= launched - 0.001 for launched, end in units)
    assert all(b[1] >= a[1] for a, b in zip(units, units[1:]))
    around = traced["neighbour_around_bursts"]
    assert len(around["queued_at_start"]) == len(around["launched_during"]) == 20
    assert sum(around["launched_during"]) + sum(around["queued_at_start"]) > 0   # a neighbour ran beside them
    assert series["gslice"]["neighbour_units"] is None
    # When each traced burst's head start rang, read from its shim's log
    # against its start: most bursts ring (some resume a lease or start at a
    # handback), after their start, and the gate's part is within the whole.
    rings = traced["rings"]
    assert 10 <= rings["bursts"] <= 20, rings
    assert 0 < rings["start_to_ring_us"]["p10"] <= rings["start_to_ring_us"]["max"] < 5000, rings
    assert 0 < rings["in_gate_us"]["p50"] <= rings["in_shim_us"]["p50"] <= rings["start_to_ring_us"]["p50"], rings
    with tarfile.open(tmp_path / "latency_trace_driver_logs.tar.gz") as tar:
        names = tar.getnames()
        assert "worker-neighbour-traced.log" in names
        traced = tar.extractfile("worker-neighbour-traced.log").read().decode()
    assert "gslice[" in traced and " debug " in traced
    assert set(Path(tempfile.gettempdir()).glob("latency-trace-*")) == before   # its work folder is gone


def test_counters_are_taken_over_the_series_and_levels_as_they_stand():
    """latency_trace.stats_over: a counter is its change over the series, a
    level (checkpoint interval, GPU time per launch, ...) its value at the
    end, and a shim that could not say is passed on as it said."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("latency_trace", TRACE)
    trace = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(TRACE.parent))
    try:
        spec.loader.exec_module(trace)
    finally:
        sys.path.remove(str(TRACE.parent))
    before = {"available": True, "doorbell_rings": 40, "checkpoint_interval": 4, "launch_gpu_us": 220}
    after = {"available": True, "doorbell_rings": 61, "checkpoint_interval": 1, "launch_gpu_us": 1800}
    assert trace.stats_over(before, after) == {"available": True, "doorbell_rings": 21, "checkpoint_interval": 1,
                                               "launch_gpu_us": 1800}
    unavailable = {"available": False, "why": "not attached yet"}
    assert trace.stats_over(before, unavailable) == unavailable


def test_launch_pattern_parses_its_arguments_without_a_gpu():
    """benchmarks/gpu/launch_pattern.py (PyTorch only, run on a GPU machine)
    imports and parses here, so it does not rot between GPU sessions; a
    unit it does not know is refused with the choices."""
    script = str(Path(__file__).resolve().parents[1] / "benchmarks" / "gpu" / "launch_pattern.py")
    shown = subprocess.run([sys.executable, script, "--help"], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0 and "--units" in shown.stdout, shown.stderr
    refused = subprocess.run([sys.executable, script, "--units", "mm123"], capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "mm4096h" in refused.stderr, refused.stderr
