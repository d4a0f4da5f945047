"""pluginregistration.Registration: how kubelet finds the plugin. Kubelet
watches /var/lib/kubelet/plugins_registry/, calls GetInfo on a new socket
there, connects to the endpoint it names, and reports the outcome with
NotifyRegistrationStatus."""
from __future__ import annotations

import logging
import threading

from gslice.kubelet import pluginregistration_v1_pb2 as pb

log = logging.getLogger("gslice.dra")

PLUGIN_TYPE = "DRAPlugin"
# Kubelet 1.34+ speaks v1; 1.32/1.33 speak v1beta1 (same messages).
SUPPORTED_VERSIONS = ("v1.DRAPlugin", "v1beta1.DRAPlugin")


class RegistrationService:
    def __init__(self, driver_name: str, endpoint: str):
        self.driver_name = driver_name
        self.endpoint = endpoint
        self.registered = threading.Event()
        self.last_error = ""

    def GetInfo(self, request: pb.InfoRequest, context) -> pb.PluginInfo:
        return pb.PluginInfo(type=PLUGIN_TYPE, name=self.driver_name, endpoint=self.endpoint,
                             supported_versions=list(SUPPORTED_VERSIONS))

    def NotifyRegistrationStatus(self, request: pb.RegistrationStatus, context) -> pb.RegistrationStatusResponse:
        if request.plugin_registered:
            log.info("kubelet registered driver %s (endpoint %s)", self.driver_name, self.endpoint)
            self.last_error = ""
            self.registered.set()
        else:
            self.last_error = request.error
            self.registered.clear()
            log.error("kubelet refused driver %s: %s", self.driver_name, request.error)
        return pb.RegistrationStatusResponse()
