"""The daemon's own parts in isolation: GPU discovery over a stand-in pynvml,
the group store's atomic writes, the watch fan-out, and /metrics."""
from __future__ import annotations

import asyncio
import os
import stat
import sys
import types

import pytest

from gslice.testing import wait_for
from gslice.tokend import gpu_discovery
from gslice.tokend.events import EventHub
from gslice.tokend.gpu_discovery import GpuDiscoveryError, GpuInfo
from gslice.tokend.state_store import GroupStore, StateError, StoredGroup


class _NVMLError(Exception):
    pass


class _LibraryNotFound(_NVMLError):
    pass


def fake_pynvml(devices, missing=False):
    """A pynvml look-alike over a list of (uuid, name, total bytes)."""
    module = types.ModuleType("pynvml")
    module.NVMLError = _NVMLError
    module.NVMLError_LibraryNotFound = _LibraryNotFound

    def init():
        if missing:
            raise _LibraryNotFound("libnvidia-ml.so.1 not found")

    def by_uuid(uuid):
        for index, device in enumerate(devices):
            if device[0].encode() == uuid:
                return index
        raise _NVMLError("not found")

    module.nvmlInit = init
    module.nvmlShutdown = lambda: None
    module.nvmlDeviceGetCount = lambda: len(devices)
    module.nvmlDeviceGetHandleByIndex = lambda index: index
    module.nvmlDeviceGetHandleByUUID = by_uuid
    module.nvmlDeviceGetIndex = lambda handle: handle
    module.nvmlDeviceGetUUID = lambda handle: devices[handle][0]
    module.nvmlDeviceGetName = lambda handle: devices[handle][1].encode()
    module.nvmlDeviceGetMemoryInfo = lambda handle: types.SimpleNamespace(total=devices[handle][2])
    return module


DEVICES = [("GPU-aaaa", "Sim A", 8 << 30), ("GPU-bbbb", "Sim B", 16 << 30)]


def test_discovery_by_index_and_uuid(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(DEVICES))
    assert gpu_discovery.discover() == GpuInfo(0, "GPU-aaaa", "Sim A", 8 << 30)
    assert gpu_discovery.discover("1") == GpuInfo(1, "GPU-bbbb", "Sim B", 16 << 30)
    assert gpu_discovery.discover("GPU-bbbb").index == 1
    with pytest.raises(GpuDiscoveryError, match="GPU index 5 does not exist; this machine has GPUs 0..1"):
        gpu_discovery.discover(5)
    with pytest.raises(GpuDiscoveryError, match="GPU-zzzz.*GPU-aaaa, GPU-bbbb"):
        gpu_discovery.discover("GPU-zzzz")


def test_discovery_without_nvml_says_how_to_simulate(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(DEVICES, missing=True))
    with pytest.raises(GpuDiscoveryError) as info:
        gpu_discovery.discover()
    assert "NVML not found" in str(info.value) and "LD_LIBRARY_PATH" in str(info.value)


def test_discovery_with_no_gpus(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml([]))
    with pytest.raises(GpuDiscoveryError, match="no GPUs"):
        gpu_discovery.discover()


@pytest.mark.parametrize("text", ["GPU-x,name", "GPU-x,name,0", ",name,10", "GPU-x,name,ten"])
def test_fake_gpu_flag_is_checked(text):
    with pytest.raises(GpuDiscoveryError, match="UUID,NAME,BYTES"):
        GpuInfo.parse(text)


