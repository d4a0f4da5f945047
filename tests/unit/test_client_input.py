"""The operator API refuses bad arguments with InvalidValue naming the value
and the accepted form, before anything is sent; a group's on_daemon_loss is
read back and can be set at creation."""
from __future__ import annotations

import pytest

from gslice.cli import main
from gslice.cli_tables import groups_table, status_text
from gslice.client import Client, Group, GroupStatus, Priority, Status
from gslice.errors import InvalidValue
from gslice.v1 import admin_pb2, common_pb2


class RecordingClient(Client):
    """Keeps the requests it would send; answers as tokend would."""

    def __init__(self):
        super().__init__("/nonexistent/admin.sock")
        self.sent = []

    def _call(self, method, request):
        self.sent.append((method, request))
        if method == "CreateGroup":
            return admin_pb2.CreateGroupReply(group=request.group, secret="s")
        if method == "UpdateGroup":
            return admin_pb2.Group(name=request.name, on_daemon_loss=request.on_daemon_loss)
        return None


@pytest.fixture
def client():
    with RecordingClient() as recording:
        yield recording


@pytest.mark.parametrize("labels, named", [
    ({"team": 1}, "'team': 1"),
    ({1: "x"}, "1: 'x'"),
    ({"team": None}, "'team': None"),
    ([("team", "a")], "[('team', 'a')]"),
])
def test_labels_must_map_str_to_str(client, labels, named):
    with pytest.raises(InvalidValue) as info:
        client.create_group("g", request="10%", memory="1GiB", labels=labels)
    assert named in str(info.value) and "str to str" in str(info.value)
    assert client.sent == []


def test_client_id_and_reason_must_be_text(client):
    with pytest.raises(InvalidValue, match=r"client id 17 has type int; expected a str"):
        client.remove_client(17)
    with pytest.raises(InvalidValue, match=r"reason b'x' has type bytes; expected a str"):
        client.remove_client("c17", reason=b"x")
    assert client.sent == []


@pytest.mark.parametrize("flag", ["false", "yes", 1, 0, None])
def test_rotate_secret_must_be_a_bool(client, flag):
    with pytest.raises(InvalidValue) as info:
        client.update_group("g", memory="1GiB", rotate_secret=flag)
    assert repr(flag) in str(info.value) and "True or False" in str(info.value)
    assert client.sent == []


def test_an_update_that_changes_nothing_is_refused(client):
    with pytest.raises(InvalidValue, match="changes nothing"):
        client.update_group("g")
    assert client.sent == []


def test_on_daemon_loss_is_set_at_creation_and_read_back(client):
    created = client.create_group("g", request="10%", memory="1GiB", on_daemon_loss="open")
    assert client.sent[0][1].group.on_daemon_loss == common_pb2.DAEMON_LOSS_OPEN
    assert created.group.on_daemon_loss == "open"
    client.create_group("h", request="10%", memory="1GiB")
    assert client.sent[1][1].group.on_daemon_loss == common_pb2.DAEMON_LOSS_UNSPECIFIED  # the daemon's: wait
    with pytest.raises(InvalidValue, match=r"on_daemon_loss 'closed' is not one of: wait, open"):
        client.create_group("i", request="10%", memory="1GiB", on_daemon_loss="closed")
    assert client.update_group("g", on_daemon_loss="wait").on_daemon_loss == "wait"


def test_group_reads_the_policy_from_the_reply():
    def group(policy):
        return Group.from_proto(admin_pb2.Group(name="g", request=0.1, limit=0.1, memory_quota=1,
                                                priority=2, on_daemon_loss=policy))
    assert group(common_pb2.DAEMON_LOSS_OPEN).on_daemon_loss == "open"
    assert group(common_pb2.DAEMON_LOSS_WAIT).on_daemon_loss == "wait"
    assert group(common_pb2.DAEMON_LOSS_UNSPECIFIED).on_daemon_loss == "wait"
    assert group(common_pb2.DAEMON_LOSS_OPEN).to_dict()["on_daemon_loss"] == "open"
    assert "on_daemon_loss" not in group(common_pb2.DAEMON_LOSS_WAIT).to_dict()  # the JSON as before


def test_tables_show_the_policy():
    groups = [Group("a", 0.1, 0.1, 1 << 30, Priority.NORMAL, on_daemon_loss="open"),
              Group("b", 0.1, 0.1, 1 << 30, Priority.NORMAL)]
    table = groups_table(groups).splitlines()
    assert "ON DAEMON LOSS" in table[0]
    assert table[1].split()[5] == "open" and table[2].split()[5] == "wait"
    status = Status("GPU-x", "sim", 1 << 30, 10.0, "", "", 0, [],
                    [GroupStatus(g, 0.0, 0, False, 0, 0, "", 0, 0) for g in groups], [], 0.0, 0.0, 0)
    text = status_text(status)
    assert "on daemon loss: a: open" in text and "on daemon loss: b" not in text


def test_cli_create_passes_the_policy(monkeypatch, capsys):
    recording = RecordingClient()
    monkeypatch.setattr("gslice.cli._admin", lambda args: recording)
    monkeypatch.setattr("gslice.cli._client_socket", lambda args, admin=None: "/run/client.sock")
    assert main(["group", "create", "g", "--request", "10%", "--memory", "1GiB", "--on-daemon-loss", "open"]) == 0
    assert recording.sent[0][1].group.on_daemon_loss == common_pb2.DAEMON_LOSS_OPEN
    assert "open" in capsys.readouterr().out
