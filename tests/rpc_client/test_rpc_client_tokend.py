"""hook/rpc_client.c against the real tokend (gslice.testing.TokendProcess)."""
from __future__ import annotations

import threading

import pytest

from rpc_harness import Driver

GIB = 1 << 30
FAILED_PRECONDITION, UNAUTHENTICATED = 9, 16

testing = pytest.importorskip("gslice.testing")


@pytest.fixture
def real_tokend(tmp_path):
    with testing.TokendProcess(tmp_path, gpu="fake") as tokend:
        yield tokend


@pytest.fixture
def start_real_driver(driver_binary, real_tokend):
    drivers: list[Driver] = []

    def start(group: str, secret: str, env: dict | None = None) -> Driver:
        driver = Driver(driver_binary, str(real_tokend.client_socket), group=group, secret=secret, env=env)
        drivers.append(driver)
        return driver

    yield start
    for driver in drivers:
        driver.close()


@pytest.mark.parametrize("transport", ["socket", "stream", "socket gone"])
def test_attach_and_every_call_against_tokend(real_tokend, start_real_driver, transport):
    """Every call, on the transport the client picks: client.calls where
    tokend offers it, the Calls stream when the client is told not to use
    it or it cannot be reached (offered, but its file gone)."""
    created = real_tokend.admin().create_group("rpc-a", request=0.5, memory="1GiB")
    if transport == "socket gone":
        real_tokend.client_socket.with_name("client.calls").unlink()
    driver = start_real_driver("rpc-a", created.secret,
                               env={"RPC_DRIVER_NO_CALLS_SOCKET": "1"} if transport == "stream" else None)
    fields, err = driver.run("wait-attached 20000")
    assert fields[1] == "1", err
    assert fields[3] == "rpc-a" and fields[4] == str(GIB)
    assert driver.expect("event attached")[0][5] == ("calls=socket" if transport == "socket" else "calls=stream")

    fields, err = driver.run("acquire 5000 10000")
    assert fields[1] == "0", err
    token, quantum = int(fields[2]), int(fields[3])
    assert token > 0 and quantum > 0
    fields, err = driver.run(f"release {token} 1000 0 0 10000")
    assert fields[1] == "0", err
    fields, err = driver.run(f"release {token} 1000 0 0 10000")
    assert int(fields[1]) == FAILED_PRECONDITION and err, err

    assert driver.run("reserve 4096 10000")[0][1:] == ["0", "1", "4096", str(GIB)]
    assert driver.run(f"reserve {2 * GIB} 10000")[0][1:3] == ["0", "0"]
    assert driver.run("release-memory 4096 10000")[0][1:] == ["0", "0", str(GIB)]
    fields, _ = driver.run("memory-info 10000")
    assert fields[1:4] == ["0", str(GIB), "0"] and int(fields[4]) > 0


def test_wrong_secret_is_refused_with_tokends_message(real_tokend, start_real_driver):
    real_tokend.admin().create_group("rpc-b", request=0.2, memory="1GiB")
    driver = start_real_driver("rpc-b", "not-the-secret")
    fields, err = driver.run("wait-attached 20000", timeout=15)  # returns at the refusal
    assert fields[1] == "0"
    assert f"status {UNAUTHENTICATED}" in err and "rpc-b" in err, err


def test_higher_priority_waiter_revokes_through_control(real_tokend, start_real_driver):
    admin = real_tokend.admin()
    low = admin.create_group("rpc-low", request=0.3, memory="1GiB", priority="low")
    high = admin.create_group("rpc-high", request=0.3, memory="1GiB", priority="high")
    driver = start_real_driver("rpc-low", low.secret)
    driver.attached()
    fields, err = driver.run("acquire 5000 10000")
    assert fields[1] == "0", err
    token = int(fields[2])

    waiter = real_tokend.shim_client("rpc-high", high.secret)
    granted: list[int] = []
    thread = threading.Thread(target=lambda: granted.append(waiter.acquire(timeout_ms=20000)), daemon=True)
    thread.start()
    fields, _ = driver.expect("event revoke", timeout=20)
    assert int(fields[2]) == token
    assert driver.run(f"release {token} 100 0 0 10000")[0][1] == "0"
    thread.join(20)
    assert granted and granted[0] > 0


def test_tokend_restart_reattaches_and_redeclares_memory(real_tokend, start_real_driver):
    created = real_tokend.admin().create_group("rpc-r", request=0.5, memory="1GiB")
    driver = start_real_driver("rpc-r", created.secret)
    driver.attached()
    driver.expect("event attached")
    assert driver.run(f"reserve {8 << 20} 10000")[0][1:3] == ["0", "1"]
    driver.run(f"set-reserved {8 << 20}")
    real_tokend.restart()
    driver.expect("event disconnected", timeout=30)
    fields, _ = driver.expect("event attached", timeout=60)
    assert fields[3] == "reconnect=1"
    driver.attached()  # the event comes from the callback, just before calls are let through
    # The restarted daemon learnt the reservation from the re-Attach.
    assert driver.run("memory-info 10000")[0][1:4] == ["0", str(GIB), str(8 << 20)]
