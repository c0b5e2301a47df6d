"""Python-side helpers to seed and mutate the emulated cluster.

Tests and the fleet simulator use these instead of HTTP. Each helper goes through the
same store, so it bumps the resourceVersion, produces watch events and keeps PDB status
current. Objects are complete enough for the official client's model validation (e.g.
``status.nodeInfo`` carries every required field).
"""

from __future__ import annotations

import copy
import secrets
import uuid
import zlib
from collections.abc import Iterable, Mapping
from typing import Any

from . import errors
from .cluster import ApiStore
from .resources import JOBS, NODECLAIMS, NODES, PDBS, PODS, ResourceType

JSON = dict[str, Any]

NODEPOOL_LABEL = "karpenter.sh/nodepool"
TERMINATION_FINALIZER = "karpenter.sh/termination"
_OWNER_API = {"Job": "batch/v1", "Node": "v1"}


def _condition(type_: str, status: str, reason: str, message: str, now: str) -> JSON:
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }


def _set_condition(conditions: list[JSON], new: JSON) -> list[JSON]:
    # lastTransitionTime moves only when the status flips, as the kubelet does.
    out = []
    found = False
    for cond in conditions:
        if cond.get("type") == new["type"]:
            found = True
            if cond.get("status") == new["status"]:
                new = {**new, "lastTransitionTime": cond.get("lastTransitionTime")}
            out.append(new)
        else:
            out.append(cond)
    if not found:
        out.append(new)
    return out


def _node_ip(name: str) -> str:
    # Stable per name, so re-seeding a node keeps its address.
    h = zlib.crc32(name.encode())
    return f"10.{(h >> 16) & 0xFF}.{(h >> 8) & 0xFF}.{h & 0xFF}"


