"""The burn-in's optional NCCL check: ``all_reduce_perf`` in a Job pinned to the node.

One pod, bound to the node by ``nodeName`` and tolerating the startup taint
(and the GPU taint many GPU nodes carry), asks the device plugin for every
allocatable GPU and runs nccl-tests' ``all_reduce_perf`` over them. Not
privileged and no host PID: unlike the host commands (``activities.kube_jobs``)
it is an ordinary GPU workload. The Job lives in the Job executor's namespace
under the same labels and RBAC (deploy/job-executor/rbac.yaml).

A retried attempt never starts a second all-reduce: the Job's name is derived
from the activity's identity and the node's boot (``activity_job_name``), so a
retry's create answers 409 AlreadyExists and the retry waits for, or reads, the
Job its earlier attempt created, even when that attempt's heartbeat was lost.
A name recorded in a heartbeat is resumed first (older attempts used random
names). A Job that ended without a result is deleted, so the retry runs a new
one. A cancelled check (the node rebooted or went, an operator skipped the
burn-in) deletes its Job: no all-reduce outlives its admission. The pod's
log is judged on a thread, off the worker's event loop.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.kube_jobs import (
    KEEP_FINISHED_S,
    activity_job_name,
    delete_job,
    read_container_log,
)
from activities.kubernetes import api_error, call_api
from activities.world_time import REAL_TIME, WorldTime
from gpu_remediation import admission_models as a
from gpu_remediation.admission_nccl import Verdict, judge, nccl_evidence
from gpu_remediation.settings import Settings

MANAGED_BY = {"app.kubernetes.io/managed-by": "gpu-remediation"}
COMMAND_LABEL = "gpu-remediation.io/command"
CONTAINER = "nccl-all-reduce"
SHM_LIMIT = "16Gi"
"""NCCL's shared-memory transport wants more than a container's 64 MiB /dev/shm."""


class NcclJobs:
    """Runs the all-reduce Job on a node and judges its output."""

    def __init__(
        self, batch_v1: Any, core_v1: Any, settings: Settings, world: WorldTime = REAL_TIME
    ) -> None:
        """Bind to the API clients.

        Args:
            batch_v1: ``kubernetes.client.BatchV1Api``.
            core_v1: ``kubernetes.client.CoreV1Api`` (the node, the pod and its log).
            settings: Job namespace, GPU resource name, poll interval.
            world: The timeline the polls run on (``activities.world_time``).
        """
        self._batch = batch_v1
        self._core = core_v1
        self._settings = settings
        self._world = world

    async def run(self, input: a.RunNcclCheckInput) -> a.NcclCheckResult:
        """Run (or resume) the Job, wait for its pod, judge the output, delete the Job.

        Raises:
            ApplicationError: ``NodeNotFound`` when the node is gone; ``NcclJobFailed``
                when the Job ended without a pod result (it never started in time);
                ``KubernetesError`` for API failures.
        """
        node = await call_api(self._core.read_node, input.node, missing_ok=True)
        if node is None:
            raise ApplicationError(f"node {input.node} is gone", type="NodeNotFound")
        gpus = _allocatable(node, self._settings.gpu_resource)
        if gpus < 1:
            summary = f"no {self._settings.gpu_resource} allocatable on {input.node}"
            return _result(Verdict(False, summary, "NoGpuAllocatable"), gpus)
        name = _resumed(input) or activity_job_name("nccl", input.node, input.boot_id)
        activity.heartbeat(_details(name, input))
        try:
            await self._create(self.job_manifest(name, input, gpus))
            exit_code, output = await self._wait(name, input)
        except asyncio.CancelledError:
            await asyncio.shield(self._delete(name))
            raise
        await self._delete(name)
        # On a thread: the log is the node's to choose, as long as it likes, and
        # reading it must not hold the worker's event loop (issue 35).
        verdict = await asyncio.to_thread(
            judge, exit_code, output, input.min_bus_bandwidth_gbps, gpus
        )
        return _result(verdict, gpus, job=f"{self._settings.job_namespace}/{name}")

    def job_manifest(self, name: str, input: a.RunNcclCheckInput, gpus: int) -> k8s.V1Job:
        """The Job on ``input.node`` with ``gpus`` GPUs (public so tests can read it)."""
        gpu_limit = {self._settings.gpu_resource: str(gpus)}
        container = k8s.V1Container(
            name=CONTAINER,
            image=input.image,
            command=[
                "all_reduce_perf",
                *("-b", "8", "-e", input.max_bytes, "-f", "2"),
                *("-g", str(gpus), "-c", "1"),
            ],
            resources=k8s.V1ResourceRequirements(limits=gpu_limit, requests=gpu_limit),
            volume_mounts=[k8s.V1VolumeMount(name="dshm", mount_path="/dev/shm")],
        )
        pod = k8s.V1PodSpec(
            node_name=input.node,
            restart_policy="Never",
            tolerations=[
                k8s.V1Toleration(key=input.taint_key, operator="Exists", effect="NoSchedule"),
                k8s.V1Toleration(
                    key=self._settings.gpu_resource, operator="Exists", effect="NoSchedule"
                ),
            ],
            containers=[container],
            volumes=[
                k8s.V1Volume(
                    name="dshm",
                    empty_dir=k8s.V1EmptyDirVolumeSource(medium="Memory", size_limit=SHM_LIMIT),
                )
            ],
        )
        labels = {**MANAGED_BY, COMMAND_LABEL: "nccl_all_reduce"}
        return k8s.V1Job(
            metadata=k8s.V1ObjectMeta(
                name=name, namespace=self._settings.job_namespace, labels=labels
            ),
            spec=k8s.V1JobSpec(
                backoff_limit=0,
                active_deadline_seconds=input.timeout_s,
                ttl_seconds_after_finished=KEEP_FINISHED_S,
                template=k8s.V1PodTemplateSpec(metadata=k8s.V1ObjectMeta(labels=labels), spec=pod),
            ),
        )

    async def _create(self, job: k8s.V1Job) -> None:
        try:
            await asyncio.to_thread(
                self._batch.create_namespaced_job, self._settings.job_namespace, job
            )
        except ApiException as err:
            # 409: an earlier attempt of this activity created it: wait for it, or read it.
            if err.status != 409:
                raise api_error(f"create job {job.metadata.name}", err) from err

    async def _wait(self, name: str, input: a.RunNcclCheckInput) -> tuple[int, str]:
        namespace = self._settings.job_namespace
        while True:
            # The Job before its pods: a finished Job's pod is final in the listing after.
            try:
                job = await asyncio.to_thread(self._batch.read_namespaced_job, name, namespace)
            except ApiException as err:
                if err.status == 404:
                    raise ApplicationError(
                        f"job {namespace}/{name} was deleted before its result was read",
                        type="NcclJobFailed",
                    ) from err
                raise api_error(f"read job {name}", err) from err
            try:
                pods = await asyncio.to_thread(
                    self._core.list_namespaced_pod, namespace, label_selector=f"job-name={name}"
                )
            except ApiException as err:
                raise api_error(f"list pods of job {name}", err) from err
            for pod in pods.items:
                terminated = _terminated(pod)
                if terminated is None:
                    continue
                log = await self._log(pod.metadata.name)
                if log is not None:
                    return int(terminated.exit_code), log
            finished = _finished(job)
            if finished is not None:
                # Deleted, so that a retry (same name) runs a new Job instead of
                # adopting this one and failing the same way on every attempt.
                await self._delete(name)
                raise ApplicationError(
                    f"job {namespace}/{name} ended {finished.type} without a result: "
                    f"{finished.reason}: {finished.message}",
                    type="NcclJobFailed",
                )
            activity.heartbeat(_details(name, input))
            await self._world.sleep(self._settings.poll_interval.total_seconds())

    async def _log(self, pod: str) -> str | None:
        return await read_container_log(self._core, self._settings.job_namespace, pod, CONTAINER)

    async def _delete(self, name: str) -> None:
        # Its TTL removes it later; the verdict is what matters.
        await delete_job(self._batch, self._settings.job_namespace, name)


def _result(verdict: Verdict, gpus: int, job: str = "") -> a.NcclCheckResult:
    return a.NcclCheckResult(
        passed=verdict.passed,
        summary=verdict.summary[:2048],
        evidence=[] if verdict.passed else [nccl_evidence(verdict, datetime.now(UTC))],
        gpus=gpus,
        bus_bandwidth_gbps=verdict.bus_bandwidth_gbps,
        job=job,
    )


def _details(name: str, input: a.RunNcclCheckInput) -> dict[str, str]:
    return {"job": name, "node": input.node, "boot": input.boot_id}


def _resumed(input: a.RunNcclCheckInput) -> str | None:
    """The Job an earlier attempt of this check created (same node and boot)."""
    info = activity.info()
    if info.attempt <= 1 or not info.heartbeat_details:
        return None
    details = info.heartbeat_details[0]
    if not isinstance(details, dict):
        return None
    if (details.get("node"), details.get("boot")) != (input.node, input.boot_id):
        return None
    job = details.get("job")
    return job if isinstance(job, str) else None


def _allocatable(node: Any, resource: str) -> int:
    allocatable = (node.status.allocatable or {}) if node.status else {}
    try:
        return int(str(allocatable.get(resource, "0")))
    except ValueError:
        return 0


def _terminated(pod: Any) -> Any | None:
    for status in (pod.status.container_statuses or []) if pod.status else []:
        if status.state is not None and status.state.terminated is not None:
            return status.state.terminated
    return None


def _finished(job: Any) -> Any | None:
    for cond in (job.status.conditions or []) if job.status else []:
        if cond.type in ("Complete", "Failed") and cond.status == "True":
            return cond
    return None
