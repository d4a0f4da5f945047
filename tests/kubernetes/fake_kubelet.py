"""What kubelet does with a DRA plugin, over the plugin's real unix sockets:
find the registration socket, GetInfo, connect to the endpoint it names,
NotifyRegistrationStatus, then NodePrepareResources / NodeUnprepareResources
in the API version it chose."""
from __future__ import annotations

from pathlib import Path

import grpc

from gslice.kubelet import (dra_v1_pb2 as pb, dra_v1_pb2_grpc, dra_v1beta1_pb2_grpc,
                            pluginregistration_v1_pb2 as reg_pb, pluginregistration_v1_pb2_grpc as reg_grpc)

# Both versions carry the same messages; the method paths differ.
VERSIONS = {"v1.DRAPlugin": dra_v1_pb2_grpc, "v1beta1.DRAPlugin": dra_v1beta1_pb2_grpc}


class FakeKubelet:
    def __init__(self, registry_dir: Path):
        self.registry_dir = Path(registry_dir)
        self.channels: list[grpc.Channel] = []
        self.info: reg_pb.PluginInfo | None = None

    def _channel(self, path) -> grpc.Channel:
        channel = grpc.insecure_channel(f"unix://{path}")
        self.channels.append(channel)
        return channel

    def register(self) -> reg_pb.PluginInfo:
        sockets = sorted(self.registry_dir.glob("*.sock"))
        assert len(sockets) == 1, f"expected one registration socket in {self.registry_dir}, found {sockets}"
        stub = reg_grpc.RegistrationStub(self._channel(sockets[0]))
        self.info = stub.GetInfo(reg_pb.InfoRequest(), timeout=10)
        error = ""
        if self.info.type != "DRAPlugin":
            error = f"unknown plugin type {self.info.type}"
        elif not Path(self.info.endpoint).is_socket():
            error = f"endpoint {self.info.endpoint} is not a socket"
        elif not set(self.info.supported_versions) & set(VERSIONS):
            error = f"no supported version among {list(self.info.supported_versions)}"
        stub.NotifyRegistrationStatus(reg_pb.RegistrationStatus(plugin_registered=not error, error=error),
                                      timeout=10)
        assert not error, error
        return self.info

    def _call(self, method: str, request_type, claims: list[dict], version: str):
        stub = VERSIONS[version].DRAPluginStub(self._channel(self.info.endpoint))
        request = request_type(claims=[pb.Claim(namespace=c["metadata"]["namespace"], uid=c["metadata"]["uid"],
                                                name=c["metadata"]["name"]) for c in claims])
        return getattr(stub, method)(request, timeout=30)

    def prepare(self, claims: list[dict], version: str = "v1.DRAPlugin") -> pb.NodePrepareResourcesResponse:
        return self._call("NodePrepareResources", pb.NodePrepareResourcesRequest, claims, version)

    def unprepare(self, claims: list[dict], version: str = "v1.DRAPlugin") -> pb.NodeUnprepareResourcesResponse:
        return self._call("NodeUnprepareResources", pb.NodeUnprepareResourcesRequest, claims, version)

    def close(self) -> None:
        for channel in self.channels:
            channel.close()