def test_group_store_round_trip_modes_and_no_leftovers(tmp_path):
    store = GroupStore(tmp_path / "state")
    store.prepare()
    assert store.load() == []
    groups = [StoredGroup("b", 0.5, 1.0, 1 << 30, 3, "s2"), StoredGroup("a", 0.2, 0.2, 1 << 20, 2, "s1")]
    store.save(groups)
    assert store.load() == sorted(groups, key=lambda g: g.name)
    assert stat.S_IMODE(os.stat(store.path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(store.state_dir).st_mode) == 0o700
    store.save(groups[:1])
    assert store.load() == groups[:1]
    # no temp files left behind; the previous table kept as the backup; the lock while the store is open
    assert sorted(os.listdir(store.state_dir)) == ["groups.json", "groups.json.bak", "tokend.lock"]
    with pytest.raises(StateError, match=f"state directory {store.state_dir} is in use by another tokend "
                                         f"\\(pid {os.getpid()}\\)"):
        GroupStore(store.state_dir).prepare()
    store.close()
    GroupStore(store.state_dir).prepare()  # released


@pytest.mark.parametrize("content, message", [
    ("{oops", "corrupt"),
    ('{"version": 2, "groups": []}', "version 1"),
    ('{"version": 1, "groups": [{"name": "a"}]}', "malformed"),
    ('{"version": 1, "groups": [1]}', "not an object"),
])
def test_group_store_refuses_bad_files_naming_them(tmp_path, content, message):
    store = GroupStore(tmp_path)
    store.path.write_text(content)
    with pytest.raises(StateError) as info:
        store.load()
    assert str(store.path) in str(info.value) and message in str(info.value)


def test_slow_watcher_loses_oldest_events_and_never_blocks():
    async def scenario():
        dropped = []
        hub = EventHub(queue_size=3, on_drop=lambda: dropped.append(1))
        slow = hub.subscribe()
        for i in range(5):
            hub.publish("group_updated", group=f"g{i}")
        assert [slow.get_nowait().group for _ in range(3)] == ["g2", "g3", "g4"]
        assert len(dropped) == 2
        hub.unsubscribe(slow)
        hub.publish("group_updated", group="after")
        assert slow.empty() and hub.watcher_count == 0

    asyncio.run(scenario())


def test_metrics_endpoint_shows_the_daemon_state(tokend):
    admin = tokend.admin()
    created = admin.create_group("m", request=0.5, memory="1GiB")
    proc = tokend.shim_client("m", created.secret)
    proc.reserve(4096)
    assert not proc.reserve(2 << 30).granted
    token = proc.acquire()
    proc.release(token, used_us=1000)
    assert tokend.metric_value("gslice_group_clients", group="m") == 1
    assert tokend.metric_value("gslice_group_memory_used_bytes", group="m") == 4096
    assert tokend.metric_value("gslice_group_memory_quota_bytes", group="m") == 1 << 30
    assert tokend.metric_value("gslice_tokens_granted_total", group="m") == 1
    assert tokend.metric_value("gslice_token_wait_seconds_count", group="m") == 1
    assert tokend.metric_value("gslice_memory_refused_total", group="m") == 1
    assert tokend.metric_value("gslice_scheduler_decisions_total", kind="grant") == 1
    assert tokend.metric_value("gslice_gpu_info", gpu_uuid=tokend.gpu_uuid) == 1
    assert "gslice_group_share" in tokend.metrics_text()
    proc.detach()
    assert tokend.metric_value("gslice_group_clients", group="m") == 0
    # The test process is not on the GPU (NVML never lists it): its memory
    # stays charged until the reclaim timeout, and the metrics say so.
    assert tokend.metric_value("gslice_group_memory_used_bytes", group="m") == 4096
    assert tokend.metric_value("gslice_group_memory_awaiting_driver_bytes", group="m") == 4096
    wait_for(lambda: tokend.metric_value("gslice_group_memory_used_bytes", group="m") == 0, timeout=10,
             what="the reclaim timeout")
    assert tokend.metric_value("gslice_group_memory_awaiting_driver_bytes", group="m") == 0
    assert tokend.metric_value("gslice_memory_reclaims_total", group="m", how="timeout") == 1


def test_daemon_started_with_parent_pid_exits_when_its_parent_is_killed(tmp_path):
    """What keeps a killed test run from leaking daemons (gslice.testing passes --parent-pid)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    parent_code = (
        "import subprocess, sys, time\n"
        f"p = subprocess.Popen([sys.executable, '-m', 'gslice.tokend', '--state-dir', {str(tmp_path / 's')!r},"
        f" '--socket-dir', {str(tmp_path / 'r')!r}, '--fake-gpu', 'GPU-x,fake,1073741824',"
        " '--parent-pid', str(__import__('os').getpid())])\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(600)\n")
    parent = subprocess.Popen([sys.executable, "-c", parent_code], stdout=subprocess.PIPE, text=True)
    daemon_pid = int(parent.stdout.readline())
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "r" / "admin.sock").exists():
            assert time.monotonic() < deadline, "tokend did not start"
            time.sleep(0.05)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 15
        while os.path.exists(f"/proc/{daemon_pid}") and open(f"/proc/{daemon_pid}/stat").read().split()[2] != "Z":
            assert time.monotonic() < deadline, "tokend outlived its parent"
            time.sleep(0.05)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        try:
            os.kill(daemon_pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_group_secrets_are_safe_on_a_command_line():
    """A secret starting with '-' made `--secret VALUE` read as a missing value
    (seen as a flaky stand-in worker in the suite, and `gslice run --secret`)."""
    from gslice.tokend.group_admin import new_group_secret

    secrets_made = {new_group_secret() for _ in range(2000)}
    assert len(secrets_made) == 2000
    assert all(len(s) == 48 and all(c in "0123456789abcdef" for c in s) for s in secrets_made)
