"""hook/rpc_client.c against a scripted tokend (tests/rpc_client/scripted_tokend.py).

Each test drives the C client through tests/rpc_client/rpc_driver.c, a
subprocess that takes one command per line and prints one result line."""
from __future__ import annotations

import os
import subprocess
import time

import grpc
import pytest
from gslice.v1 import client_pb2

from rpc_harness import CLIENT_SOURCES, HOOK, NANOPB_OUT, NANOPB_RUNTIME, PB_SOURCES, Driver
from scripted_tokend import ScriptedTokend

UNAVAILABLE, TIMEOUT, PROTOCOL = -1, -2, -3
DEADLINE_EXCEEDED = grpc.StatusCode.DEADLINE_EXCEEDED.value[0]


def wait_for(predicate, timeout: float = 20.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"{what} not reached within {timeout} s")


def test_attach_then_every_call(tokend, start_driver):
    driver = start_driver()
    fields, _ = driver.run("wait-attached 20000")
    client_id = fields[2]
    assert fields[:2] == ["wait-attached", "1"] and client_id.endswith(f"-{driver.pid}")
    assert fields[3] == "g"
    assert fields[4:] == [str(8 << 30), "0", str(16 << 30), "1000", "50000", "2000", "3"]
    attach = tokend.record.attaches[0]
    assert (attach.group, attach.secret, attach.pid, attach.process_name, attach.protocol_version,
            attach.reserved_bytes, attach.gpu_uuid) == ("g", "s3cret", driver.pid, "rpc_driver", 1, 0, "")
    assert tokend.record.controls_opened == [client_id]

    assert driver.run("acquire 1500 5000") == (["acquire", "0", "100", "20000"], "")
    assert tokend.record.acquires == [(client_id, 1500)]
    assert driver.run("release 100 4000 700 1 5000") == (["release", "0"], "")
    release = tokend.record.releases[0]
    assert (release.client_id, release.token_id, release.used_us, release.overrun_us, release.idle) == \
        (client_id, 100, 4000, 700, True)
    assert driver.run("reserve 4096 5000") == (["reserve", "0", "1", "4096", "8192"], "")
    assert driver.run("release-memory 4096 5000") == (["release-memory", "0", "0", str(8 << 30)], "")
    assert tokend.record.memory_releases == [(client_id, 4096)]
    assert driver.run("memory-info 5000") == (["memory-info", "0", str(8 << 30), "12345", str(16 << 30)], "")
    # On the Calls stream when the daemon serves it; unary (as to an older daemon) when not.
    on_stream = ["AcquireToken", "ReleaseToken", "ReserveMemory", "ReleaseMemory"]
    assert tokend.record.stream_calls == (on_stream if tokend.behaviour.serve_calls_stream else [])


def test_calls_stream_ending_fails_its_calls_and_later_ones_go_unary(socket_dir, driver_binary):
    with ScriptedTokend(os.path.join(socket_dir, "client.sock")) as tokend:
        driver = Driver(driver_binary, tokend.socket_path)
        try:
            driver.attached()
            assert driver.run("acquire 1500 5000")[0][1] == "0"
            tokend.behaviour.end_calls_stream_at = ("ReleaseToken", grpc.StatusCode.INTERNAL)
            fields, err = driver.run("release 100 4000 0 0 5000")
            assert int(fields[1]) == 13 and "Calls stream ended" in err and "scripted end" in err, (fields, err)
            assert driver.run("release 100 4000 0 0 5000") == (["release", "0"], "")
            assert driver.run("reserve 4096 5000")[0][1] == "0"
            assert tokend.record.stream_calls == ["AcquireToken"]
            assert [r.token_id for r in tokend.record.releases] == [100]   # the unary one
            assert len(tokend.record.attaches) == 1, "the connection itself stayed up"
        finally:
            driver.close()


