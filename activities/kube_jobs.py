"""Host commands for clusters without SSM: a privileged Job pinned to the node.

The Job runs the same fixed script as the SSM executor
(``activities.host_commands``); the script comes only from this project's
code, never from input. The pod is bound to the node by ``nodeName`` (so the
scheduler, the cordon and the quarantine taint do not stand in the way) and
tolerates every taint. The Job's name is heartbeated as soon as it exists: a
retried activity resumes waiting for that Job instead of starting another.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.host_commands import CommandOutcome, HostCommand
from gpu_remediation.settings import Settings

MANAGED_BY = {"app.kubernetes.io/managed-by": "gpu-remediation"}
# The Job's own limit, so a wedged driver cannot keep a pod forever.
ACTIVE_DEADLINE_S = 3600
KEEP_FINISHED_S = 3600


class JobExecutor:
    """Runs host commands as Kubernetes Jobs on the node itself."""

    def __init__(self, batch_v1: Any, core_v1: Any, settings: Settings) -> None:
        """Bind to the API clients.

        Args:
            batch_v1: ``kubernetes.client.BatchV1Api``.
            core_v1: ``kubernetes.client.CoreV1Api`` (the pod's status and log).
            settings: Namespace, image and poll interval.
        """
        self._batch = batch_v1
        self._core = core_v1
        self._settings = settings

    async def run(self, node: str, provider_id: str, command: HostCommand) -> CommandOutcome:
        """Create the Job (or resume it) and wait for its pod to finish."""
        name = _resumable_job(command)
        if name is None:
            name = f"gpu-remediation-{command.kind.replace('_', '-')}-{uuid.uuid4().hex[:10]}"
            await self._create(name, node, command)
        activity.heartbeat({"job": name, "command": command.model_dump()})
        try:
            return await self._wait(name)
        finally:
            await self._delete(name)

    def job_manifest(self, name: str, node: str, command: HostCommand) -> k8s.V1Job:
        """The Job for ``command`` on ``node`` (public so tests and RBAC docs can read it)."""
        container = k8s.V1Container(
            name="host-command",
            image=self._settings.job_image,
            command=["/bin/sh", "-c", "\n".join(command.script())],
            security_context=k8s.V1SecurityContext(privileged=True),
        )
        pod = k8s.V1PodSpec(
            node_name=node,
            restart_policy="Never",
            host_pid=True,
            tolerations=[k8s.V1Toleration(operator="Exists")],
            containers=[container],
        )
        labels = {**MANAGED_BY, "gpu-remediation.io/command": command.kind}
        return k8s.V1Job(
            metadata=k8s.V1ObjectMeta(
                name=name, namespace=self._settings.job_namespace, labels=labels
            ),
            spec=k8s.V1JobSpec(
                backoff_limit=0,
                active_deadline_seconds=ACTIVE_DEADLINE_S,
                ttl_seconds_after_finished=KEEP_FINISHED_S,
                template=k8s.V1PodTemplateSpec(metadata=k8s.V1ObjectMeta(labels=labels), spec=pod),
            ),
        )

    async def _create(self, name: str, node: str, command: HostCommand) -> None:
        try:
            await asyncio.to_thread(
                self._batch.create_namespaced_job,
                self._settings.job_namespace,
                self.job_manifest(name, node, command),
            )
        except ApiException as err:
            raise ApplicationError(f"create job {name}: {err.status} {err.reason}") from err

    async def _wait(self, name: str) -> CommandOutcome:
        namespace = self._settings.job_namespace
        while True:
            pods = await asyncio.to_thread(
                self._core.list_namespaced_pod, namespace, label_selector=f"job-name={name}"
            )
            for pod in pods.items:
                terminated = _terminated(pod)
                if terminated is not None:
                    log = await asyncio.to_thread(
                        self._core.read_namespaced_pod_log, pod.metadata.name, namespace
                    )
                    return CommandOutcome(
                        command_id=f"job/{namespace}/{name}",
                        exit_code=int(terminated.exit_code),
                        stdout=log or "",
                        stderr=(terminated.message or "")[:8000],
                    )
            job = await asyncio.to_thread(self._batch.read_namespaced_job, name, namespace)
            failed = [
                cond
                for cond in (job.status.conditions or [] if job.status else [])
                if cond.type == "Failed" and cond.status == "True"
            ]
            if failed and not pods.items:
                raise ApplicationError(
                    f"job {name} failed before running: {failed[0].reason}: {failed[0].message}",
                    type="HostCommandFailed",
                )
            activity.heartbeat({"job": name, "pods": [p.metadata.name for p in pods.items]})
            await asyncio.sleep(self._settings.poll_interval.total_seconds())

    async def _delete(self, name: str) -> None:
        try:
            await asyncio.to_thread(
                self._batch.delete_namespaced_job,
                name,
                self._settings.job_namespace,
                propagation_policy="Background",
            )
        except ApiException as err:
            if err.status != 404:
                # The TTL removes it later; the command's result is what matters.
                activity.logger.warning("could not delete job %s: %s", name, err.reason)


def _terminated(pod: Any) -> Any | None:
    for status in (pod.status.container_statuses or []) if pod.status else []:
        if status.state is not None and status.state.terminated is not None:
            return status.state.terminated
    return None


def _resumable_job(command: HostCommand) -> str | None:
    info = activity.info()
    if info.attempt <= 1 or not info.heartbeat_details:
        return None
    details = info.heartbeat_details[0]
    if not isinstance(details, dict) or details.get("command") != command.model_dump():
        return None
    job = details.get("job")
    return job if isinstance(job, str) else None
