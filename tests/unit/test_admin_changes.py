"""Group-table changes against a slow or failing disk, in-process (a real
Coordinator and AdminService, the store's save slowed or failed): the
daemon's memory and its file always agree, an acknowledged change is never
lost, and a failed save changes nothing. Each test failed before the
change took effect only after its save (and ran to its end even when its
caller went away)."""
from __future__ import annotations

import asyncio
import json
import time

import grpc
import pytest

from gslice.v1 import admin_pb2, client_pb2
from tokend.admin_service import AdminService
from tokend.coordinator import Coordinator
from tokend.gpu_discovery import GpuInfo
from tokend.metrics import TokendMetrics
from tokend.rpc_guard import RpcFailure
from tokend.scheduler import SchedulerConfig
from tokend.state_store import GroupStore

GIB = 1 << 30


def group(name: str, request: float = 0.1, limit: float = 1.0) -> admin_pb2.Group:
    return admin_pb2.Group(name=name, request=request, limit=limit, memory_quota=GIB)


class Daemon:
    """A coordinator on a temp state directory whose saves can be slowed or failed."""

    def __init__(self, state_dir):
        self.store = GroupStore(state_dir)
        self.store.prepare()
        self.coordinator = Coordinator(GpuInfo(0, "GPU-x", "fake", 16 * GIB), SchedulerConfig(), self.store,
                                       TokendMetrics("GPU-x"))
        self.coordinator.bind_loop(asyncio.get_running_loop())
        self.admin = AdminService(self.coordinator)
        self._real_save = self.store.save

    def saves_take(self, seconds: float, then_fail: bool = False) -> None:
        def save(table):
            time.sleep(seconds)  # a busy disk's fsync, on the worker thread
            if then_fail:
                raise OSError(28, "No space left on device")
            self._real_save(table)
        self.store.save = save

    def saves_normal(self) -> None:
        self.store.save = self._real_save

    def on_disk(self) -> dict[str, dict]:
        return {g["name"]: g for g in json.loads(self.store.path.read_text())["groups"]}

    def close(self) -> None:
        self.store.close()


async def _cancelled_during_its_save(call) -> None:
    task = asyncio.ensure_future(call)
    await asyncio.sleep(0.05)  # inside the slow save
    task.cancel()  # the CLI's deadline, Ctrl-C
    with pytest.raises(asyncio.CancelledError):
        await task


def test_changes_whose_callers_went_away_still_agree_with_the_file(tmp_path):
    async def scenario():
        daemon = Daemon(tmp_path)
        admin, coordinator = daemon.admin, daemon.coordinator
        await admin.CreateGroup(admin_pb2.CreateGroupRequest(group=group("g", 0.5)), None)
        daemon.saves_take(0.2)
        await _cancelled_during_its_save(admin.UpdateGroup(admin_pb2.UpdateGroupRequest(name="g", rotate_secret=True),
                                                           None))
        await _cancelled_during_its_save(admin.CreateGroup(admin_pb2.CreateGroupRequest(group=group("x")), None))
        daemon.saves_normal()
        await admin.CreateGroup(admin_pb2.CreateGroupRequest(group=group("y")), None)  # acknowledged
        daemon.saves_take(0.2)
        await _cancelled_during_its_save(admin.DeleteGroup(admin_pb2.DeleteGroupRequest(name="x"), None))
        await admin.ListGroups(None, None)
        await asyncio.sleep(0.3)  # any save still on a worker lands by now
        disk = daemon.on_disk()
        assert sorted(disk) == sorted(coordinator.secrets) == ["g", "y"]
        assert {name: g["secret"] for name, g in disk.items()} == coordinator.secrets
        daemon.close()
    asyncio.run(scenario())


def test_status_during_a_create_s_save_answers_without_the_new_group(tmp_path):
    async def scenario():
        daemon = Daemon(tmp_path)
        daemon.saves_take(0.2)
        creating = asyncio.ensure_future(daemon.coordinator.create_group(group("n")))
        await asyncio.sleep(0.05)
        assert [g.group.name for g in daemon.coordinator.status().groups] == []  # was: NotFound (no ledger entry)
        await creating
        assert [g.group.name for g in daemon.coordinator.status().groups] == ["n"]
        daemon.close()
    asyncio.run(scenario())


def _charge(coordinator: Coordinator, secret: str, seconds: float) -> None:
    client = coordinator.attach(client_pb2.AttachRequest(group="g", secret=secret, pid=1)).client_id
    coordinator.acquire_start(client, 1000)
    token = coordinator.scheduler.holder()[1]
    coordinator.release_token(client_pb2.ReleaseTokenRequest(client_id=client, token_id=token,
                                                             used_us=int(seconds * 1e6)))
    coordinator.detach(client, "test")


def test_a_delete_whose_save_fails_changes_nothing_and_refuses_attaches_alike_meanwhile(tmp_path):
    async def scenario():
        daemon = Daemon(tmp_path)
        coordinator = daemon.coordinator
        secret = (await coordinator.create_group(group("g", 0.5, 0.5))).secret
        await coordinator.create_group(group("other"))
        _charge(coordinator, secret, 0.02)
        before = coordinator.scheduler.accounting("g", time.monotonic())
        daemon.saves_take(0.1, then_fail=True)
        deleting = asyncio.ensure_future(coordinator.delete_group("g"))
        await asyncio.sleep(0.03)
        with pytest.raises(RpcFailure) as refused:  # was: "group 'g' does not exist (known: other)"
            coordinator.attach(client_pb2.AttachRequest(group="g", secret=secret, pid=2))
        assert refused.value.code == grpc.StatusCode.UNAUTHENTICATED and "other" not in refused.value.message
        with pytest.raises(OSError, match="No space"):
            await deleting
        assert coordinator.scheduler.accounting("g", time.monotonic()) == before  # was: a fresh, uncharged group
        assert sorted(daemon.on_disk()) == ["g", "other"]
        daemon.saves_normal()
        assert coordinator.attach(client_pb2.AttachRequest(group="g", secret=secret, pid=2)).client_id
        daemon.close()
    asyncio.run(scenario())


def test_an_update_whose_save_fails_never_took_effect(tmp_path):
    async def scenario():
        daemon = Daemon(tmp_path)
        coordinator = daemon.coordinator
        await coordinator.create_group(group("g", 0.2, 0.2))
        decisions = coordinator.scheduler.decisions
        seen = []
        daemon.saves_take(0.1, then_fail=True)
        updating = asyncio.ensure_future(coordinator.update_group(admin_pb2.UpdateGroupRequest(name="g", limit=0.9)))
        await asyncio.sleep(0.03)
        seen.append(coordinator.scheduler.group("g").limit)  # during the save: the old spec rules
        with pytest.raises(OSError):
            await updating
        assert seen == [0.2] and coordinator.scheduler.group("g").limit == 0.2
        assert coordinator.scheduler.decisions == decisions
        daemon.close()
    asyncio.run(scenario())
