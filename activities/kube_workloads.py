"""The training jobs on a node, and the checkpoint handshake's side effects.

A job is named by the first of the policy's label keys its GPU pods carry
(JobSet, batch/v1 Job, Kubeflow); its pods on every node are found by that
label in the pod's namespace. The request is an annotation on the pods of jobs
that opted in (``gpu-remediation.io/checkpoint: supported``); the node's GPU
pods also get the incident's id, so the watcher's relay can tell the incident
when one of them ends. Every write is a merge patch of one annotation: writing
the same value again changes nothing, and withdrawing removes only this
incident's values.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError
from temporalio import activity

from activities.kube_drain import Drainer
from activities.kubernetes import call_api
from activities.world_time import REAL_TIME, WorldTime
from gpu_remediation import job_contracts as j
from gpu_remediation.ids import Activities
from gpu_remediation.jobs import (
    INCIDENT_ANNOTATION,
    OPT_IN_ANNOTATION,
    OPT_IN_VALUE,
    REQUEST_ANNOTATION,
    CheckpointRequest,
    JobRef,
)
from gpu_remediation.models import Urgency
from gpu_remediation.settings import Settings

MAX_JOBS = 64


class WorkloadActivities:
    """Activities that find a node's jobs and ask them to checkpoint."""

    def __init__(self, core_v1: Any, settings: Settings, world: WorldTime = REAL_TIME) -> None:
        """Bind to the core API.

        Args:
            core_v1: ``kubernetes.client.CoreV1Api``.
            settings: The GPU resource name.
            world: The timeline requests' deadlines are judged on (``activities.world_time``).
        """
        self._core = core_v1
        self._world = world
        self._drainer = Drainer(core_v1, settings, world)

    def all(self) -> list[Callable[..., Any]]:
        """The activities, for a worker's registration."""
        return [self.find_node_jobs, self.request_checkpoint, self.withdraw_checkpoint]

    @activity.defn(name=Activities.FIND_NODE_JOBS)
    async def find_node_jobs(self, input: j.FindNodeJobsInput) -> j.NodeJobs:
        """Group the node's GPU pods by job; count each job's pods and nodes."""
        pods = await self._drainer.gpu_pods(input.node)
        on_node: dict[tuple[str, str, str], list[Any]] = defaultdict(list)
        unowned = 0
        for pod in pods:
            key = _job_key(pod, input.label_keys)
            if key is None:
                unowned += 1
            else:
                on_node[key].append(pod)
        jobs = []
        for (namespace, label_key, name), here in sorted(on_node.items())[:MAX_JOBS]:
            members = await self._job_pods(namespace, label_key, name)
            nodes = {p.spec.node_name for p in members if p.spec and p.spec.node_name}
            jobs.append(
                JobRef(
                    namespace=namespace,
                    label_key=label_key,
                    name=name,
                    nodes=max(len(nodes | {input.node}), 1),
                    pods=max(len(members), len(here)),
                    pods_on_node=len(here),
                    checkpoint_supported=any(_opted_in(p) for p in here),
                )
            )
        return j.NodeJobs(jobs=jobs, gpu_pods=len(pods), unowned_pods=unowned)

    @activity.defn(name=Activities.REQUEST_CHECKPOINT)
    async def request_checkpoint(
        self, input: j.RequestCheckpointInput
    ) -> j.CheckpointRequestResult:
        """Write the request on opted-in jobs' pods and the watch mark on the node's GPU pods.

        Each job's request names the job, so the relay can tell the incident
        which job answered (it waits for every job it asked). An ``idle_only``
        incident asks no job (it will not evict): it only watches the pods.
        """
        requested = 0
        asked: list[j.AskedPod] = []
        now = await self._world.wall()
        for job in input.jobs:
            if not job.checkpoint_supported or input.urgency == Urgency.IDLE_ONLY:
                # idle_only never evicts, so no job has anything to save for.
                continue
            request = CheckpointRequest(
                incident=input.request_incident,
                node=input.node,
                deadline=input.deadline.astimezone(UTC),
                urgency=input.urgency,
                reason=input.reason,
                job=job.display,
            ).annotation()
            for pod in await self._job_pods(job.namespace, job.label_key, job.name):
                if _asked_by_another(pod, input.request_incident, now):
                    # One request per pod: the job is already saving for an
                    # incident on another of its nodes; that answer goes there.
                    activity.logger.info(
                        "%s already carries another incident's request", _name(pod)
                    )
                    continue
                if await self._annotate(pod, REQUEST_ANNOTATION, request):
                    requested += 1
                    # The job is the one whose label selected the pod in the
                    # job's namespace: what the pod says of itself never counts.
                    if len(asked) < j.MAX_ASKED_PODS:
                        asked.append(
                            j.AskedPod(uid=pod.metadata.uid, pod=_name(pod), job=job.display)
                        )
        watched = 0
        for pod in await self._drainer.gpu_pods(input.node):
            if await self._annotate(pod, INCIDENT_ANNOTATION, input.request_incident):
                watched += 1
        return j.CheckpointRequestResult(
            requested_pods=requested, watched_pods=watched, asked=asked
        )

    @activity.defn(name=Activities.WITHDRAW_CHECKPOINT)
    async def withdraw_checkpoint(
        self, input: j.WithdrawCheckpointInput
    ) -> j.CheckpointWithdrawResult:
        """Remove this incident's request and watch marks; other incidents' stay."""
        pods: dict[str, Any] = {}
        for job in input.jobs:
            for pod in await self._job_pods(job.namespace, job.label_key, job.name):
                pods[pod.metadata.uid] = pod
        for pod in await self._drainer.gpu_pods(input.node):
            pods[pod.metadata.uid] = pod
        cleared = 0
        for pod in pods.values():
            annotations = pod.metadata.annotations or {}
            drop: dict[str, str | None] = {}
            if _request_incident(annotations.get(REQUEST_ANNOTATION)) == input.request_incident:
                drop[REQUEST_ANNOTATION] = None
            if annotations.get(INCIDENT_ANNOTATION) == input.request_incident:
                drop[INCIDENT_ANNOTATION] = None
            if drop and await self._patch(pod, drop):
                cleared += 1
        return j.CheckpointWithdrawResult(cleared_pods=cleared)

    async def _job_pods(self, namespace: str, label_key: str, name: str) -> list[Any]:
        pods = await call_api(
            self._core.list_namespaced_pod, namespace, label_selector=f"{label_key}={name}"
        )
        return [p for p in pods.items if _running(p)]

    async def _annotate(self, pod: Any, key: str, value: str) -> bool:
        """Set one annotation unless it already has ``value``; True if the pod has it now."""
        if (pod.metadata.annotations or {}).get(key) == value:
            return True
        return await self._patch(pod, {key: value})

    async def _patch(self, pod: Any, annotations: dict[str, str | None]) -> bool:
        """Merge-patch annotations (None removes); False when the pod is gone."""
        body = {"metadata": {"annotations": annotations}}
        meta = pod.metadata
        result = await call_api(
            self._core.patch_namespaced_pod, meta.name, meta.namespace, body, missing_ok=True
        )
        return result is not None


