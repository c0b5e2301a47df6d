"""Python-side helpers to seed and mutate the emulated cluster.

Tests and the fleet simulator use these instead of HTTP. Each helper goes through the
same store, so it bumps the resourceVersion, produces watch events and keeps PDB status
current. Objects are complete enough for the official client's model validation (e.g.
``status.nodeInfo`` carries every required field).
"""

from __future__ import annotations

import copy
import hashlib
import re
import secrets
import uuid
import zlib
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from . import errors
from .cluster import ApiStore
from .resources import JOBS, NODECLAIMS, NODES, PDBS, PODS, ResourceType
from .watch import Change

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


# The kubelet keeps this much of a failed container's log as its termination message
# under terminationMessagePolicy FallbackToLogsOnError.
FALLBACK_MESSAGE_LINES = 80
FALLBACK_MESSAGE_BYTES = 2048
_LINE = re.compile(r"[^\n]*\n|[^\n]+\Z")


def _tail_lines(text: str, count: int) -> str:
    # A trailing newline ends the last line rather than starting an empty one.
    return "".join(_LINE.findall(text)[-count:]) if count > 0 else ""


def _container_status(container: JSON, state: JSON, *, ready: bool) -> JSON:
    # Every field the official client's V1ContainerStatus requires, with stable ids.
    image = str(container.get("image") or "")
    digest = hashlib.sha256(image.encode()).hexdigest()
    return {
        "name": container["name"],
        "image": image,
        "imageID": f"{image.split(':')[0]}@sha256:{digest}",
        "containerID": f"containerd://{uuid.uuid4().hex}{uuid.uuid4().hex}",
        "ready": ready,
        "started": "running" in state,
        "restartCount": 0,
        "state": state,
    }


