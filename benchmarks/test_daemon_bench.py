"""Round trip of AcquireToken + ReleaseToken through a real tokend over its
unix socket, from a Python grpc client (the slow path every time slice
takes). Run: .venv/bin/python -m pytest benchmarks/test_daemon_bench.py -s
Aim: p50 < 1 ms on the 2-core dev machine."""
from __future__ import annotations

import statistics
import time

import pytest

from gslice.testing import TokendProcess

SAMPLES = 2000


@pytest.fixture(scope="module")
def attached_client(tmp_path_factory):
    with TokendProcess(tmp_path_factory.mktemp("bench"), metrics=False) as tokend:
        created = tokend.admin().create_group("bench", request=1.0, limit=1.0, memory="1GiB")
        client = tokend.shim_client("bench", created.secret)
        yield client


def round_trip(client) -> None:
    token = client.acquire(timeout_ms=5000)
    client.release(token, used_us=10)


def test_acquire_release_round_trip(benchmark, attached_client):
    for _ in range(50):  # warm the channel and the daemon
        round_trip(attached_client)
    benchmark(round_trip, attached_client)


def test_acquire_release_percentiles(attached_client):
    for _ in range(50):
        round_trip(attached_client)
    samples = []
    for _ in range(SAMPLES):
        started = time.perf_counter()
        round_trip(attached_client)
        samples.append(time.perf_counter() - started)
    samples.sort()
    p50 = statistics.median(samples)
    p99 = samples[int(0.99 * len(samples)) - 1]
    print(f"\nacquire+release round trip over {SAMPLES} samples: p50 {p50 * 1e3:.3f} ms, "
          f"p99 {p99 * 1e3:.3f} ms, max {samples[-1] * 1e3:.3f} ms")
    assert p50 > 0


def test_single_rpc_baseline(attached_client):
    """One trivial unary RPC (GetMemoryInfo): the floor under each half of the round trip."""
    for _ in range(50):
        attached_client.memory_info()
    samples = []
    for _ in range(SAMPLES):
        started = time.perf_counter()
        attached_client.memory_info()
        samples.append(time.perf_counter() - started)
    samples.sort()
    print(f"\nGetMemoryInfo over {SAMPLES} samples: p50 {statistics.median(samples) * 1e3:.3f} ms, "
          f"p99 {samples[int(0.99 * len(samples)) - 1] * 1e3:.3f} ms")
    assert samples[0] > 0