def _job_key(pod: Any, label_keys: list[str]) -> tuple[str, str, str] | None:
    labels = pod.metadata.labels or {}
    for key in label_keys:
        value = labels.get(key)
        if value:
            return (pod.metadata.namespace, key, str(value))
    return None


def _opted_in(pod: Any) -> bool:
    return (pod.metadata.annotations or {}).get(OPT_IN_ANNOTATION) == OPT_IN_VALUE


def _running(pod: Any) -> bool:
    phase = pod.status.phase if pod.status else None
    return pod.metadata.deletion_timestamp is None and phase not in ("Succeeded", "Failed")


def _request_incident(value: str | None) -> str | None:
    if not value:
        return None
    try:
        return CheckpointRequest.model_validate_json(value).incident
    except ValidationError:
        return None  # not ours to judge: a garbled request is overwritten


def _asked_by_another(pod: Any, incident: str, now: datetime) -> bool:
    """Whether the pod carries another incident's request whose deadline is still ahead."""
    value = (pod.metadata.annotations or {}).get(REQUEST_ANNOTATION)
    if not value:
        return False
    try:
        other = CheckpointRequest.model_validate_json(value)
    except ValidationError:
        return False
    return other.incident != incident and other.deadline > now


def _name(pod: Any) -> str:
    return f"{pod.metadata.namespace}/{pod.metadata.name}"
