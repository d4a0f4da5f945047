"""The API server, as thin as the plugin needs it: read a ResourceClaim, and
list / create / replace / delete this node's ResourceSlices. Objects travel
as plain dicts in the API's own JSON form (camelCase), so the rest of the
plugin (and the in-memory fake in fake_cluster.py) never depends on the
client library's model classes."""
from __future__ import annotations

import json
import os
from typing import Protocol


class ApiUnavailable(Exception):
    """The API server could not be asked; nothing may be concluded (in
    particular not that a claim is gone)."""


class ApiConfigError(Exception):
    """No way to reach the API server is configured (not in a pod, no kubeconfig)."""


class ClusterApi(Protocol):
    def read_claim(self, namespace: str, name: str) -> dict | None:
        """The ResourceClaim, or None when it does not exist."""

    def node_uid(self, node: str) -> str | None:
        """The Node's UID (the slice's owner: deleting the Node deletes the slice)."""

    def list_slices(self, driver: str, node: str) -> list[dict]:
        """This driver's ResourceSlices for `node`."""

    def create_slice(self, body: dict) -> dict: ...

    def replace_slice(self, name: str, body: dict) -> dict: ...

    def delete_slice(self, name: str) -> None: ...


class KubernetesApi:
    """ClusterApi over the official `kubernetes` client (resource.k8s.io/v1)."""

    def __init__(self, api_client=None):
        from kubernetes import client, config
        if api_client is None:
            try:
                config.load_incluster_config()
            except config.ConfigException as in_cluster:
                try:
                    config.load_kube_config()
                except (config.ConfigException, OSError) as kubeconfig:
                    where = os.environ.get("KUBECONFIG") or "~/.kube/config"
                    not_in_pod, no_kubeconfig = str(in_cluster).rstrip("."), str(kubeconfig).rstrip(".")
                    raise ApiConfigError(
                        f"no Kubernetes API configuration: not in a pod ({not_in_pod}; the in-pod configuration "
                        f"needs KUBERNETES_SERVICE_HOST and the service account token), and no usable kubeconfig "
                        f"at {where} ({no_kubeconfig})") from None
            api_client = client.ApiClient()
        self._client = api_client
        self._resource = client.ResourceV1Api(api_client)
        self._core = client.CoreV1Api(api_client)

    def _call(self, method, *args, missing_ok: bool = False, **kwargs):
        from kubernetes.client.exceptions import ApiException
        try:
            reply = method(*args, _preload_content=False, **kwargs)
        except ApiException as exc:
            if missing_ok and exc.status == 404:
                return None
            raise ApiUnavailable(f"API server answered {exc.status} {exc.reason}: {(exc.body or '')[:300]}") from None
        except Exception as exc:  # connection refused, TLS, timeouts (urllib3's own types)
            raise ApiUnavailable(f"API server unreachable: {exc}") from None
        data = reply.data
        return json.loads(data) if data else {}

    def read_claim(self, namespace: str, name: str) -> dict | None:
        return self._call(self._resource.read_namespaced_resource_claim, name, namespace, missing_ok=True)

    def node_uid(self, node: str) -> str | None:
        reply = self._call(self._core.read_node, node, missing_ok=True)
        return None if reply is None else reply["metadata"]["uid"]

    def list_slices(self, driver: str, node: str) -> list[dict]:
        reply = self._call(self._resource.list_resource_slice,
                           field_selector=f"spec.driver={driver},spec.nodeName={node}")
        return list(reply.get("items") or [])

    def create_slice(self, body: dict) -> dict:
        return self._call(self._resource.create_resource_slice, body)

    def replace_slice(self, name: str, body: dict) -> dict:
        return self._call(self._resource.replace_resource_slice, name, body)

    def delete_slice(self, name: str) -> None:
        self._call(self._resource.delete_resource_slice, name, missing_ok=True)
