"""Stopping GPU work on a node the way ``kubectl drain`` does.

Only GPU pods are evicted (pods whose containers request the GPU resource):
the node may run CPU-only system workloads that have nothing to do with the
fault. Mirror pods and DaemonSet pods are skipped, as kubectl does. Each pod
is evicted through the Eviction API with its UID as a precondition, so a pod
recreated under the same name is never evicted by mistake; 429 (a
PodDisruptionBudget blocks it) is retried after a pause; 500 (more than one
PDB matches) is reported as a non-retryable error naming the pod; 404 and 409
mean the pod is already gone. Then the drain waits until each evicted pod is
gone or replaced by another UID, heartbeating its progress, bounded by the
timeout; what is left is reported, not hidden.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.world_time import REAL_TIME, WorldTime
from gpu_remediation.contracts import DrainResult
from gpu_remediation.settings import Settings

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


class Drainer:
    """Evicts a node's GPU pods."""

    def __init__(self, core_v1: Any, settings: Settings, world: WorldTime = REAL_TIME) -> None:
        """Bind to the core API.

        Args:
            core_v1: ``kubernetes.client.CoreV1Api``.
            settings: GPU resource name and the eviction retry interval.
            world: The timeline the waits run on (``activities.world_time``).
        """
        self._core = core_v1
        self._settings = settings
        self._world = world

    async def gpu_pods(self, node: str) -> list[Any]:
        """The running GPU pods on ``node`` that a drain would evict."""
        try:
            pods = await asyncio.to_thread(
                self._core.list_pod_for_all_namespaces, field_selector=f"spec.nodeName={node}"
            )
        except ApiException as err:
            raise ApplicationError(f"list pods on {node}: {err.status} {err.reason}") from err
        return [pod for pod in pods.items if self._evictable(pod)]

    async def drain(self, node: str, timeout_s: float) -> DrainResult:
        """Evict every GPU pod on ``node`` and wait until they are gone.

        Returns:
            The UIDs evicted and the pods still there when the timeout passed.

        Raises:
            ApplicationError: ``PdbMisconfigured`` (non-retryable) when the API
                refuses an eviction because several budgets match a pod.
        """
        deadline = await self._world.now() + timeout_s
        pending = {pod.metadata.uid: pod for pod in await self.gpu_pods(node)}
        evicted: list[str] = []
        refused: list[str] = []
        while pending and await self._world.now() < deadline:
            for uid, pod in list(pending.items()):
                outcome = await self._evict(pod)
                if outcome == "evicted":
                    evicted.append(uid)
                elif outcome == "refused":
                    refused.append(_name(pod))
                if outcome != "blocked":
                    del pending[uid]
            activity.heartbeat(
                {"evicted": len(evicted), "blocked": [_name(p) for p in pending.values()]}
            )
            if pending:
                await self._world.sleep(self._settings.eviction_retry.total_seconds())
        remaining = await self._wait_gone(node, evicted, deadline)
        remaining += [_name(pod) for pod in pending.values()] + refused
        return DrainResult(evicted_uids=evicted, remaining=sorted(remaining))

    def _evictable(self, pod: Any) -> bool:
        meta, spec, status = pod.metadata, pod.spec, pod.status
        if MIRROR_ANNOTATION in (meta.annotations or {}):
            return False
        if any(ref.kind == "DaemonSet" for ref in (meta.owner_references or [])):
            return False
        if status is not None and status.phase in ("Succeeded", "Failed"):
            return False
        if meta.deletion_timestamp is not None:
            return False
        return any(self._requests_gpu(container) for container in (spec.containers or []))

    def _requests_gpu(self, container: Any) -> bool:
        resources = container.resources
        if resources is None:
            return False
        wanted = {**(resources.requests or {}), **(resources.limits or {})}
        return str(wanted.get(self._settings.gpu_resource, "0")) not in ("0", "")

    async def _evict(self, pod: Any) -> Literal["evicted", "blocked", "refused"]:
        """Try one eviction.

        Returns:
            ``evicted`` when the pod is evicted or already gone; ``blocked``
            while a disruption budget holds it (tried again); ``refused`` when
            the API server forbids it (deploy/worker-admission.yaml keeps the
            worker out of system namespaces): never retried, left running and
            reported.
        """
        meta = pod.metadata
        body = k8s.V1Eviction(
            metadata=k8s.V1ObjectMeta(name=meta.name, namespace=meta.namespace),
            delete_options=k8s.V1DeleteOptions(preconditions=k8s.V1Preconditions(uid=meta.uid)),
        )
        try:
            await asyncio.to_thread(
                self._core.create_namespaced_pod_eviction, meta.name, meta.namespace, body
            )
        except ApiException as err:
            if err.status in (404, 409):
                return "evicted"  # gone, or replaced by a pod with another UID
            if err.status == 429:
                activity.logger.info("eviction of %s blocked by a disruption budget", _name(pod))
                return "blocked"
            if err.status == 403:
                activity.logger.warning(
                    "eviction of %s refused, left running: %s",
                    _name(pod),
                    (err.body or err.reason or "")[:300],
                )
                return "refused"
            if err.status == 500:
                raise ApplicationError(
                    f"cannot evict {_name(pod)}: {(err.body or err.reason or '')[:300]} "
                    "(more than one PodDisruptionBudget selects it; fix the budgets)",
                    type="PdbMisconfigured",
                    non_retryable=True,
                ) from err
            raise ApplicationError(f"evict {_name(pod)}: {err.status} {err.reason}") from err
        return "evicted"

    async def _wait_gone(self, node: str, uids: list[str], deadline: float) -> list[str]:
        """Wait until no pod with an evicted UID remains; return those that do."""
        wanted = set(uids)
        while True:
            pods = await asyncio.to_thread(
                self._core.list_pod_for_all_namespaces, field_selector=f"spec.nodeName={node}"
            )
            left = [_name(p) for p in pods.items if p.metadata.uid in wanted]
            if not left or await self._world.now() >= deadline:
                return left
            activity.heartbeat({"terminating": left})
            await self._world.sleep(self._settings.poll_interval.total_seconds())


def _name(pod: Any) -> str:
    return f"{pod.metadata.namespace}/{pod.metadata.name}"
