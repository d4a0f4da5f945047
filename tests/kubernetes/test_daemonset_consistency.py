"""The DaemonSet's containers agree with each other, with the plugin's
defaults and with the node image: every host path the plugin reads or writes
into a CDI spec is mounted in its container at the same path; the tokends'
admin sockets match the plugin's glob and their client sockets sit in a
folder of their own; the init step installs the shim where the plugin looks
for it; every container runs the node image of this version."""
from __future__ import annotations

import argparse
import fnmatch
import re
from pathlib import Path

import pytest
import yaml

from gslice import __version__

ROOT = Path(__file__).resolve().parents[2]
DAEMONSET = ROOT / "deploy" / "kubernetes" / "daemonset.yaml"
CONTAINERFILE = ROOT / "deploy" / "node" / "Containerfile"


@pytest.fixture(scope="module")
def pod():
    return yaml.safe_load(DAEMONSET.read_text())["spec"]["template"]["spec"]


def _container(pod, name):
    return next(c for c in [*pod.get("initContainers", []), *pod["containers"]] if c["name"] == name)


def _mounts(pod, container) -> dict[str, str]:
    """mountPath -> hostPath of a container's hostPath volumes."""
    volumes = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    return {m["mountPath"]: volumes[m["name"]] for m in container.get("volumeMounts", []) if m["name"] in volumes}


def _dra_args(container) -> argparse.Namespace:
    from gslice.kubernetes.__main__ import build_parser
    return build_parser().parse_args(container["command"][1:])


def _tokend_args(container) -> argparse.Namespace:
    from gslice.tokend.__main__ import add_arguments
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(container["command"][1:])


def _covered(path: Path, mounts: dict[str, str]) -> bool:
    """Whether `path` is inside a mount that shows the same host path."""
    return any(path == Path(m) or Path(m) in path.parents for m, host in mounts.items() if m == host)


def test_same_paths_in_the_containers_as_on_the_host(pod):
    for container in [*pod.get("initContainers", []), *pod["containers"]]:
        for mount_path, host_path in _mounts(pod, container).items():
            assert mount_path == host_path, (container["name"], mount_path, host_path)


def test_the_plugin_sees_every_host_path_it_uses(pod):
    plugin = _container(pod, "plugin")
    args = _dra_args(plugin)
    mounts = _mounts(pod, plugin)
    glob_root = Path(args.tokend_admin_sockets.split("*")[0]).parent
    for what, path in [("registry dir", args.registry_dir), ("plugins dir", args.plugins_dir),
                       ("CDI dir", args.cdi_dir), ("state dir (secrets, checkpoint)", args.state_dir),
                       ("shim root (checked before a spec names it)", args.shim_root),
                       ("tokend sockets", glob_root)]:
        assert _covered(Path(path), mounts), f"plugin container does not mount {what} {path}: {sorted(mounts)}"


def test_tokends_are_found_by_the_plugin_and_keep_clients_apart(pod):
    plugin_args = _dra_args(_container(pod, "plugin"))
    plugin_mounts = _mounts(pod, _container(pod, "plugin"))
    tokends = [c for c in pod["containers"] if c["name"].startswith("tokend-")]
    assert tokends
    for container in tokends:
        args = _tokend_args(container)
        admin = args.socket_dir / "admin.sock"
        assert fnmatch.fnmatch(str(admin), plugin_args.tokend_admin_sockets), (admin, plugin_args.tokend_admin_sockets)
        assert args.client_socket_dir is not None and args.client_socket_dir != args.socket_dir
        assert _covered(args.client_socket_dir, plugin_mounts)
        env = {e["name"]: e.get("value") for e in container.get("env", [])}
        assert env.get("GSLICE_ADMIN_SOCKET") == str(admin), "the probes' `gslice status` asks this socket"
        port = str(args.metrics_port)
        assert any(str(p["containerPort"]) == port for p in container.get("ports", []))


def test_the_init_step_installs_the_shim_where_the_plugin_looks(pod):
    init = _dra_args(_container(pod, "install-shim"))
    plugin = _dra_args(_container(pod, "plugin"))
    assert init.command == "install-shim"
    assert (init.shim_root, init.shim_version) == (plugin.shim_root, plugin.shim_version)
    assert _covered(init.shim_root, _mounts(pod, _container(pod, "install-shim")))


def test_every_container_runs_the_node_image_of_this_version(pod):
    images = {c["image"] for c in [*pod.get("initContainers", []), *pod["containers"]]}
    assert len(images) == 1, images
    [image] = images
    repository, _, tag = image.rpartition(":")
    assert tag == __version__, f"{image}: the tag should be this version, {__version__}"
    # The name the Containerfile's build line gives the image.
    built = re.search(r"-t (\S+?):", CONTAINERFILE.read_text()).group(1)
    assert repository.rsplit("/", 1)[-1] == built, (image, built)


def test_the_plugins_probes_ask_the_socket_it_serves(pod):
    from gslice.kubernetes.__main__ import build_parser
    plugin = _container(pod, "plugin")
    served = _dra_args(plugin)
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        command = ((plugin.get(probe) or {}).get("exec") or {}).get("command")
        if command:
            asked = build_parser().parse_args(command[1:])
            assert (asked.command, asked.driver_name, asked.registry_dir) == (
                "check", served.driver_name, served.registry_dir), probe
