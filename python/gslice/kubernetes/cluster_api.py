"""The API server, as thin as the plugin needs it: read a ResourceClaim, and
list / create / replace / delete this node's ResourceSlices. Objects travel
as plain dicts in the API's own JSON form (camelCase), so the rest of the
plugin (and the in-memory fake in fake_cluster.py) never depends on the
client library's model classes."""
from __future__ import annotations

import json
import os
from typing import Protocol

# (connect, read) seconds for every API server call. The client's default is
# no timeout at all: one hung connection in the clean-up, which asks the API
# under the driver's lock, then stalls every prepare and unprepare on the
# node, while kubelet's probes (GetInfo) still see a healthy plugin.
# urllib3's default retries (3, for the idempotent calls) can repeat a
# timed-out call, so the worst case is a few times this, but bounded.
REQUEST_TIMEOUT = (5.0, 15.0)


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

    def __init__(self, api_client=None, request_timeout: tuple[float, float] = REQUEST_TIMEOUT):
        from kubernetes import client, config
        self._timeout = request_timeout
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

    def _call(self, method, *args, missing: tuple[str, str] | None = None, **kwargs):
        """The reply as a dict. `missing` = (resource, name): a 404 for exactly
        that object reads as None (it does not exist); any other 404 (e.g.
        resource.k8s.io/v1 not served) is ApiUnavailable."""
        from kubernetes.client.exceptions import ApiException
        try:
            reply = method(*args, _preload_content=False, _request_timeout=self._timeout, **kwargs)
            data = reply.data  # the body is read here: inside, so a read timeout is ApiUnavailable too
            return json.loads(data) if data else {}
        except ApiException as exc:
            if missing is not None and exc.status == 404 and _names_object(exc.body, *missing):
                return None
            raise ApiUnavailable(f"API server answered {exc.status} {exc.reason}: {_text(exc.body)[:300]}") from None
        except Exception as exc:  # connection refused, TLS, timeouts (urllib3's own types), a reply not JSON
            raise ApiUnavailable(f"API server unreachable or not answering within {self._timeout[0]:g} s "
                                 f"(connect) / {self._timeout[1]:g} s (read): {exc}") from None

    def read_claim(self, namespace: str, name: str) -> dict | None:
        return self._call(self._resource.read_namespaced_resource_claim, name, namespace,
                          missing=("resourceclaims", name))

    def node_uid(self, node: str) -> str | None:
        reply = self._call(self._core.read_node, node, missing=("nodes", node))
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
        self._call(self._resource.delete_resource_slice, name, missing=("resourceslices", name))


def _text(body) -> str:
    return body.decode(errors="replace") if isinstance(body, bytes) else (body or "")


def _names_object(body, resource: str, name: str) -> bool:
    """Whether a 404's body is the API server's Status for object `name` of
    `resource` not existing. A 404 also comes when the API group or version
    is not served (runtime-config, a rollback, a proxy in the way): that
    says nothing about the object, and reading it as "deleted" would undo
    every prepared claim on the node."""
    try:
        status = json.loads(_text(body))
    except ValueError:
        return False
    details = status.get("details") if isinstance(status, dict) else None
    return (isinstance(details, dict) and status.get("kind") == "Status" and status.get("reason") == "NotFound"
            and details.get("kind") == resource and details.get("name") == name)
