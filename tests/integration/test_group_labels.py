"""Group labels (who a group is for) are kept across restarts and shown;
tokend's client socket can live in a directory of its own."""
from __future__ import annotations

import json

import pytest

from gslice.errors import InvalidValue
from gslice.testing import TokendProcess

LABELS = {"gslice.dev/claim": "team/train", "gslice.dev/pods": "team/train-0"}


def test_labels_survive_a_restart_and_reach_groups_json(tmp_path):
    with TokendProcess(tmp_path, gpu="fake") as tokend:
        tokend.admin().create_group("a", request="30%", memory="1GiB", labels=LABELS)
        tokend.admin().create_group("plain", request="10%", memory="1GiB")
        tokend.restart()
        groups = {g.name: g for g in tokend.admin().list_groups()}
        assert groups["a"].labels == LABELS and groups["plain"].labels == {}
        assert tokend.admin().status().group("a").group.labels == LABELS
        stored = {g["name"]: g for g in json.loads((tokend.state_dir / "groups.json").read_text())["groups"]}
        assert stored["a"]["labels"] == LABELS and "labels" not in stored["plain"]
        tokend.admin().delete_group("a")
        tokend.admin().create_group("a", request="30%", memory="1GiB")
        assert tokend.admin().get_group("a").labels == {}  # a new group of the same name starts unlabelled


@pytest.mark.parametrize("labels", [{"bad key": "x"}, {"k": "line\nbreak"}, {f"k{i}": "v" for i in range(17)}])
def test_bad_labels_are_refused(tmp_path, labels):
    with TokendProcess(tmp_path, gpu="fake") as tokend:
        with pytest.raises(InvalidValue):
            tokend.admin().create_group("a", request="30%", memory="1GiB", labels=labels)
        assert tokend.admin().list_groups() == []


def test_client_socket_in_its_own_directory(tmp_path):
    with TokendProcess(tmp_path, gpu="fake", own_client_dir=True) as tokend:
        status = tokend.admin().status()
        assert status.client_socket == str(tokend.client_socket_dir / "client.sock")
        assert status.gpu_index == 0
        assert sorted(p.name for p in tokend.client_socket_dir.iterdir()) == ["client.calls", "client.doorbell",
                                                                             "client.sock"]
        assert (tokend.socket_dir / "admin.sock").is_socket()
        created = tokend.admin().create_group("g", request="50%", memory="1GiB")
        with tokend.shim_client("g", created.secret) as client:
            client.release(client.acquire(), used_us=100)
