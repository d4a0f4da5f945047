"""`gslice-dra run` where it cannot work says why in one line (exit 1), with
no traceback and no sockets left: no Kubernetes API configuration (not in a
pod and no kubeconfig), or gslice installed without its `kubernetes` extra."""
from __future__ import annotations

import sys

import pytest


def _run(tmp_path, capsys):
    from gslice.kubernetes.__main__ import main
    code = main(["run", "--node-name", "node-a", "--registry-dir", str(tmp_path / "registry"),
                 "--plugins-dir", str(tmp_path / "plugins"), "--state-dir", str(tmp_path / "state"),
                 "--cdi-dir", str(tmp_path / "cdi"), "--tokend-admin-sockets", str(tmp_path / "none*")])
    return code, capsys.readouterr().err


def test_no_api_configuration(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    code, err = _run(tmp_path, capsys)
    assert code == 1
    assert "Traceback" not in err and "gslice-dra: " in err
    assert "KUBERNETES_SERVICE_HOST" in err and str(tmp_path / "no-kubeconfig") in err, err
    assert not (tmp_path / "registry").exists()


def test_without_the_kubernetes_extra(tmp_path, capsys, monkeypatch):
    for name in [m for m in sys.modules if m == "kubernetes" or m.startswith("kubernetes.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "kubernetes", None)   # import kubernetes -> ImportError
    code, err = _run(tmp_path, capsys)
    assert code == 1
    assert "pip install 'gslice[kubernetes]'" in err and "Traceback" not in err, err


@pytest.fixture
def api_configured(monkeypatch):
    """An API server (in memory) and no signal handlers left behind by cmd_run."""
    from gslice.kubernetes import cluster_api
    from gslice.kubernetes.fake_cluster import InMemoryCluster
    monkeypatch.setattr(cluster_api, "KubernetesApi", InMemoryCluster)
    monkeypatch.setattr("signal.signal", lambda *args: None)


def test_a_registry_dir_that_cannot_be_made_is_one_line(tmp_path, capsys, api_configured):
    (tmp_path / "registry").write_text("a file where the folder should be")
    code, err = _run(tmp_path, capsys)
    assert code == 1
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert "gslice-dra: cannot make the registration socket (--registry-dir)" in err, err
    assert str(tmp_path / "registry") in err
    # The DRA socket, made before, is not left behind.
    assert list((tmp_path / "plugins").rglob("*.sock")) == []


def test_a_socket_path_too_long_is_one_line(tmp_path, capsys, api_configured):
    from gslice.kubernetes.__main__ import main
    plugins = tmp_path / ("p" * 120)
    code = main(["run", "--node-name", "node-a", "--registry-dir", str(tmp_path / "registry"),
                 "--plugins-dir", str(plugins), "--state-dir", str(tmp_path / "state"),
                 "--cdi-dir", str(tmp_path / "cdi"), "--tokend-admin-sockets", str(tmp_path / "none*")])
    err = capsys.readouterr().err
    assert code == 1
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert "cannot listen on the DRA socket (--plugins-dir)" in err and "at most 107" in err, err
