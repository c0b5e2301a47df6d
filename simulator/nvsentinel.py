"""A simulated NVIDIA NVSentinel for the demo: its hand-overs, as requests in the cluster.

NVSentinel's syslog health monitor reads each Xid the driver logs; with its
fault-remediation routing the action to an external remediator (design 040), a
node with a fault becomes an ``ExternalRemediationRequest`` carrying the triaged
health event, and NVSentinel's reconciler marks the node released. This stand-in
does the same from the fleet's truth: one request per Xid fault present on a node
(the ``checkName`` NVSentinel's syslog monitor uses for Xids, the Xid as its error
code, the GPU as the impacted entity, ``recommendedAction: CUSTOM`` as the design's
routing has it), with the released conditions its reconciler writes. Not modelled:
NVSentinel's own quarantine and drain, its other monitors, its remediation.

Durations are real seconds: one thread polls the fleet.
"""

from __future__ import annotations

import logging
import threading
from types import TracebackType
from typing import Any

from simulator.fleet.model import Phase
from simulator.fleet.ports import FleetCore
from simulator.kube_api import EXTERNAL_REMEDIATION_REQUESTS, ApiError

log = logging.getLogger(__name__)

CHECK_NAME = "SysLogsXIDError"
AGENT = "syslog-health-monitor"


def request_for(
    node: str, fault_id: int, xid: int, gpu: int | None, message: str
) -> dict[str, Any]:
    """The request NVSentinel's fault-remediation would create for one Xid fault."""
    entities = [] if gpu is None else [{"entityType": "GPU", "entityValue": str(gpu)}]
    return {
        "apiVersion": "nvsentinel.dgxc.nvidia.com/v1",
        "kind": "ExternalRemediationRequest",
        "metadata": {
            "name": f"err-{node}-{fault_id}",
            "labels": {
                "nvsentinel.nvidia.com/component-class": "GPU",
                "nvsentinel.nvidia.com/node": node,
                "nvsentinel.nvidia.com/recommended-action": "CUSTOM",
            },
        },
        "spec": {
            "healthEvent": {
                "version": 1,
                "agent": AGENT,
                "componentClass": "GPU",
                "checkName": CHECK_NAME,
                "isFatal": True,
                "isHealthy": False,
                "message": message,
                "recommendedAction": "CUSTOM",
                "errorCode": [str(xid)],
                "entitiesImpacted": entities,
                "nodeName": node,
                "id": f"sim-{fault_id}",
            }
        },
    }


def released(obj: dict[str, Any]) -> None:
    """Write on a request what NVSentinel's reconciler does once its release taint is on."""
    obj["status"] = {
        "conditions": [
            {
                "type": "NVSentinelOwnershipReleased",
                "status": "True",
                "reason": "ReleaseTaintApplied",
                "message": "",
                "lastTransitionTime": obj["metadata"]["creationTimestamp"],
            },
            {
                "type": "ExternalRemediationComplete",
                "status": "Unknown",
                "reason": "AwaitingExternalSystem",
                "message": "",
                "lastTransitionTime": obj["metadata"]["creationTimestamp"],
            },
        ]
    }


class SimulatedNvSentinel:
    """Creates a request for every Xid fault that appears on the fleet's nodes.

    Args:
        fleet: The fleet whose faults are read.
        interval: Real seconds between looks.
    """

    def __init__(self, fleet: FleetCore, interval: float = 0.5) -> None:
        self._fleet = fleet
        self._interval = interval
        self._seen: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="simulated-nvsentinel", daemon=True)
        self.created = 0
        """Requests created."""

    def start(self) -> SimulatedNvSentinel:
        """Look at the fleet in a thread of its own."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop looking."""
        self._stop.set()
        self._thread.join(5.0)

    def __enter__(self) -> SimulatedNvSentinel:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def look(self) -> int:
        """Create the requests of the Xid faults not seen yet; return how many."""
        new: list[dict[str, Any]] = []
        with self._fleet.lock:
            for node in self._fleet.nodes.values():
                if node.phase is Phase.GONE:
                    continue
                for fault in node.faults:
                    if fault.xid is None or fault.id in self._seen:
                        continue
                    new.append(
                        request_for(node.name, fault.id, fault.xid, fault.gpu, fault.describe())
                    )
        store = self._fleet.store
        created = 0
        for request in new:
            name = request["metadata"]["name"]
            fault_id = int(request["spec"]["healthEvent"]["id"].removeprefix("sim-"))
            try:
                if not store.exists(EXTERNAL_REMEDIATION_REQUESTS, name):
                    store.create(EXTERNAL_REMEDIATION_REQUESTS, request)
                    store.mutate(EXTERNAL_REMEDIATION_REQUESTS, name, None, released)
                    created += 1
            except ApiError as err:
                log.warning("request %s not created (tried again next look): %s", name, err)
                continue
            self._seen.add(fault_id)
        self.created += created
        return created

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.look()
            except Exception:
                log.exception("the simulated NVSentinel's look failed; looking again")
