"""Issue 9, finding 8: the RPC client's lifetime at process exit. Built with
AddressSanitizer: before the fix, gs_rpc_stop freed the client while an
application thread was still inside a call (heap-use-after-free, or exit
139 without ASan), and a call after stop could wait forever."""
from __future__ import annotations


def test_stop_while_a_thread_is_inside_a_call_is_memory_safe(tokend, start_driver, asan_driver_binary):
    tokend.behaviour.acquire = "hold"  # the call stays in flight until the stop
    driver = start_driver(asan_driver_binary, env={"ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0"})
    driver.attached()
    for wait_ms in (0, 30000):  # waiting forever, or with a deadline
        if wait_ms:
            driver = start_driver(asan_driver_binary, env={"ASAN_OPTIONS": "detect_leaks=0"})
            driver.attached()
        driver.send(f"stop-during-call {wait_ms}")
        fields, _ = driver.expect("stop-during-call ", timeout=30)
        rc_inside, rc_after = int(fields[1]), int(fields[2])
        assert rc_inside != 0 and rc_after == -1, fields  # both failed cleanly: UNAVAILABLE, never a hang
        assert driver.proc.wait(15) == 0, driver.stderr_text
        driver._stderr_thread.join(5)
        assert "AddressSanitizer" not in driver.stderr_text and "runtime error" not in driver.stderr_text, \
            driver.stderr_text


def test_rpc_client_under_thread_sanitizer(tokend, start_driver, build_dir):
    """The RPC client's threads (callers, the I/O thread, exit) under TSan:
    64 threads of concurrent calls, then a stop while a call is in flight."""
    from pathlib import Path

    from rpc_harness import build_program
    binary = build_program(Path(__file__).parent / "rpc_driver.c", build_dir / "rpc_driver_tsan",
                           ("-fsanitize=thread", "-fno-omit-frame-pointer"))
    driver = start_driver(binary, env={"TSAN_OPTIONS": "halt_on_error=1:report_signal_unsafe=0",
                                                 "LD_PRELOAD": ""})  # not scripts/test-sanitized's ASan runtime
    driver.attached()
    fields, _ = driver.run("hammer 16 50", timeout=120)
    assert fields[1:] == ["800", "0", "0"], fields
    tokend.behaviour.acquire = "hold"
    driver.send("stop-during-call 30000")
    fields, _ = driver.expect("stop-during-call ", timeout=60)
    assert driver.proc.wait(30) == 0, driver.stderr_text
    driver._stderr_thread.join(5)
    assert "ThreadSanitizer" not in driver.stderr_text, driver.stderr_text
