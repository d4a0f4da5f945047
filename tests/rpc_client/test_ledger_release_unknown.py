"""The memory ledger over the real RPC client, against the scripted tokend:
a ReleaseMemory whose outcome is unknown (sent, then the transport failed
before its answer) is not sent again, while one that never left the
process is kept pending (hook/memory_ledger.c gs_ledger_flush)."""
from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from rpc_harness import HOOK, ROOT, Driver, build_program
from scripted_tokend import ScriptedTokend

LEDGER_SOURCES = ("memory_ledger.c", "config.c", "log.c")


@pytest.fixture(scope="session")
def ledger_driver_binary(build_dir) -> Path:
    return build_program(Path(__file__).parent / "ledger_driver.c", build_dir / "ledger_driver",
                         (f"-I{ROOT / 'include'}", *(str(HOOK / name) for name in LEDGER_SOURCES)))


@pytest.fixture
def calls_socket_tokend(socket_dir):
    folder = os.path.join(socket_dir, uuid.uuid4().hex[:8])
    os.mkdir(folder)
    server = ScriptedTokend(os.path.join(folder, "client.sock"), serve_calls_stream=True, serve_calls_socket=True)
    server.start()
    yield server
    server.close()


def stats(driver: Driver) -> tuple[int, int, int]:
    fields, _ = driver.run("stats")
    return int(fields[1]), int(fields[2]), int(fields[3])


def test_a_release_lost_with_client_calls_is_not_sent_again(ledger_driver_binary, calls_socket_tokend):
    tokend = calls_socket_tokend
    driver = Driver(ledger_driver_binary, tokend.socket_path)
    try:
        driver.attached()
        assert driver.run("reserve 4096")[0][1] == "0"
        # client.calls closes with the release on it, unanswered: tokend may
        # have applied it (the real one applies a release as it reads it).
        tokend.behaviour.drop_calls_socket_at = "ReleaseMemory"
        driver.run("give-back 1024")
        assert tokend.record.socket_calls.count("ReleaseMemory") == 1
        held, pending, _ = stats(driver)
        assert (held, pending) == (3072, 0), "a release of unknown outcome was kept to be sent again"
        driver.run("flush")
        driver.run("give-back 512")   # later ones go on the Calls stream
        assert tokend.record.memory_releases[-1][1] == 512
        sent = [b for _, b in tokend.record.memory_releases]
        assert sent == [512], f"ReleaseMemory sent again: {sent}"
        assert len(tokend.record.attaches) == 1
        assert stats(driver)[:2] == (2560, 0)
    finally:
        driver.close()


def test_a_release_never_sent_stays_pending(ledger_driver_binary, calls_socket_tokend):
    tokend = calls_socket_tokend
    driver = Driver(ledger_driver_binary, tokend.socket_path)
    try:
        driver.attached()
        assert driver.run("reserve 4096")[0][1] == "0"
        tokend.stop()                        # not attached: the release cannot leave the process
        driver.run("give-back 1024")
        assert stats(driver)[:2] == (3072, 1024)
        tokend.restart()                     # the re-attach declares what is held: that settles it
        driver.attached()
        assert tokend.record.attaches[-1].reserved_bytes == 3072
        assert stats(driver)[:2] == (3072, 0)
    finally:
        driver.close()
