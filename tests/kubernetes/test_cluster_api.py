"""The real ClusterApi adapter (the official kubernetes client) against a
small local HTTP server that answers like the API server's resource.k8s.io/v1
endpoints: claims are read, the node's ResourceSlice is created, replaced
when the GPUs change, and a missing claim reads as None."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
from kubernetes import client

from gslice.kubernetes import resource_slices
from gslice.kubernetes.cluster_api import ApiUnavailable, KubernetesApi
from gslice.kubernetes.fake_cluster import InMemoryCluster
from gslice.kubernetes.tokends import GpuTokend

BASE = "/apis/resource.k8s.io/v1"


class FakeApiServer(BaseHTTPRequestHandler):
    claims: dict = {}
    slices: dict = {}
    seen: list = []

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

    def _not_found(self):
        self._reply(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404})

    def do_GET(self):
        url = urlparse(self.path)
        self.seen.append(("GET", url.path, parse_qs(url.query)))
        if url.path.startswith("/api/v1/nodes/"):
            name = url.path.rsplit("/", 1)[1]
            return self._reply(200, {"kind": "Node", "apiVersion": "v1",
                                     "metadata": {"name": name, "uid": f"uid-of-{name}"}})
        parts = url.path[len(BASE):].strip("/").split("/")
        if parts[:1] == ["namespaces"] and parts[2] == "resourceclaims":
            claim = self.claims.get((parts[1], parts[3]))
            return self._reply(200, claim) if claim else self._not_found()
        if parts == ["resourceslices"]:
            return self._reply(200, {"kind": "ResourceSliceList", "apiVersion": "resource.k8s.io/v1",
                                     "metadata": {}, "items": list(self.slices.values())})
        self._not_found()

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
        self.slices.pop(self.path.rsplit("/", 1)[1], None)
        self._reply(200, {"kind": "Status", "status": "Success"})


@pytest.fixture
def api():
    FakeApiServer.claims, FakeApiServer.slices, FakeApiServer.seen = {}, {}, []
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeApiServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    configuration = client.Configuration(host=f"http://127.0.0.1:{server.server_address[1]}")
    api_client = client.ApiClient(configuration)
    try:
        yield KubernetesApi(api_client)
    finally:
        api_client.close()
        server.shutdown()
        server.server_close()


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