class KubeStore(ApiStore):
    """The emulated cluster with seeding and mutation helpers (see :class:`ApiStore`).

    Args:
        history_size: Changes retained for watches (older resourceVersions get 410).
        clock: Returns "now" (UTC); injectable for virtual time.
        pod_grace_scale: Scale of graceful pod deletion (see :class:`ApiStore`).
    """

    def __init__(
        self,
        *,
        history_size: int = 10_000,
        clock: Callable[[], datetime] | None = None,
        pod_grace_scale: float = 0.0,
    ) -> None:
        super().__init__(history_size=history_size, clock=clock, pod_grace_scale=pod_grace_scale)
        # Container logs live on the node, not in etcd: keyed by pod uid, so a pod
        # recreated under the same name starts with no log, as a real one does.
        self._logs: dict[str, dict[str, str]] = {}
        self.add_hook(self._forget_logs)

    def _forget_logs(self, change: Change) -> None:
        if change.resource == PODS.key and change.type == "DELETED":
            self._logs.pop(change.obj["metadata"]["uid"], None)

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

    # ------------------------------------------------------- containers and logs

    def _container(self, pod: JSON, container: str | None) -> JSON:
        """The container a log request or status change names (the only one by default).

        Raises:
            ApiError: 400 when no container is named and the pod has several, or the
                named one is not in the pod (the real server's messages).
        """
        name = pod["metadata"]["name"]
        containers: list[JSON] = (pod.get("spec") or {}).get("containers") or []
        if container is None:
            if len(containers) == 1:
                return containers[0]
            choices = " ".join(c["name"] for c in containers)
            raise errors.bad_request(
                f"a container name must be specified for pod {name}, choose one of: [{choices}]"
            )
        for candidate in containers:
            if candidate["name"] == container:
                return candidate
        raise errors.bad_request(f"container {container} is not valid for pod {name}")

    def set_container_running(
        self, namespace: str, name: str, *, container: str | None = None
    ) -> JSON:
        """Mark a container started and running, as the kubelet reports it.

        The pod becomes Running; it is Ready once every container runs.

        Raises:
            ApiError: 404 when the pod is missing, 400 for an unknown container.
        """
        now = self.now()

        def change(pod: JSON) -> None:
            target = self._container(pod, container)
            status = pod.get("status") or {}
            statuses = {s["name"]: s for s in status.get("containerStatuses") or []}
            statuses[target["name"]] = _container_status(
                target, {"running": {"startedAt": now}}, ready=True
            )
            ordered = [
                statuses[c["name"]] for c in pod["spec"]["containers"] if c["name"] in statuses
            ]
            all_running = len(ordered) == len(pod["spec"]["containers"]) and all(
                "running" in s["state"] for s in ordered
            )
            status = self._pod_status(status, "Running", all_running)
            status["containerStatuses"] = ordered
            status.setdefault("startTime", now)
            pod["status"] = status

        return self.mutate(PODS, name, namespace, change)

    def terminate_container(
        self,
        namespace: str,
        name: str,
        exit_code: int,
        *,
        container: str | None = None,
        reason: str | None = None,
        message: str | None = None,
        log: str | None = None,
    ) -> JSON:
        """Mark a container terminated with ``exit_code``, as the kubelet reports it.

        Once every container has terminated the pod is Succeeded (all exited 0) or
        Failed, as for ``restartPolicy: Never`` (nothing is restarted here).

        Args:
            namespace: Namespace of the pod.
            name: Pod name.
            exit_code: The process's exit code.
            container: Container name (the only one when omitted).
            reason: ``Completed`` for exit 0, ``Error`` otherwise, unless given
                (e.g. ``OOMKilled``).
            message: The termination message. When omitted it is empty, or for a
                failure under ``terminationMessagePolicy: FallbackToLogsOnError`` the
                log's last 80 lines (at most 2048 bytes), as the kubelet does.
            log: Replace the container's log first (see :meth:`set_pod_log`).

        Raises:
            ApiError: 404 when the pod is missing, 400 for an unknown container.
        """
        now = self.now()
        with self.lock:
            if log is not None:
                self.set_pod_log(namespace, name, log, container=container)

            def change(pod: JSON) -> None:
                target = self._container(pod, container)
                status = pod.get("status") or {}
                statuses = {s["name"]: s for s in status.get("containerStatuses") or []}
                previous = statuses.get(target["name"], {}).get("state", {})
                text = message
                if text is None:
                    text = ""
                    if exit_code != 0 and (
                        target.get("terminationMessagePolicy") == "FallbackToLogsOnError"
                    ):
                        logs = self._logs.get(pod["metadata"]["uid"], {})
                        tail = _tail_lines(logs.get(target["name"], ""), FALLBACK_MESSAGE_LINES)
                        text = tail.encode()[-FALLBACK_MESSAGE_BYTES:].decode(errors="ignore")
                terminated: JSON = {
                    "exitCode": exit_code,
                    "reason": reason or ("Completed" if exit_code == 0 else "Error"),
                    "startedAt": (previous.get("running") or {}).get("startedAt", now),
                    "finishedAt": now,
                }
                if text:
                    terminated["message"] = text
                statuses[target["name"]] = _container_status(
                    target, {"terminated": terminated}, ready=False
                )
                containers = pod["spec"]["containers"]
                ordered = [statuses[c["name"]] for c in containers if c["name"] in statuses]
                finished = [s["state"]["terminated"] for s in ordered if "terminated" in s["state"]]
                phase = "Running"
                if len(finished) == len(containers):
                    ok = all(t["exitCode"] == 0 for t in finished)
                    phase = "Succeeded" if ok else "Failed"
                status = self._pod_status(status, phase, False)
                status["containerStatuses"] = ordered
                status.setdefault("startTime", now)
                pod["status"] = status

            return self.mutate(PODS, name, namespace, change)

    def set_pod_log(
        self, namespace: str, name: str, text: str, *, container: str | None = None
    ) -> None:
        """Replace a container's log (what ``GET .../pods/{name}/log`` answers).

        A real kubelet interleaves the container's stdout and stderr in one log.

        Raises:
            ApiError: 404 when the pod is missing, 400 for an unknown container.
        """
        with self.lock:
            pod = self.get(PODS, name, namespace)
            target = self._container(pod, container)
            self._logs.setdefault(pod["metadata"]["uid"], {})[target["name"]] = text

    def pod_log(
        self,
        namespace: str,
        name: str,
        *,
        container: str | None = None,
        tail_lines: int | None = None,
        limit_bytes: int | None = None,
    ) -> str:
        """Read a container's log as the pods/log subresource does.

        Args:
            namespace: Namespace of the pod.
            name: Pod name.
            container: Container name (required when the pod has several).
            tail_lines: Only the last this many lines.
            limit_bytes: At most this many bytes (from the start of what is left).

        Raises:
            ApiError: 404 when the pod is missing; 400 when the container is not
                named or unknown, the pod is not scheduled, or the container has not
                started (the real server's messages).
        """
        with self.lock:
            pod = self.get(PODS, name, namespace)
            target = self._container(pod, container)
            if not (pod.get("spec") or {}).get("nodeName"):
                raise errors.bad_request(f"pod {name} does not have a host assigned")
            status = pod.get("status") or {}
            statuses = {s["name"]: s for s in status.get("containerStatuses") or []}
            own = statuses.get(target["name"])
            if own is not None:
                started = "running" in own["state"] or "terminated" in own["state"]
            else:
                # Pods seeded by put_pod/add_job_pod carry no container statuses: a
                # phase past Pending means the containers ran.
                started = not statuses and status.get("phase") in ("Running", "Succeeded", "Failed")
            if not started:
                waiting = ((own or {}).get("state") or {}).get("waiting") or {}
                raise errors.bad_request(
                    f'container "{target["name"]}" in pod "{name}" is waiting to start: '
                    f"{waiting.get('reason', 'ContainerCreating')}"
                )
            text = self._logs.get(pod["metadata"]["uid"], {}).get(target["name"], "")
        if tail_lines is not None:
            text = _tail_lines(text, tail_lines)
        if limit_bytes is not None:
            # Cutting inside a character drops it, rather than sending half of it.
            text = text.encode()[:limit_bytes].decode(errors="ignore")
        return text

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

    def finish_job(
        self,
        namespace: str,
        name: str,
        *,
        succeeded: bool = True,
        reason: str | None = None,
        message: str = "",
        failed_pods: int = 1,
    ) -> JSON:
        """Give a Job the terminal status the job controller would write.

        Args:
            namespace: Namespace of the Job.
            name: Job name.
            succeeded: Complete (one pod succeeded) or Failed.
            reason: Condition reason; ``CompletionsReached`` or ``BackoffLimitExceeded``
                by default (``DeadlineExceeded`` when activeDeadlineSeconds passed).
            message: Condition message.
            failed_pods: ``status.failed`` of a failed Job (0 when no pod ever ran).
        """
        now = self.now()
        if succeeded:
            why = reason or "CompletionsReached"
            conds = [
                {"type": "SuccessCriteriaMet", "status": "True", "reason": why},
                {"type": "Complete", "status": "True", "reason": why},
            ]
            status: JSON = {"succeeded": 1, "completionTime": now}
        else:
            why = reason or "BackoffLimitExceeded"
            conds = [
                {"type": "FailureTarget", "status": "True", "reason": why},
                {"type": "Failed", "status": "True", "reason": why},
            ]
            status = {"failed": failed_pods} if failed_pods else {}
        for cond in conds:
            cond.update(message=message, lastProbeTime=now, lastTransitionTime=now)
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
