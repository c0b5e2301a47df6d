"""A Kubernetes API emulator the official ``kubernetes`` client talks to unchanged.

Typical test use::

    from simulator.kube_api import KubeApiServer

    with KubeApiServer() as api:
        api.store.put_node("gpu-1", node_pool="gpu", provider_id="aws:///us-west-2a/i-0abc")
        with api.api_client() as client:
            CoreV1Api(client).patch_node("gpu-1", {"spec": {"unschedulable": True}})
        api.faults.inject(r"^/api/v1/nodes", method="GET", status=500, times=2)

Standalone: ``python -m simulator.kube_api --port 8001 --write-kubeconfig kubeconfig``.
"""

from .errors import ApiError
from .faults import FaultInjector, FaultRule, RequestRecord
from .jobs import HostResult, HostRunner, JobKubelet, job_command
from .resources import (
    EVENTS,
    EXTERNAL_REMEDIATION_REQUESTS,
    JOBS,
    NODECLAIMS,
    NODEPOOLS,
    NODES,
    PDBS,
    PODS,
    ResourceType,
)
from .seeding import NODEPOOL_LABEL, TERMINATION_FINALIZER, KubeStore, owner_reference
from .server import KubeApiServer

__all__ = [
    "EVENTS",
    "EXTERNAL_REMEDIATION_REQUESTS",
    "JOBS",
    "NODECLAIMS",
    "NODEPOOLS",
    "NODEPOOL_LABEL",
    "NODES",
    "PDBS",
    "PODS",
    "TERMINATION_FINALIZER",
    "ApiError",
    "FaultInjector",
    "FaultRule",
    "HostResult",
    "HostRunner",
    "JobKubelet",
    "KubeApiServer",
    "KubeStore",
    "RequestRecord",
    "ResourceType",
    "job_command",
    "owner_reference",
]