def test_confused_answers_on_the_calls_stream(socket_dir, driver_binary):
    """An answer of the wrong kind fails its call alone; one naming a call not
    in flight resets the stream (its calls fail; later ones go unary)."""
    with ScriptedTokend(os.path.join(socket_dir, "client.sock")) as tokend:
        driver = Driver(driver_binary, tokend.socket_path)
        try:
            driver.attached()
            tokend.behaviour.raw_stream_answer = lambda call: client_pb2.ClientAnswer(
                call_id=call.call_id, release=client_pb2.ReleaseTokenReply()).SerializeToString()
            fields, err = driver.run("acquire 1500 5000")
            assert int(fields[1]) == PROTOCOL and "another kind" in err, (fields, err)
            tokend.behaviour.raw_stream_answer = None
            assert driver.run("acquire 1500 5000")[0][1] == "0"
            assert tokend.record.stream_calls == ["AcquireToken", "AcquireToken"], "the stream went on"

            tokend.behaviour.raw_stream_answer = lambda call: client_pb2.ClientAnswer(
                call_id=call.call_id + 1000, reserve=client_pb2.ReserveMemoryReply()).SerializeToString()
            fields, err = driver.run("reserve 4096 5000")
            assert int(fields[1]) == PROTOCOL and "not in flight" in err, (fields, err)
            tokend.behaviour.raw_stream_answer = None
            assert driver.run("reserve 4096 5000")[0][1] == "0"
            assert tokend.record.stream_calls == ["AcquireToken", "AcquireToken", "ReserveMemory"]
            assert len(tokend.record.reserves) == 2 and len(tokend.record.attaches) == 1
        finally:
            driver.close()


def test_odd_endings_of_calls_on_the_stream(socket_dir, driver_binary):
    """A status code beyond gRPC's reads as UNKNOWN (never as one of the
    client's own negative codes); a stream ended OK with a call unanswered
    fails that call as UNAVAILABLE."""
    with ScriptedTokend(os.path.join(socket_dir, "client.sock")) as tokend:
        driver = Driver(driver_binary, tokend.socket_path)
        try:
            driver.attached()
            tokend.behaviour.raw_stream_answer = lambda call: client_pb2.ClientAnswer(
                call_id=call.call_id, code=2**32 - 1, message="odd").SerializeToString()
            fields, err = driver.run("acquire 1500 5000")
            assert int(fields[1]) == 2 and err == "odd", (fields, err)
            tokend.behaviour.raw_stream_answer = None
            tokend.behaviour.end_calls_stream_at = ("ReserveMemory", grpc.StatusCode.OK)
            fields, err = driver.run("reserve 4096 5000")
            assert int(fields[1]) == UNAVAILABLE and "ended it before answering" in err, (fields, err)
            assert driver.run("reserve 4096 5000")[0][1] == "0"  # unary from here
        finally:
            driver.close()


def test_calls_sent_before_the_stream_is_refused_as_unimplemented_go_again_unary(socket_dir, driver_binary):
    """An older daemon refuses Calls at once; calls already sent on it (a
    race at attach, made certain here) are started again as unary calls."""
    with ScriptedTokend(os.path.join(socket_dir, "client.sock")) as tokend:
        tokend.behaviour.end_calls_stream_at = ("AcquireToken", grpc.StatusCode.UNIMPLEMENTED)
        driver = Driver(driver_binary, tokend.socket_path)
        try:
            client_id = driver.attached()
            assert driver.run("acquire 1500 5000") == (["acquire", "0", "100", "20000"], "")
            assert tokend.record.stream_calls == [] and tokend.record.acquires == [(client_id, 1500)]
            assert driver.run("release 100 4000 0 0 5000") == (["release", "0"], "")
            assert len(tokend.record.attaches) == 1
        finally:
            driver.close()


def test_acquire_blocks_until_the_daemon_grants(tokend, start_driver):
    driver = start_driver()
    driver.attached()
    tokend.behaviour.acquire = "hold"
    driver.send("acquire 20000 30000")
    wait_for(lambda: tokend.record.acquires, what="AcquireToken reaching the daemon")
    assert not driver.has_line("acquire ", within=0.3), "acquire returned before the grant"
    tokend.release_held_acquires()
    fields, _ = driver.expect("acquire ")
    assert fields[1:] == ["0", "100", "20000"]


def test_grpc_statuses_come_back_with_their_decoded_messages(tokend, start_driver):
    driver = start_driver()
    driver.attached()
    tokend.behaviour.acquire = "refuse"
    # grpc percent-encodes '%' and non-ASCII; the client must decode both.
    tokend.behaviour.acquire_refusal = (grpc.StatusCode.DEADLINE_EXCEEDED,
                                        "no grant within 50 ms (100% busy – try later)")
    fields, err = driver.run("acquire 50 5000")
    assert fields[1] == "4"
    assert err == "no grant within 50 ms (100% busy – try later)"

    fields, err = driver.run("release 0 0 0 0 5000")
    assert (fields[1], err) == ("9", "client does not hold token 0")

    # A successful call afterwards clears the thread's last error.
    assert driver.run("memory-info 5000")[1] == ""


