"""k8s.io.kubelet.pkg.apis.dra.{v1,v1beta1}.DRAPlugin (one servicer for both:
their messages are the same): a thin adapter from kubelet's calls to the Driver. Each claim gets its own answer; a failure is
reported in that claim's `error` (kubelet puts it in the pod's events) and
never fails the other claims of the call."""
from __future__ import annotations

import logging

from gslice.kubelet import dra_v1_pb2 as pb

from .checkpoint import CheckpointError
from .driver import Driver, PrepareError, UnprepareError

log = logging.getLogger("gslice.dra")


class DraService:
    def __init__(self, driver: Driver):
        self.driver = driver

    def NodePrepareResources(self, request, context):
        reply = pb.NodePrepareResourcesResponse()
        for claim in request.claims:
            answer = reply.claims[claim.uid]
            try:
                devices = self.driver.prepare(claim.namespace, claim.name, claim.uid)
            except (PrepareError, CheckpointError) as exc:
                answer.error = str(exc)
                log.warning("prepare of claim %s/%s (%s) failed: %s", claim.namespace, claim.name, claim.uid, exc)
                continue
            except Exception as exc:  # a bug: still an answer, not a dropped call
                log.exception("prepare of claim %s/%s crashed", claim.namespace, claim.name)
                answer.error = f"gslice plugin internal error: {exc!r}"
                continue
            for device in devices:
                entry = answer.devices.add(request_names=device.request_names, pool_name=device.pool_name,
                                           device_name=device.device_name, cdi_device_ids=device.cdi_device_ids)
                if device.share_id:
                    entry.share_id = device.share_id
        return reply

    def NodeUnprepareResources(self, request, context):
        reply = pb.NodeUnprepareResourcesResponse()
        for claim in request.claims:
            answer = reply.claims[claim.uid]
            try:
                self.driver.unprepare(claim.uid)
            except (UnprepareError, CheckpointError) as exc:
                answer.error = str(exc)
            except Exception as exc:
                log.exception("unprepare of claim %s crashed", claim.uid)
                answer.error = f"gslice plugin internal error: {exc!r}"
        return reply
