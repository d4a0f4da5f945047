"""Stream capture on the simulated driver follows cuda.h: per-mode
prohibitions (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, capture invalidated,
cuStreamEndCapture -> CUDA_ERROR_STREAM_CAPTURE_INVALIDATED), captured
events refused in every mode, cuThreadExchangeStreamCaptureMode, capture
info and capture into an existing graph."""
from __future__ import annotations

from gslice import simgpu

UNSUPPORTED, INVALIDATED, CAPTURED_EVENT, WRONG_THREAD = "900", "901", "907", "908"
ACTIVE, INVALID = "1", "2"


def test_capture_rules_per_mode(programs, processes, sim_name, parse):
    v = parse(processes.run([programs["capture_check"]], simgpu.env(sim_name)).stdout)
    # GLOBAL: another GLOBAL-mode thread's event query is prohibited and breaks the capture.
    assert v["global_other_query"] == UNSUPPORTED
    assert v["global_status_after_other"] == INVALID
    assert v["global_end_after_other"] == INVALIDATED
    # THREAD_LOCAL and RELAXED captures ignore other threads.
    for mode in ("local", "relaxed"):
        assert v[f"{mode}_other_query"] == "0" and v[f"{mode}_status_after_other"] == ACTIVE
        assert v[f"{mode}_end_after_other"] == "0"
    # A thread in RELAXED mode is never prohibited.
    for mode in ("global", "local", "relaxed"):
        assert v[f"{mode}_relaxed_other_query"] == "0" and v[f"{mode}_end_after_relaxed_other"] == "0"
    # The capturing thread synchronising the context: refused in every mode;
    # it invalidates GLOBAL and THREAD_LOCAL captures, not RELAXED ones.
    for mode in ("global", "local", "relaxed"):
        assert v[f"{mode}_own_ctxsync"] == UNSUPPORTED
    assert v["global_end_after_own"] == INVALIDATED and v["local_end_after_own"] == INVALIDATED
    assert v["relaxed_end_after_own"] == "0"
    # An event recorded in a capture cannot be queried in any mode.
    for mode in ("global", "local", "relaxed"):
        assert v[f"{mode}_captured_event_query"] == CAPTURED_EVENT
        assert v[f"{mode}_status_after_captured"] == INVALID
        assert v[f"{mode}_end_after_captured"] == INVALIDATED
        assert v[f"{mode}_graph_after_invalid_null"] == "1"
    # Only RELAXED captures may be ended by another thread.
    assert v["global_end_other_thread"] == WRONG_THREAD and v["local_end_other_thread"] == WRONG_THREAD
    assert v["relaxed_end_other_thread"] == "0"
    assert v["captured_event_after_end"] == "0"
    assert v["to_graph_same"] == "1" and v["to_graph_nodes"] == "4"