def test_malformed_and_oversized_replies_are_protocol_errors(tokend, start_driver):
    driver = start_driver()
    driver.attached()
    tokend.behaviour.reserve = "garbage"
    fields, err = driver.run("reserve 1 5000")
    assert int(fields[1]) == PROTOCOL and "undecodable reply" in err, err
    tokend.behaviour.reserve = "huge"
    fields, err = driver.run("reserve 1 5000")
    assert int(fields[1]) == PROTOCOL and "limit" in err, err
    tokend.behaviour.acquire = "garbage"
    fields, err = driver.run("acquire 100 5000")
    assert int(fields[1]) == PROTOCOL, err
    # The connection survives a bad reply on one stream.
    tokend.behaviour.reserve = "echo"
    assert driver.run("reserve 7 5000")[0] == ["reserve", "0", "1", "7", "14"]
    assert len(tokend.record.attaches) == 1


def test_revoke_and_quota_change_arrive_through_control(tokend, start_driver):
    driver = start_driver()
    client_id = driver.attached()
    tokend.revoke(client_id, 77, "preempted by group 'hi'")
    fields, err = driver.expect("event revoke")
    assert fields[2] == "77" and err == "preempted by group 'hi'"
    # The longest reason tokend writes fits Revoke.reason (256 bytes in client.options).
    long_reason = "preempted by client 'c-" + "x" * 60 + "' of group '" + "y" * 63 + "' (HIGH > NORMAL)"
    tokend.revoke(client_id, 78, long_reason)
    fields, err = driver.expect("event revoke")
    assert fields[2] == "78" and err == long_reason
    # Longer than the field: still delivered, cut short.
    too_long = "z" * 400
    tokend.revoke(client_id, 79, too_long)
    fields, err = driver.expect("event revoke")
    assert fields[2] == "79" and err == too_long[:255]
    tokend.change_quota(client_id, 3 << 30)
    assert driver.expect("event quota")[0][2] == str(3 << 30)
    fields, _ = driver.run("wait-attached 1000")
    assert fields[4] == str(3 << 30)
    assert len(tokend.record.attaches) == 1, "an event must not break the connection"


def test_daemon_restart_reconnects_and_redeclares_reserved_memory(tokend, start_driver):
    driver = start_driver()
    first_id = driver.attached()
    driver.expect("event attached")
    driver.run(f"set-reserved {5 << 20}")
    tokend.restart()
    driver.expect("event disconnected")
    fields, _ = driver.expect("event attached")
    assert fields[3] == "reconnect=1"
    assert fields[2] != first_id
    assert tokend.record.attaches[-1].reserved_bytes == 5 << 20
    assert tokend.record.attaches[-1].pid == driver.pid
    # Calls carry the new client id (the restarted daemon knows no other).
    driver.attached()  # the event comes from the callback, just before calls are let through
    assert driver.run("memory-info 5000")[0][1] == "0"


def test_calls_fail_fast_while_the_daemon_is_down_then_recover(tokend, start_driver):
    driver = start_driver()
    driver.attached()
    assert driver.expect("event attached")[0][3] == "reconnect=0"
    tokend.stop()
    driver.expect("event disconnected")
    started = time.monotonic()
    fields, err = driver.run("memory-info 20000")
    assert int(fields[1]) == UNAVAILABLE
    assert err.startswith("not attached to tokend: "), err
    assert time.monotonic() - started < 10, "an UNAVAILABLE call should not wait for its wait_ms"
    # Once a reconnect has failed, the reason names the socket it tried.
    wait_for(lambda: tokend.socket_path in driver.run("memory-info 100")[1], what="reason naming the socket")
    tokend.start()
    assert driver.expect("event attached")[0][3] == "reconnect=1"
    # The event comes from the attach callback, which runs just before calls
    # are let through (so the first AcquireToken finds what it set up).
    driver.attached()
    assert driver.run("memory-info 5000")[0][1] == "0"