def owner_reference(kind: str, name: str, uid: str) -> JSON:
    """A controller ownerReference (``apps/v1`` unless the kind is known otherwise)."""
    return {
        "apiVersion": _OWNER_API.get(kind, "apps/v1"),
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


class KubeStore(ApiStore):
    """The emulated cluster with seeding and mutation helpers (see :class:`ApiStore`)."""

    # ------------------------------------------------------------------ generic

    def put(self, rtype: ResourceType, obj: JSON) -> JSON:
        """Create ``obj`` or overwrite the existing object of that name (status kept).

        Raises:
            ApiError: 400/422 when the object is invalid.
        """
        meta = obj.get("metadata") or {}
        namespace = meta.get("namespace") or ("default" if rtype.namespaced else None)
        with self.lock:
            try:
                self.get(rtype, meta.get("name", ""), namespace)
            except errors.ApiError as exc:
                if exc.code != 404:
                    raise
                return self.create_object(rtype, obj, namespace, keep_status=True)

            def overwrite(current: JSON) -> None:
                kept = {
                    k: current["metadata"][k]
                    for k in ("uid", "creationTimestamp", "deletionTimestamp")
                    if k in current["metadata"]
                }
                current.clear()
                current.update(copy.deepcopy(obj))
                current["apiVersion"] = rtype.api_version
                current["kind"] = rtype.kind
                current["metadata"] = {**current.get("metadata", {}), **kept}

            return self.mutate(rtype, meta["name"], namespace, overwrite)

    def exists(self, rtype: ResourceType, name: str, namespace: str | None = None) -> bool:
        """Whether the object exists (deleting objects with finalizers still exist)."""
        try:
            self.get(rtype, name, namespace)
        except errors.ApiError as exc:
            if exc.code == 404:
                return False
            raise
        return True

    def remove_finalizers(
        self,
        rtype: ResourceType,
        name: str,
        namespace: str | None = None,
        finalizers: Iterable[str] | None = None,
    ) -> JSON | None:
        """Remove some (default: all) finalizers; returns None when that deleted it."""
        drop = set(finalizers) if finalizers is not None else None

        def change(obj: JSON) -> None:
            current = obj["metadata"].get("finalizers") or []
            obj["metadata"]["finalizers"] = [
                f for f in current if drop is not None and f not in drop
            ]

        with self.lock:
            result = self.mutate(rtype, name, namespace, change)
            return result if self.exists(rtype, name, namespace) else None

    # -------------------------------------------------------------------- nodes

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
            _condition(t, "False", f"KubeletHas{r}", f"kubelet has {m}", now)
            for t, r, m in (
                ("MemoryPressure", "SufficientMemory", "sufficient memory available"),
                ("DiskPressure", "NoDiskPressure", "no disk pressure"),
                ("PIDPressure", "SufficientPID", "sufficient PID available"),
            )
        ]
        conds.append(
            _condition("Ready", "True", "KubeletReady", "kubelet is posting ready status", now)
            if ready
            else _condition("Ready", "False", "KubeletNotReady", "kubelet is not ready", now)
        )
        for extra in conditions or []:
            conds = _set_condition(
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
                    {"type": "InternalIP", "address": _node_ip(name)},
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
        new = _condition(type_, status, reason, message, now)

        def change(node: JSON) -> None:
            st = node.setdefault("status", {})
            st["conditions"] = _set_condition(st.get("conditions") or [], new)

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

    # --------------------------------------------------------------------- pods

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

    def _pod_status(self, status: JSON, phase: str, ready: bool) -> JSON:
        now = self.now()
        ready_word = "True" if ready and phase == "Running" else "False"
        conds = status.get("conditions") or []
        for type_ in ("Ready", "ContainersReady"):
            new = {"type": type_, "status": ready_word, "lastTransitionTime": now}
            conds = _set_condition(conds, new)
            for cond in conds:
                cond.pop("lastHeartbeatTime", None)
        return {**status, "phase": phase, "conditions": conds}

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

    # ---------------------------------------------------------------- NodeClaims

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

    # --------------------------------------------------------------------- jobs

    def set_job_status(self, namespace: str, name: str, status: JSON) -> JSON:
        """Replace a Job's status (the emulator runs no job controller)."""

        def change(job: JSON) -> None:
            job["status"] = dict(status)

        return self.mutate(JOBS, name, namespace, change)

    def finish_job(self, namespace: str, name: str, *, succeeded: bool = True) -> JSON:
        """Give a Job the terminal status the job controller would write."""
        now = self.now()
        if succeeded:
            conds = [
                {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached"},
                {"type": "Complete", "status": "True", "reason": "CompletionsReached"},
            ]
            status: JSON = {"succeeded": 1, "completionTime": now}
        else:
            conds = [
                {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded"},
                {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"},
            ]
            status = {"failed": 1}
        for cond in conds:
            cond.update(message="", lastProbeTime=now, lastTransitionTime=now)
        start = (self.get(JOBS, name, namespace).get("status") or {}).get("startTime", now)
        return self.set_job_status(
            namespace,
            name,
            {**status, "startTime": start, "active": 0, "ready": 0, "conditions": conds},
        )

    def add_job_pod(
        self,
        namespace: str,
        job_name: str,
        *,
        node_name: str | None = None,
        phase: str = "Running",
        ready: bool = False,
    ) -> JSON:
        """Create a pod of the Job from its template, as the job controller would.

        The pod gets the template's labels and an ownerReference to the Job, and counts
        in the Job's ``status.active`` while it is Pending or Running.
        """
        with self.lock:
            job = self.get(JOBS, job_name, namespace)
            template = job["spec"]["template"]
            suffix = "".join(secrets.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(5))
            spec = dict(template.get("spec") or {})
            if node_name is not None:
                spec["nodeName"] = node_name
            pod: JSON = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{job_name}-{suffix}",
                    "namespace": namespace,
                    "labels": dict((template.get("metadata") or {}).get("labels") or {}),
                    "ownerReferences": [owner_reference("Job", job_name, job["metadata"]["uid"])],
                },
                "spec": spec,
                "status": self._pod_status({}, phase, ready),
            }
            created = self.create_object(PODS, pod, namespace, keep_status=True)
            if phase in ("Pending", "Running"):
                status = dict(job.get("status") or {})
                status.setdefault("startTime", self.now())
                status["active"] = int(status.get("active", 0)) + 1
                self.set_job_status(namespace, job_name, status)
            return created
