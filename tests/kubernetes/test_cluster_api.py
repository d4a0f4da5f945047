"""The real ClusterApi adapter (the official kubernetes client) against a
small local HTTP server that answers like the API server's resource.k8s.io/v1
endpoints: claims are read, the node's ResourceSlice is created, replaced
when the GPUs change, and a missing claim reads as None; any other 404 (the
API not served) and a server that does not answer are ApiUnavailable."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
from kubernetes import client

from gslice.kubernetes import resource_slices
from gslice.kubernetes import cluster_api
from gslice.kubernetes.cluster_api import ApiUnavailable, KubernetesApi
from gslice.kubernetes.fake_cluster import InMemoryCluster
from gslice.kubernetes.tokends import GpuTokend

BASE = "/apis/resource.k8s.io/v1"


class FakeApiServer(BaseHTTPRequestHandler):
    claims: dict = {}
    slices: dict = {}
    seen: list = []
    not_served = False          # True: resource.k8s.io/v1 is not served (runtime-config, rollback)
    release = threading.Event()  # a read of claim "slow" waits for it: a hung API server

    def log_message(self, *args):
        pass

    def _reply(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> dict:
        return json.loads(self.rfile.read(int(self.headers["Content-Length"])))

    def _not_found(self, resource: str, name: str, group: str = "resource.k8s.io"):
        """What the API server answers for an object that does not exist."""
        self._reply(404, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                          "message": f'{resource}.{group} "{name}" not found', "reason": "NotFound",
                          "details": {"name": name, "group": group, "kind": resource}, "code": 404})

    def _no_such_path(self):
        """What the API server answers for a path nothing serves."""
        data = b"404 page not found\n"
        self.send_response(404)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        url = urlparse(self.path)
        self.seen.append(("GET", url.path, parse_qs(url.query)))
        if self.not_served and url.path.startswith(BASE):
            return self._no_such_path()
        if url.path.startswith("/api/v1/nodes/"):
            name = url.path.rsplit("/", 1)[1]
            return self._reply(200, {"kind": "Node", "apiVersion": "v1",
                                     "metadata": {"name": name, "uid": f"uid-of-{name}"}})
        parts = url.path[len(BASE):].strip("/").split("/")
        if parts[:1] == ["namespaces"] and parts[2] == "resourceclaims":
            if parts[3] == "slow":
                self.release.wait(30)
            claim = self.claims.get((parts[1], parts[3]))
            return self._reply(200, claim) if claim else self._not_found("resourceclaims", parts[3])
        if parts == ["resourceslices"]:
            return self._reply(200, {"kind": "ResourceSliceList", "apiVersion": "resource.k8s.io/v1",
                                     "metadata": {}, "items": list(self.slices.values())})
        self._no_such_path()

    def do_POST(self):
        body = self._body()
        self.seen.append(("POST", self.path, body))
        self.slices[body["metadata"]["name"]] = body
        self._reply(201, body)

    def do_PUT(self):
        body = self._body()
        self.seen.append(("PUT", self.path, body))
        self.slices[self.path.rsplit("/", 1)[1]] = body
        self._reply(200, body)

    def do_DELETE(self):
        self.seen.append(("DELETE", self.path, None))
        if self.not_served and self.path.startswith(BASE):
            return self._no_such_path()
        name = self.path.rsplit("/", 1)[1]
        if self.slices.pop(name, None) is None:
            return self._not_found("resourceslices", name)
        self._reply(200, {"kind": "Status", "status": "Success"})


@pytest.fixture
def server():
    FakeApiServer.claims, FakeApiServer.slices, FakeApiServer.seen = {}, {}, []
    FakeApiServer.not_served = False
    FakeApiServer.release = threading.Event()
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeApiServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        FakeApiServer.release.set()  # lets a handler that waits end
        server.shutdown()
        server.server_close()


@pytest.fixture
def api(server):
    api_client = client.ApiClient(client.Configuration(host=server))
    try:
        yield KubernetesApi(api_client)
    finally:
        api_client.close()


def _gpu(memory_gib: int) -> GpuTokend:
    return GpuTokend(index=0, uuid="GPU-a", product_name="sim", memory_total=memory_gib * 1024**3,
                     admin_socket=Path("/run/gslice/gpu0/admin.sock"),
                     client_socket=Path("/run/gslice/gpu0/client/client.sock"))


def test_claims_are_read_and_missing_ones_are_none(api):
    claim = InMemoryCluster().allocate_claim("c", "node-a", "gpu-0", namespace="team")
    FakeApiServer.claims[("team", "c")] = claim
    assert api.read_claim("team", "c") == claim
    assert api.read_claim("team", "absent") is None


def test_slice_is_created_then_replaced_when_gpus_change(api):
    resource_slices.publish(api, "gslice.dev", "node-a", [_gpu(16)], 0)
    [(method, path, body)] = [s for s in FakeApiServer.seen if s[0] != "GET"]
    assert (method, path) == ("POST", f"{BASE}/resourceslices")
    assert body["spec"]["devices"][0]["capacity"]["memory"]["value"] == "16384Mi"
    assert body["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Node", "name": "node-a",
                                                    "uid": "uid-of-node-a", "controller": True}]
    listing = next(s for s in FakeApiServer.seen if s[0] == "GET")
    assert listing[2]["fieldSelector"] == ["spec.driver=gslice.dev,spec.nodeName=node-a"]

    FakeApiServer.seen.clear()
    resource_slices.publish(api, "gslice.dev", "node-a", [_gpu(16)], 0)
    assert [s for s in FakeApiServer.seen if s[0] != "GET"] == []  # nothing changed, nothing written

    resource_slices.publish(api, "gslice.dev", "node-a", [_gpu(80)], 0)
    [(method, path, body)] = [s for s in FakeApiServer.seen if s[0] != "GET"]
    assert (method, path) == ("PUT", f"{BASE}/resourceslices/node-a-gslice.dev")
    assert body["spec"]["pool"]["generation"] == 2
    assert body["metadata"]["ownerReferences"][0]["uid"] == "uid-of-node-a"

    resource_slices.publish(api, "gslice.dev", "node-a", [], 0)
    assert FakeApiServer.slices == {}


def test_unreachable_server_is_unavailable_not_missing():
    configuration = client.Configuration(host="http://127.0.0.1:1")
    configuration.retries = 0
    with client.ApiClient(configuration) as api_client:
        with pytest.raises(ApiUnavailable):
            KubernetesApi(api_client).read_claim("team", "c")


def test_fields_the_api_server_adds_do_not_cause_rewrites(api):
    resource_slices.publish(api, "gslice.dev", "node-a", [_gpu(16)], 0)
    [stored] = FakeApiServer.slices.values()
    stored["spec"]["devices"][0]["bindsToNode"] = False  # as if defaulted by a newer server
    FakeApiServer.seen.clear()
    resource_slices.publish(api, "gslice.dev", "node-a", [_gpu(16)], 0)
    assert [s for s in FakeApiServer.seen if s[0] != "GET"] == []


def test_a_404_for_the_api_not_being_served_is_not_a_deleted_claim(api):
    """Only a NotFound Status naming the claim says it is gone: a 404 because
    resource.k8s.io/v1 is not served would otherwise undo every claim."""
    FakeApiServer.claims[("team", "c")] = InMemoryCluster().allocate_claim("c", "node-a", "gpu-0", namespace="team")
    FakeApiServer.not_served = True
    with pytest.raises(ApiUnavailable, match="404"):
        api.read_claim("team", "c")
    with pytest.raises(ApiUnavailable, match="404"):
        api.delete_slice("node-a-gslice.dev")
    FakeApiServer.not_served = False
    assert api.read_claim("team", "absent") is None
    api.delete_slice("node-a-gslice.dev")   # this slice not existing: done


@pytest.mark.parametrize("status", [
    {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404,
     "message": "the server could not find the requested resource", "details": {}},
    {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404,
     "details": {"name": "other", "group": "resource.k8s.io", "kind": "resourceclaims"}},
    {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404,
     "details": {"name": "c", "group": "", "kind": "namespaces"}},
], ids=["no-details", "another-claim", "another-kind"])
def test_a_404_that_names_not_this_claim_is_unavailable(api, status, monkeypatch):
    def answer(handler):
        handler.seen.append(("GET", handler.path, None))
        handler._reply(404, status)
    monkeypatch.setattr(FakeApiServer, "do_GET", answer)
    with pytest.raises(ApiUnavailable, match="404"):
        api.read_claim("team", "c")


def test_a_hung_api_server_is_unavailable_after_the_timeout(server):
    """The client's default waits forever; the adapter's timeout ends the
    call (here shortened; urllib3 may retry it a few times)."""
    with client.ApiClient(client.Configuration(host=server)) as api_client:
        api = KubernetesApi(api_client, request_timeout=(1.0, 0.2))
        started = time.monotonic()
        with pytest.raises(ApiUnavailable, match="within"):
            api.read_claim("team", "slow")
        assert time.monotonic() - started < 5, "the call waited for the server, not for the timeout"


def test_every_call_has_a_bounded_timeout():
    """Each API call passes the adapter's timeout: one without it could hang forever."""
    calls = []

    class Recorder:
        def __getattr__(self, method):
            def call(*args, **kwargs):
                calls.append((method, kwargs.get("_request_timeout")))
                return type("Reply", (), {"data": b'{"metadata": {"uid": "u"}, "items": []}'})()
            return call

    with client.ApiClient(client.Configuration(host="http://127.0.0.1:1")) as api_client:
        api = KubernetesApi(api_client)
        api._resource = api._core = Recorder()
        api.read_claim("team", "c")
        api.node_uid("node-a")
        api.list_slices("gslice.dev", "node-a")
        api.create_slice({})
        api.replace_slice("s", {})
        api.delete_slice("s")
    assert len(calls) == 6
    for method, timeout in calls:
        assert timeout is not None and all(0 < t < 60 for t in timeout), (method, timeout)
    assert cluster_api.REQUEST_TIMEOUT == calls[0][1]
