"""Seeding Pods (with the status the kubelet writes) and PodDisruptionBudgets."""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from ..resources import PDBS, PODS
from .base import SeedingBase
from .objects import JSON, owner_reference


class PodSeeding(SeedingBase):
    """Pod and PDB helpers of :class:`~simulator.kube_api.seeding.KubeStore`."""

    def put_pod(
        self,
        namespace: str,
        name: str,
        *,
        node_name: str | None = None,
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        phase: str = "Running",
        ready: bool = True,
        owner: tuple[str, str] | None = None,
        gpus: int = 0,
        finalizers: list[str] | None = None,
        termination_grace_seconds: int = 30,
    ) -> JSON:
        """Create or overwrite a Pod with a status (phase, Ready condition).

        Args:
            namespace: Namespace.
            name: Pod name.
            node_name: ``spec.nodeName`` (scheduled) or None (pending, unscheduled).
            labels: Labels.
            annotations: Annotations (e.g. ``kubernetes.io/config.mirror``).
            phase: ``status.phase``.
            ready: Ready condition status.
            owner: Controller owner ``(kind, name)``, e.g. ``("DaemonSet", "dcgm")``.
            gpus: ``nvidia.com/gpu`` limit of the single container.
            finalizers: ``metadata.finalizers``.
            termination_grace_seconds: ``spec.terminationGracePeriodSeconds``.
        """
        meta: JSON = {
            "name": name,
            "namespace": namespace,
            "labels": dict(labels or {}),
            "annotations": dict(annotations or {}),
        }
        if owner is not None:
            kind, owner_name = owner
            uid = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{namespace}/{kind}/{owner_name}"))
            meta["ownerReferences"] = [owner_reference(kind, owner_name, uid)]
        if finalizers:
            meta["finalizers"] = list(finalizers)
        container: JSON = {"name": "main", "image": "registry.k8s.io/pause:3.10"}
        if gpus:
            container["resources"] = {
                "limits": {"nvidia.com/gpu": str(gpus)},
                "requests": {"nvidia.com/gpu": str(gpus)},
            }
        spec: JSON = {
            "containers": [container],
            "terminationGracePeriodSeconds": termination_grace_seconds,
        }
        if node_name is not None:
            spec["nodeName"] = node_name
        pod: JSON = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": meta,
            "spec": spec,
            "status": self._pod_status({}, phase, ready),
        }
        return self.put(PODS, pod)

    def set_pod_ready(self, namespace: str, name: str, ready: bool = True) -> JSON:
        """Mark a pod Running and Ready (or not Ready)."""

        def change(pod: JSON) -> None:
            pod["status"] = self._pod_status(pod.get("status") or {}, "Running", ready)

        return self.mutate(PODS, name, namespace, change)

    def set_pod_phase(self, namespace: str, name: str, phase: str) -> JSON:
        """Set ``status.phase`` (the pod is Ready only when Running and already Ready)."""

        def change(pod: JSON) -> None:
            status = pod.get("status") or {}
            was_ready = any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in status.get("conditions") or []
            )
            pod["status"] = self._pod_status(status, phase, was_ready)

        return self.mutate(PODS, name, namespace, change)

    def put_pdb(
        self,
        namespace: str,
        name: str,
        *,
        match_labels: Mapping[str, str],
        min_available: int | str | None = None,
        max_unavailable: int | str | None = None,
        unhealthy_pod_eviction_policy: str | None = None,
    ) -> JSON:
        """Create or overwrite a PodDisruptionBudget (its status is computed)."""
        spec: JSON = {"selector": {"matchLabels": dict(match_labels)}}
        if min_available is not None:
            spec["minAvailable"] = min_available
        if max_unavailable is not None:
            spec["maxUnavailable"] = max_unavailable
        if unhealthy_pod_eviction_policy is not None:
            spec["unhealthyPodEvictionPolicy"] = unhealthy_pod_eviction_policy
        pdb = {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        }
        with self.lock:
            if self.exists(PDBS, name, namespace):
                current = self.get(PDBS, name, namespace)
                return self.replace_object(PDBS, name, namespace, {**current, "spec": spec})
            return self.create_object(PDBS, pdb, namespace)