def test_control_stream_ending_makes_the_client_attach_again(tokend, start_driver):
    driver = start_driver()
    client_id = driver.attached()
    driver.expect("event attached")
    tokend.end_control(client_id)
    driver.expect("event disconnected")
    fields, _ = driver.expect("event attached")
    assert fields[2] != client_id and fields[3] == "reconnect=1"


# Refused before any call is made: the transport of calls plays no part.
@pytest.mark.parametrize("tokend", ["calls-stream"], indirect=True)
def test_refused_attach_is_reported_and_retried(tokend, start_driver):
    tokend.behaviour.attach_refusal = (grpc.StatusCode.UNAUTHENTICATED, "wrong secret for group 'g'")
    driver = start_driver()
    fields, err = driver.run("wait-attached 3000")
    assert fields[1] == "0"
    assert "wrong secret for group 'g'" in err and "status 16" in err, err
    fields, err = driver.run("memory-info 5000")
    assert int(fields[1]) == UNAVAILABLE and "wrong secret" in err, err
    tokend.behaviour.attach_refusal = None
    # wait-attached returns at once while refused; refusals are retried every 5 s, not hammered.
    started = time.monotonic()
    fields, _ = driver.run("wait-attached 10000")
    assert fields[1] == "0" and time.monotonic() - started < 5
    wait_for(lambda: driver.run("wait-attached 1000")[0][1] == "1", timeout=30, what="attach after the refusal")
    assert 2 <= len(tokend.record.attaches) <= 4, len(tokend.record.attaches)


def test_many_threads_get_their_own_replies(tokend, start_driver):
    driver = start_driver()
    driver.attached()
    fields, _ = driver.run("hammer 8 200", timeout=120)
    assert fields[1:] == ["1600", "0", "0"], driver.backlog


def test_timed_out_call_is_abandoned_and_ended_by_its_deadline(tokend, start_driver):
    driver = start_driver()
    driver.attached()
    tokend.behaviour.acquire = "hold"
    fields, err = driver.run("acquire 20000 300")
    # The caller's deadline, or the daemon's end of the call at the same
    # wait when its answer comes first (client.calls is that fast).
    assert (int(fields[1]), "within 300 ms" in err) == (TIMEOUT, True) or \
        (int(fields[1]), "wait_ms 300" in err) == (DEADLINE_EXCEEDED, True), (fields, err)
    # grpc-timeout carried the caller's wait: the daemon gives up as well.
    wait_for(lambda: tokend.record.acquire_cancelled == 1, what="the daemon ending the call")
    tokend.behaviour.acquire = "grant"
    assert driver.run("acquire 100 5000")[0][1] == "0"
    assert len(tokend.record.attaches) == 1


def give_back_abandoned_grants(tokend, driver):
    """A grant that arrives after its caller gave up is released by the client.

    The I/O thread is held in a revoke callback while the caller times out
    and the grant arrives, so the order is certain."""
    client_id = driver.attached()
    tokend.behaviour.acquire = "hold"
    driver.run("block-next-revoke 4000")  # (the driver reads no command while in acquire)
    driver.send("acquire 20000 1000")
    wait_for(lambda: tokend.record.acquires, what="AcquireToken reaching the daemon")
    tokend.revoke(client_id, 1, "hold the I/O thread")
    driver.expect("event revoke")
    tokend.release_held_acquires()          # the grant: token 100
    assert int(driver.expect("acquire ")[0][1]) == TIMEOUT
    release = wait_for(lambda: tokend.record.releases, what="the abandoned token coming back")[0]
    assert (release.client_id, release.token_id, release.used_us, release.idle) == (client_id, 100, 0, True)
    tokend.behaviour.acquire = "grant"


def test_abandoned_grant_is_given_back(tokend, start_driver):
    driver = start_driver()
    give_back_abandoned_grants(tokend, driver)
    assert driver.run("acquire 100 5000")[0][1] == "0"


def test_abandoned_calls_are_memory_safe_under_asan(tokend, start_driver, asan_driver_binary):
    driver = start_driver(asan_driver_binary, env={"ASAN_OPTIONS": "detect_leaks=1"})
    driver.attached()
    tokend.behaviour.reserve = "slow"
    tokend.behaviour.slow_reply_s = 0.3
    tokend.behaviour.answer_past_wait_ms = True   # abandoned by the client, not ended by the daemon
    for _ in range(5):
        assert int(driver.run("reserve 64 50")[0][1]) == TIMEOUT
    time.sleep(0.5)  # their endings arrive for calls nobody waits on
    give_back_abandoned_grants(tokend, driver)
    tokend.behaviour.reserve = "echo"
    assert driver.run("hammer 4 50", timeout=120)[0][1:] == ["200", "0", "0"]
    assert driver.close() == 0, driver.stderr_text
    assert "ERROR: AddressSanitizer" not in driver.stderr_text, driver.stderr_text
    assert "ERROR: LeakSanitizer" not in driver.stderr_text, driver.stderr_text
    assert "runtime error" not in driver.stderr_text, driver.stderr_text


