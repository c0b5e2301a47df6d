"""Host commands for clusters without SSM: a privileged Job pinned to the node.

The Job runs the same fixed script as the SSM executor
(``activities.host_commands``); the script comes only from this project's
code, never from input. The pod is bound to the node by ``nodeName`` (so the
scheduler, the cordon and the quarantine taint do not stand in the way) and
tolerates every taint.

A retried activity never starts the command a second time. The Job's name is
derived from the activity's identity (workflow id, run id, activity id) and
the command, so every attempt of one activity asks for the same Job: a retry's
create answers 409 AlreadyExists and the retry waits for (or reads the result
of) the Job an earlier attempt created, even when that attempt's heartbeat
never reached Temporal (a server restart, found by ``remediate demo --chaos``).
A name recorded in a heartbeat is still resumed first (attempts started before
names were derived recorded random ones). A GPU reset's Job whose result was
read is kept (``ttlSecondsAfterFinished`` removes it), so that a worker dying after
it read the result, before Temporal recorded the activity's completion, leaves its
retry a result to read rather than a free name under which the reset would run
again. A diagnostic's is deleted once read: it changes nothing on the host, and a
retry (say, of output cut short) should run it again, not re-read it.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.host_commands import ENCODED_MARKER, CommandOutcome, HostCommand, resumable
from activities.kubernetes import api_error, read_pinned_node
from activities.world_time import REAL_TIME, WorldTime
from gpu_remediation.contracts import NodePin
from gpu_remediation.settings import Settings

MANAGED_BY = {"app.kubernetes.io/managed-by": "gpu-remediation"}
# The Job's own limit, so a wedged driver cannot keep a pod forever.
ACTIVE_DEADLINE_S = 3600
# A finished GPU reset's Job stays until the TTL removes it, its result read or not
# (a diagnostic's is deleted once read, see REPEATABLE). It is long
# because a retry must find its earlier attempt's Job still there to read it: once
# the TTL has removed it, the same name is free and the retry's create would run
# the command again. A day outlasts any rung's retries unless every worker stays
# down that long.
KEEP_FINISHED_S = 24 * 3600
REPEATABLE = frozenset({"dcgm_diag", "dcgm_health", "efa_loopback"})
"""Commands that change nothing on the host: a retry runs them again."""
# Job names become the pods' ``job-name`` label values, at most 63 characters.
MAX_NAME = 63
NAME_HASH_CHARS = 16
CONTAINER = "host-command"
# SSM keeps 8,000 characters of stderr; the same bound here.
MAX_STDERR = 8000
MAX_LOG_BYTES = 32 * 1024 * 1024
"""The most of a Job's log the worker reads (``limitBytes``): the host is not trusted
to keep its output small. Above the encoded-output cap (host_command.MAX_ENCODED_OUTPUT,
24 MiB) with room for the lines around it; a log that reaches it is refused."""


class JobExecutor:
    """Runs host commands as Kubernetes Jobs on the node itself."""

    def __init__(
        self, batch_v1: Any, core_v1: Any, settings: Settings, world: WorldTime = REAL_TIME
    ) -> None:
        """Bind to the API clients.

        Args:
            batch_v1: ``kubernetes.client.BatchV1Api``.
            core_v1: ``kubernetes.client.CoreV1Api`` (the pod's status and log).
            settings: Namespace, image and poll interval.
            world: The timeline the polls run on (``activities.world_time``).
        """
        self._batch = batch_v1
        self._core = core_v1
        self._settings = settings
        self._world = world

    async def run(self, node: str, provider_id: str, command: HostCommand) -> CommandOutcome:
        """Create the Job (or resume it) and wait for its pod to finish.

        A GPU reset's Job is kept after its result is read (a retry reads it
        again, see the module), a diagnostic's deleted. Any Job is kept when
        waiting is interrupted (cancellation, API errors), so a retry resumes it;
        ``ttlSecondsAfterFinished`` removes it. A Job that failed without a result
        is deleted, so a retry runs the command afresh.

        Raises:
            ApplicationError: ``HostCommandFailed`` when the Job ended without a
                result to read (its pod never ran, or is gone), or vanished while
                waited for; ``KubernetesError``/``InvalidInput`` for API failures.
        """
        # The Job is bound to the node by name: only on the incident's machine.
        await self._check_machine(node, provider_id)
        name = resumable(command, "job")
        resumed = name is not None
        if name is None:
            name = activity_job_name(command.kind, command.model_dump_json())
        activity.heartbeat(_details(name, command))
        # A 409 on the create is an earlier attempt's Job under the same derived
        # name: it is adopted (waited for, or its result read), never run again.
        if not resumed or not await self._exists(name):
            await self._create(name, node, command)
        outcome = await self._wait(name, command)
        if command.kind in REPEATABLE:
            await self._delete(name)
        return outcome

    async def _check_machine(self, node: str, provider_id: str) -> None:
        """Refuse a node that is not the machine ``provider_id`` names (``NodeReplaced``)."""
        await read_pinned_node(self._core, node, NodePin(uid="", provider_id=provider_id))

    def job_manifest(self, name: str, node: str, command: HostCommand) -> k8s.V1Job:
        """The Job for ``command`` on ``node`` (public so tests and RBAC docs can read it)."""
        container = k8s.V1Container(
            name=CONTAINER,
            image=self._settings.job_image,
            command=["/bin/sh", "-c", "\n".join(command.script())],
            security_context=k8s.V1SecurityContext(privileged=True),
        )
        pod = k8s.V1PodSpec(
            node_name=node,
            restart_policy="Never",
            # The script needs the host, not the Kubernetes API: no token in the pod.
            automount_service_account_token=False,
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

    async def _exists(self, name: str) -> bool:
        try:
            await asyncio.to_thread(
                self._batch.read_namespaced_job, name, self._settings.job_namespace
            )
        except ApiException as err:
            if err.status == 404:
                return False
            raise api_error(f"read job {name}", err) from err
        return True

    async def _create(self, name: str, node: str, command: HostCommand) -> None:
        try:
            await asyncio.to_thread(
                self._batch.create_namespaced_job,
                self._settings.job_namespace,
                self.job_manifest(name, node, command),
            )
        except ApiException as err:
            # 409: an earlier attempt of this activity created it; wait for it.
            if err.status != 409:
                raise api_error(f"create job {name}", err) from err

    async def _wait(self, name: str, command: HostCommand) -> CommandOutcome:
        namespace = self._settings.job_namespace
        while True:
            # The Job is read before its pods: a Job already finished then has its
            # pod's final state in the listing that follows, so "finished without a
            # terminated pod" is never a race with the pod finishing.
            try:
                job = await asyncio.to_thread(self._batch.read_namespaced_job, name, namespace)
            except ApiException as err:
                if err.status == 404:
                    raise ApplicationError(
                        f"job {namespace}/{name} was deleted before its result was read",
                        type="HostCommandFailed",
                    ) from err
                raise api_error(f"read job {name}", err) from err
            pods = await self._pods(name)
            for pod in pods:
                terminated = _terminated(pod)
                if terminated is not None:
                    log = await self._log(pod.metadata.name)
                    if log is None:
                        continue  # deleted since the listing; the next poll decides
                    stdout, stderr = _split_log(log, command)
                    message = terminated.message or ""
                    return CommandOutcome(
                        command_id=f"job/{namespace}/{name}",
                        exit_code=int(terminated.exit_code),
                        stdout=stdout,
                        stderr="\n".join(t for t in (stderr, message) if t)[:MAX_STDERR],
                    )
            finished = _finished(job)
            if finished is not None:
                await self._delete(name)
                raise ApplicationError(
                    f"job {namespace}/{name} ended {finished.type} without a command "
                    f"result ({len(pods)} pod(s) left): {finished.reason}: {finished.message}",
                    type="HostCommandFailed",
                )
            activity.heartbeat(_details(name, command, [p.metadata.name for p in pods]))
            await self._world.sleep(self._settings.poll_interval.total_seconds())

    async def _pods(self, name: str) -> list[Any]:
        try:
            pods = await asyncio.to_thread(
                self._core.list_namespaced_pod,
                self._settings.job_namespace,
                label_selector=f"job-name={name}",
            )
        except ApiException as err:
            raise api_error(f"list pods of job {name}", err) from err
        return list(pods.items)

    async def _log(self, pod: str) -> str | None:
        """The pod's container log, or None when the pod is gone."""
        return await read_container_log(self._core, self._settings.job_namespace, pod, CONTAINER)

    async def _delete(self, name: str) -> None:
        # The TTL removes it later; the command's result is what matters.
        await delete_job(self._batch, self._settings.job_namespace, name)


