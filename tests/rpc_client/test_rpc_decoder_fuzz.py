"""Issue 9, "Done means": the shim's response decoder (hook/rpc_codec.c and
the replies' handling in hook/rpc_client.c) fed malformed and truncated
replies by a fake tokend, in an AddressSanitizer + UBSan build: every call
returns a result (never a crash or a hang), and the sanitizers stay quiet."""
from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from gslice.v1 import client_pb2

VALID = {
    "AcquireToken": client_pb2.AcquireTokenReply(token_id=2**64 - 1, quantum_us=2**32 - 1),
    "ReleaseToken": client_pb2.ReleaseTokenReply(),
    "ReserveMemory": client_pb2.ReserveMemoryReply(granted=True, used=2**64 - 1, quota=2**63),
    "ReleaseMemory": client_pb2.ReleaseMemoryReply(used=1, quota=2),
    "GetMemoryInfo": client_pb2.GetMemoryInfoReply(quota=1, used=2, physical_total=3),
}
COMMAND = {
    "AcquireToken": "acquire 1000 5000",
    "ReleaseToken": "release 5 100 0 0 5000",
    "ReserveMemory": "reserve 4096 5000",
    "ReleaseMemory": "release-memory 4096 5000",
    "GetMemoryInfo": "memory-info 5000",
}
PROTOCOL_ERROR = -3


def _replies():
    method = st.sampled_from(sorted(VALID))
    return method.flatmap(lambda m: st.tuples(st.just(m), st.one_of(
        st.binary(max_size=64),
        # truncations and bit flips of a valid reply
        st.integers(0, len(VALID[m].SerializeToString())).map(lambda n, m=m: VALID[m].SerializeToString()[:n]),
        st.tuples(st.integers(0, 40), st.integers(0, 7)).map(
            lambda t, m=m: _flip(VALID[m].SerializeToString() + b"\x00" * 8, *t)),
        # a length-delimited field claiming more bytes than follow
        st.just(b"\x0a\xff\xff\xff\xff\x0f"), st.just(b"\x08" + b"\xff" * 11),
    )))


def _flip(data: bytes, index: int, bit: int) -> bytes:
    index %= len(data)
    return data[:index] + bytes([data[index] ^ (1 << bit)]) + data[index + 1:]


# Unary replies: on the Calls stream the first malformed answer resets the
# stream and every later call goes unary anyway (test_rpc_client.py covers
# the stream's malformed answers).
@pytest.mark.parametrize("tokend", ["unary-only"], indirect=True)
def test_malformed_and_truncated_replies_never_crash_the_shim(tokend, start_driver, asan_driver_binary):
    driver = start_driver(asan_driver_binary, env={"ASAN_OPTIONS": "detect_leaks=0",
                                                   "UBSAN_OPTIONS": "print_stacktrace=1"})
    client_id = driver.attached()
    seen_results = set()

    @settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
    @given(reply=_replies())
    def one_reply(reply):
        method, raw = reply
        tokend.behaviour.raw_replies = {method: raw}
        command = COMMAND[method]
        fields, _ = driver.run(command, timeout=20)
        rc = int(fields[1])
        assert rc in (0, PROTOCOL_ERROR), (method, raw, fields)
        seen_results.add(rc)
        assert driver.proc.poll() is None, driver.stderr_text

    one_reply()
    # Control events: malformed ones must not end the client either.
    # (A malformed one may end the connection: the client reconnects as a new client.)
    for raw in (b"", b"\x12", b"\x12\x05\x08", b"\x12\xff\xff\xff\x7f", b"\x1a\x02\x08\xff", b"\xff" * 20,
                b"\x12\x04\x08\x07\x12\x00"):
        # Without any call of ours, the client must be (again) attached with a
        # Control stream open (before the fix it sat in poll, "attached", with none).
        deadline = time.monotonic() + 20
        client_id = driver.attached()
        while not tokend.control_open(client_id) and time.monotonic() < deadline:
            time.sleep(0.05)
            client_id = driver.attached()
        assert tokend.control_open(client_id), (raw, driver.seen[-5:])
        tokend.push_event(client_id, raw)
        time.sleep(0.05)
    tokend.behaviour.raw_replies = {}
    fields, _ = driver.run("memory-info 5000", timeout=20)
    assert driver.proc.poll() is None, driver.stderr_text
    assert seen_results == {0, PROTOCOL_ERROR}  # both paths were exercised
    assert driver.close() == 0
    assert "AddressSanitizer" not in driver.stderr_text and "runtime error" not in driver.stderr_text, \
        driver.stderr_text