def test_forked_child_attaches_as_a_new_client(tokend, start_driver):
    driver = start_driver()
    parent_id = driver.attached()
    driver.send("fork")
    fields, _ = driver.expect("child attached")
    child_id, child_pid = fields[2], int(fields[3])
    assert child_pid != driver.pid and child_id != parent_id
    assert any(a.pid == child_pid for a in tokend.record.attaches)
    assert driver.expect("child memory-info")[0][2] == "0"
    assert driver.expect("fork exit")[0][2] == "0"
    assert child_id in tokend.record.detached
    # The parent's connection and Control stream were left alone.
    assert tokend.control_open(parent_id)
    assert driver.run("memory-info 5000")[0][1] == "0"
    assert len([a for a in tokend.record.attaches if a.pid == driver.pid]) == 1


def test_stop_detaches(tokend, start_driver):
    driver = start_driver()
    client_id = driver.attached()
    driver.send("stop")
    assert driver.expect("stopped")[0] == ["stopped"]
    assert driver.proc.wait(10) == 0
    assert tokend.record.detached == [client_id]


def test_client_functions_are_not_exported(build_dir):
    """libgslice.so must not export gs_rpc_* etc., even built without -fvisibility=hidden."""
    lib = build_dir / "librpc_visibility.so"
    result = subprocess.run(
        ["gcc", "-shared", "-fPIC", "-O1", f"-I{HOOK}", f"-I{NANOPB_OUT}", *map(str, CLIENT_SOURCES),
         *map(str, PB_SOURCES), str(NANOPB_RUNTIME), "-lnghttp2", "-lpthread", "-o", str(lib)],
        capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True,
                             check=True).stdout
    ours = [line for line in symbols.splitlines()
            if any(name in line for name in ("gs_rpc_", "h2_connection_", "rpc_codec_"))]
    assert ours == []


def test_unreachable_daemon_is_reported_and_stop_is_prompt(tokend, start_driver, socket_dir):
    missing = f"{socket_dir}/no-such.sock"
    driver = start_driver(socket_path=missing)
    fields, err = driver.run("wait-attached 300")
    assert fields[1] == "0"
    fields, err = driver.run("acquire 100 5000")
    assert int(fields[1]) == UNAVAILABLE and missing in err and "No such file" in err, err
    started = time.monotonic()
    driver.send("stop")
    driver.expect("stopped")
    assert driver.proc.wait(10) == 0
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("tokend", ["calls-socket"], indirect=True)
def test_a_call_in_flight_when_client_calls_fails_ends_unavailable_and_later_calls_take_the_stream(tokend,
                                                                                                   start_driver):
    """client.calls closed with an acquire on it: that call ends UNAVAILABLE
    naming why, and is not sent again (the daemon may have served it); the
    next calls go on the Calls stream, and the client stays attached."""
    driver = start_driver()
    driver.attached()
    assert driver.expect("event attached")[0][5] == "calls=socket"
    assert driver.run("acquire 100 5000")[0][1] == "0"
    assert tokend.record.socket_calls == ["AcquireToken"]
    tokend.behaviour.drop_calls_socket_at = "AcquireToken"
    fields, err = driver.run("acquire 100 5000")
    assert int(fields[1]) == UNAVAILABLE and "tokend closed the calls socket" in err, (fields, err)
    stream_calls_before = len(tokend.record.stream_calls)
    assert driver.run("acquire 100 5000")[0][1] == "0"
    assert driver.run("reserve 64 5000")[0][1] == "0"
    assert tokend.record.socket_calls == ["AcquireToken", "AcquireToken"], "a call was sent on the socket again"
    assert tokend.record.stream_calls[stream_calls_before:] == ["AcquireToken", "ReserveMemory"]
    assert len(tokend.record.attaches) == 1