def activity_job_name(kind: str, *scope: str) -> str:
    """The Job name of the running activity's ``kind`` of Job, the same on every attempt.

    ``gpu-remediation-<kind>-<hash>``: the hash is of the workflow id, run id,
    activity id and ``scope`` (what tells apart the Jobs one activity creates),
    so it differs between activities and between runs of a workflow. At most 63
    characters, the limit on the ``job-name`` label Kubernetes puts on the pods.

    Args:
        kind: What the Job does (``gpu_reset``, ``nccl``); lowercase letters,
            digits and underscores.
        scope: Further strings that tell apart the Jobs of one activity.
    """
    info = activity.info()
    ids = (info.workflow_id or "", info.workflow_run_id or "", info.activity_id)
    key = "\n".join((*ids, *scope))
    digest = hashlib.sha256(key.encode()).hexdigest()[:NAME_HASH_CHARS]
    prefix = f"gpu-remediation-{kind.replace('_', '-')}"[: MAX_NAME - NAME_HASH_CHARS - 1]
    return f"{prefix.rstrip('-')}-{digest}"


def _details(name: str, command: HostCommand, pods: list[str] | None = None) -> dict[str, Any]:
    # Every heartbeat carries the command: a retry resumes only the same command.
    details: dict[str, Any] = {"job": name, "command": command.model_dump()}
    if pods is not None:
        details["pods"] = pods
    return details


