"""Seeding and mutating Nodes (as the kubelet and NPD write them) and NodeClaims."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping

from ..resources import NODECLAIMS, NODES
from .base import SeedingBase
from .objects import (
    JSON,
    NODEPOOL_LABEL,
    TERMINATION_FINALIZER,
    condition,
    node_ip,
    set_condition,
)


class NodeSeeding(SeedingBase):
    """Node and NodeClaim helpers of :class:`~simulator.kube_api.seeding.KubeStore`."""

    def put_node(
        self,
        name: str,
        *,
        node_pool: str | None = None,
        provider_id: str | None = None,
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        ready: bool = True,
        boot_id: str | None = None,
        taints: list[JSON] | None = None,
        unschedulable: bool = False,
        gpus: int = 8,
        conditions: list[JSON] | None = None,
    ) -> JSON:
        """Create or overwrite a Node with a realistic kubelet-written status.

        Args:
            name: Node name.
            node_pool: Value of the ``karpenter.sh/nodepool`` label, if any.
            provider_id: ``spec.providerID`` (e.g. ``aws:///us-west-2a/i-0abc...``).
            labels: Extra labels.
            annotations: Annotations.
            ready: Status of the Ready condition.
            boot_id: ``status.nodeInfo.bootID`` (random when omitted).
            taints: ``spec.taints``.
            unschedulable: ``spec.unschedulable`` (cordoned).
            gpus: ``nvidia.com/gpu`` capacity.
            conditions: Extra conditions (e.g. Node Problem Detector's), merged by type.
        """
        now = self.now()
        all_labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}
        if node_pool is not None:
            all_labels[NODEPOOL_LABEL] = node_pool
        all_labels.update(labels or {})
        spec: JSON = {}
        if provider_id is not None:
            spec["providerID"] = provider_id
        if taints:
            spec["taints"] = taints
        if unschedulable:
            spec["unschedulable"] = True
        conds = [
            condition(t, "False", f"KubeletHas{r}", f"kubelet has {m}", now)
            for t, r, m in (
                ("MemoryPressure", "SufficientMemory", "sufficient memory available"),
                ("DiskPressure", "NoDiskPressure", "no disk pressure"),
                ("PIDPressure", "SufficientPID", "sufficient PID available"),
            )
        ]
        conds.append(
            condition("Ready", "True", "KubeletReady", "kubelet is posting ready status", now)
            if ready
            else condition("Ready", "False", "KubeletNotReady", "kubelet is not ready", now)
        )
        for extra in conditions or []:
            conds = set_condition(
                conds, {"lastHeartbeatTime": now, "lastTransitionTime": now, **extra}
            )
        resources = {"cpu": "96", "memory": "1000Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
        node: JSON = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": all_labels,
                "annotations": dict(annotations or {}),
            },
            "spec": spec,
            "status": {
                "conditions": conds,
                "addresses": [
                    {"type": "InternalIP", "address": node_ip(name)},
                    {"type": "Hostname", "address": name},
                ],
                "capacity": dict(resources),
                "allocatable": dict(resources),
                "nodeInfo": {
                    "architecture": "amd64",
                    "bootID": boot_id or str(uuid.uuid4()),
                    "containerRuntimeVersion": "containerd://1.7.27",
                    "kernelVersion": "6.1.0",
                    "kubeProxyVersion": "",
                    "kubeletVersion": "v1.33.0",
                    "machineID": uuid.uuid4().hex,
                    "operatingSystem": "linux",
                    "osImage": "Amazon Linux 2023",
                    "systemUUID": str(uuid.uuid4()),
                },
            },
        }
        return self.put(NODES, node)

    def set_node_condition(
        self, name: str, type_: str, status: str, *, reason: str = "", message: str = ""
    ) -> JSON:
        """Set one node condition (added or updated by type, like the kubelet/NPD)."""
        now = self.now()
        new = condition(type_, status, reason, message, now)

        def change(node: JSON) -> None:
            st = node.setdefault("status", {})
            st["conditions"] = set_condition(st.get("conditions") or [], new)

        return self.mutate(NODES, name, None, change)

    def set_node_ready(self, name: str, ready: bool = True) -> JSON:
        """Flip the node's Ready condition."""
        if ready:
            return self.set_node_condition(
                name,
                "Ready",
                "True",
                reason="KubeletReady",
                message="kubelet is posting ready status",
            )
        return self.set_node_condition(
            name, "Ready", "False", reason="KubeletNotReady", message="kubelet is not ready"
        )

    def set_node_boot_id(self, name: str, boot_id: str | None = None) -> JSON:
        """Change ``status.nodeInfo.bootID`` (a reboot happened); random when omitted."""

        def change(node: JSON) -> None:
            node.setdefault("status", {}).setdefault("nodeInfo", {})["bootID"] = boot_id or str(
                uuid.uuid4()
            )

        return self.mutate(NODES, name, None, change)

    def put_nodeclaim(
        self,
        name: str,
        *,
        node_pool: str,
        provider_id: str | None = None,
        node_name: str | None = None,
        ready: bool = True,
        labels: Mapping[str, str] | None = None,
        finalizers: Iterable[str] = (TERMINATION_FINALIZER,),
    ) -> JSON:
        """Create or overwrite a karpenter.sh/v1 NodeClaim with its status."""
        now = self.now()
        word = "True" if ready else "Unknown"
        status: JSON = {
            "conditions": [
                {
                    "type": t,
                    "status": word,
                    "reason": t if ready else "Pending",
                    "message": "",
                    "lastTransitionTime": now,
                }
                for t in ("Launched", "Registered", "Initialized", "Ready")
            ]
        }
        if provider_id is not None:
            status["providerID"] = provider_id
        if node_name is not None:
            status["nodeName"] = node_name
        claim: JSON = {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {
                "name": name,
                "labels": {NODEPOOL_LABEL: node_pool, **dict(labels or {})},
                "finalizers": list(finalizers),
            },
            "spec": {
                "nodeClassRef": {
                    "group": "karpenter.k8s.aws",
                    "kind": "EC2NodeClass",
                    "name": "default",
                },
                "requirements": [],
                "expireAfter": "720h",
            },
            "status": status,
        }
        return self.put(NODECLAIMS, claim)