def _split_log(log: str, command: HostCommand) -> tuple[str, str]:
    """Stdout and stderr from a container log, which interleaves both streams.

    The encoded result is printed last, after whatever the tool wrote to stderr;
    everything before the marker is that stderr. A reset's log stays whole in
    stdout (its text is matched on both streams anyway).
    """
    if not command.encodes_output:
        return log, ""
    at = log.rfind(ENCODED_MARKER)
    if at < 0:
        return log, ""
    return log[at:], log[:at].strip()


def _terminated(pod: Any) -> Any | None:
    for status in (pod.status.container_statuses or []) if pod.status else []:
        if status.state is not None and status.state.terminated is not None:
            return status.state.terminated
    return None


def _finished(job: Any) -> Any | None:
    """The Job's Complete or Failed condition, once it has one."""
    for cond in (job.status.conditions or []) if job.status else []:
        if cond.type in ("Complete", "Failed") and cond.status == "True":
            return cond
    return None


async def read_container_log(
    core: Any, namespace: str, pod: str, container: str, *, limit: int = MAX_LOG_BYTES
) -> str | None:
    """A pod's container log, or None when the pod is gone.

    Args:
        core: The official client's ``CoreV1Api``.
        namespace: The pod's namespace.
        pod: The pod's name.
        container: The container whose log is read.
        limit: The most bytes read (``limitBytes``); a log that reaches it is refused.

    Raises:
        ApplicationError: The API refused the read (see ``api_error``), or
            ``HostOutputTooLarge`` (non-retryable) for a log of ``limit`` bytes or more.
    """
    try:
        # Unparsed: the client's deserializer json.loads() every response, so a
        # log that happens to be JSON would come back as a Python repr.
        response = await asyncio.to_thread(
            core.read_namespaced_pod_log,
            pod,
            namespace,
            container=container,
            limit_bytes=limit,
            _preload_content=False,
        )
    except ApiException as err:
        if err.status == 404:
            return None
        raise api_error(f"read log of pod {pod}", err) from err
    try:
        data: bytes = response.data
    finally:
        # Unpreloaded responses hold their pooled connection until released.
        response.release_conn()
    if len(data) >= limit:
        raise ApplicationError(
            f"log of pod {pod} reaches {limit} bytes: not read as a result",
            type="HostOutputTooLarge",
            non_retryable=True,
        )
    return data.decode(errors="replace")


async def delete_job(batch: Any, namespace: str, name: str) -> None:
    """Delete a Job and its pods; a failure is logged, not raised (its TTL removes it later).

    Args:
        batch: The official client's ``BatchV1Api``.
        namespace: The Job's namespace.
        name: The Job's name.
    """
    try:
        await asyncio.to_thread(
            batch.delete_namespaced_job, name, namespace, propagation_policy="Background"
        )
    except ApiException as err:
        if err.status != 404:
            activity.logger.warning("could not delete job %s: %s", name, err.reason)
