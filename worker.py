"""The remediation worker: runs the workflows and activities of gpu-remediation.

Connects with settings from the environment (``TEMPORAL_ADDRESS``,
``TEMPORAL_NAMESPACE``, ``TEMPORAL_API_KEY``, ``TEMPORAL_TLS*`` or a TOML
profile, read by ``temporalio.envconfig``), always with the pydantic data
converter, and shuts down gracefully on SIGINT/SIGTERM: running activities
get ``GRACEFUL_SHUTDOWN`` to finish before the worker exits, and workflows
simply continue on another worker.

Where the cluster and the cloud are comes from ``GPU_REMEDIATION_*`` variables
(``gpu_remediation.settings.Settings``): in-cluster credentials or kubeconfig by
default, the AWS SDK's usual credential chain, SSM for host commands unless
``GPU_REMEDIATION_HOST_EXECUTOR=job``. The worker's tuning comes from the same
place (``GPU_REMEDIATION_MAX_CONCURRENT_WORKFLOW_TASKS``,
``..._MAX_CONCURRENT_ACTIVITIES``, ``..._WORKFLOW_TASK_POLLERS``,
``..._ACTIVITY_TASK_POLLERS``, ``..._MAX_CACHED_WORKFLOWS``; unset: the SDK's
defaults; see docs/scaling.md).

Run: ``python worker.py`` (or ``make worker``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import boto3
import temporalio.activity
from botocore.config import Config as BotoConfig
from kubernetes import client as k8s
from kubernetes import config as kube_config
from temporalio.client import Client
from temporalio.worker import PollerBehaviorSimpleMaximum, Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from activities.aws import Ec2Activities
from activities.host import HostActivities
from activities.host_commands import HostCommandExecutor
from activities.host_ssm import SsmExecutor
from activities.kube_admission import KubeAdmissionActivities
from activities.kube_jobs import JobExecutor
from activities.kube_workloads import WorkloadActivities
from activities.kubernetes import KubernetesActivities
from activities.notify import HandOverNotifier
from activities.temporal import TemporalActivities
from activities.temporal_admission import AdmissionTemporalActivities
from activities.world_time import REAL_TIME, TestServerTime, WorldTime
from gpu_remediation.health import HealthServer
from gpu_remediation.ids import TASK_QUEUE, WORKER_POLLING
from gpu_remediation.logging_setup import ActivityLogContextInterceptor, configure_logging
from gpu_remediation.process_exit import exit_now
from gpu_remediation.settings import Settings
from gpu_remediation.telemetry import install_service_runtime
from gpu_remediation.temporal_setup import connect
from gpu_remediation.visibility import ListingVisibility, Visibility
from workflows.metrics import HISTOGRAM_BUCKETS
from workflows.node_admission import NodeAdmissionWorkflow
from workflows.node_remediation import NodeRemediationWorkflow
from workflows.permit_guard import PermitGuardWorkflow
from workflows.replacement_semaphore import ReplacementSemaphoreWorkflow

WORKFLOWS: Sequence[type] = (
    NodeRemediationWorkflow,
    ReplacementSemaphoreWorkflow,
    PermitGuardWorkflow,
    NodeAdmissionWorkflow,
)
# Longer than any activity needs to notice cancellation and stop cleanly; the
# Kubernetes Deployment's terminationGracePeriodSeconds must exceed it.
GRACEFUL_SHUTDOWN = timedelta(seconds=30)
HEARTBEAT_NOW = timedelta(milliseconds=1)
"""The heartbeat throttle of a worker on the test server's clock (``worker_tuning``)."""

log = logging.getLogger("gpu_remediation.worker")


def production_runner() -> SandboxedWorkflowRunner:
    """The sandbox production workers use: the node workflow's module passed through.

    The sandbox re-imports a workflow's module for every run it hosts; for the
    node workflow that is about 245 KiB per open incident, which puts 1,000
    open incidents over the worker's 500 MiB budget (ADR 017). Tests run the
    node workflow in the full sandbox (``build_worker``'s default), so its
    determinism is checked on every path the suite takes.
    """
    restrictions = SandboxRestrictions.default.with_passthrough_modules(
        NodeRemediationWorkflow.__module__
    )
    return SandboxedWorkflowRunner(restrictions=restrictions)


def build_worker(
    client: Client,
    activities: Sequence[Callable[..., Any]],
    task_queue: str = TASK_QUEUE,
    *,
    production: bool = False,
    visibility: Visibility | None = None,
    **options: Any,
) -> Worker:
    """Create a worker with every workflow of the project and the given activities.

    The Temporal activities (semaphore bootstrap, a node's incident history, a
    pool's recent replacements) are added unless ``activities`` has one of the
    same name (a test double answering what visibility would, on a server
    without visibility): any worker can host the semaphores.

    Args:
        client: A client using the pydantic data converter.
        activities: Activity implementations (Kubernetes, AWS, or test doubles).
        task_queue: Task queue to poll.
        production: Use the production sandbox (``production_runner``); False,
            the default, checks every workflow's code in the full sandbox.
        visibility: Where the Temporal activities list runs; None: the server's
            visibility (``ListingVisibility`` on the time-skipping test server).
        **options: Further ``temporalio.worker.Worker`` options.
    """
    if production:
        options.setdefault("workflow_runner", production_runner())
    given = {activity_name(a) for a in activities}
    temporal = [
        a
        for a in (
            *TemporalActivities(client, visibility).all(),
            *AdmissionTemporalActivities(client).all(),
        )
        if activity_name(a) not in given
    ]
    return Worker(
        client,
        task_queue=task_queue,
        workflows=list(WORKFLOWS),
        activities=[*temporal, *activities],
        graceful_shutdown_timeout=GRACEFUL_SHUTDOWN,
        # Every activity's log lines name its node, workflow and rung.
        interceptors=[ActivityLogContextInterceptor(), *options.pop("interceptors", [])],
        **options,
    )


def activity_name(fn: Callable[..., Any]) -> str:
    """The name an ``@activity.defn`` callable registers under.

    Read the way the SDK's worker reads it (``_Definition``: the SDK has no
    public accessor), so the two can never disagree.
    """
    return temporalio.activity._Definition.must_from_callable(fn).name or ""


def worker_tuning(settings: Settings) -> dict[str, Any]:
    """The ``Worker`` options the settings tune; unset settings keep the SDK's defaults.

    Args:
        settings: ``Settings.from_env()``: ``GPU_REMEDIATION_MAX_CONCURRENT_*``,
            ``..._TASK_POLLERS`` and ``..._MAX_CACHED_WORKFLOWS``.

    Returns:
        Keyword arguments for ``build_worker`` (and so for ``Worker``).
    """
    options: dict[str, Any] = {}
    if settings.max_concurrent_workflow_tasks is not None:
        options["max_concurrent_workflow_tasks"] = settings.max_concurrent_workflow_tasks
    if settings.max_concurrent_activities is not None:
        options["max_concurrent_activities"] = settings.max_concurrent_activities
    if settings.workflow_task_pollers is not None:
        options["workflow_task_poller_behavior"] = PollerBehaviorSimpleMaximum(
            maximum=settings.workflow_task_pollers
        )
    if settings.activity_task_pollers is not None:
        options["activity_task_poller_behavior"] = PollerBehaviorSimpleMaximum(
            maximum=settings.activity_task_pollers
        )
    if settings.max_cached_workflows is not None:
        options["max_cached_workflows"] = settings.max_cached_workflows
    if settings.world_time == "test-server":
        # Between two heartbeats the test server's time may skip far (clock-free what-if):
        # send each one at once instead of up to a minute later, as the SDK would.
        options["max_heartbeat_throttle_interval"] = HEARTBEAT_NOW
        options["default_heartbeat_throttle_interval"] = HEARTBEAT_NOW
    return options


def production_activities(
    settings: Settings, world: WorldTime = REAL_TIME
) -> list[Callable[..., Any]]:
    """The real activities: Kubernetes, EC2, and host commands via SSM or Jobs.

    Args:
        settings: Where the cluster and the cloud are (``Settings.from_env()``).
        world: The timeline their waits for the world run on (real time, but for
            the clock-free what-if: ``world_time_for``).
    """
    api = kube_api_client(settings)
    core, custom, batch = k8s.CoreV1Api(api), k8s.CustomObjectsApi(api), k8s.BatchV1Api(api)
    aws = {
        "region_name": settings.aws_region,
        "endpoint_url": settings.aws_endpoint_url,
        # Adaptive mode retries throttling and 5xx with client-side rate limiting.
        "config": BotoConfig(retries={"mode": "adaptive", "max_attempts": 8}),
    }
    executor: HostCommandExecutor
    if settings.host_executor == "ssm":
        executor = SsmExecutor(
            boto3.client("ssm", **aws),
            document=settings.ssm_document,
            poll_interval=settings.poll_interval,
            world=world,
        )
    else:
        executor = JobExecutor(batch, core, settings, world)
    kube = KubernetesActivities(core, custom, settings, world)
    ec2 = Ec2Activities(
        boto3.client("ec2", **aws), core, poll_interval=settings.poll_interval, world=world
    )
    host = HostActivities(executor)
    return [
        kube.read_node_health,
        kube.quarantine_node,
        kube.release_node,
        kube.drain_gpu_pods,
        kube.record_step,
        kube.escalate,
        kube.notify_workload_owner,
        HandOverNotifier(settings).notify_hand_over,
        kube.delete_node_claim,
        kube.wait_for_replacement,
        kube.check_breaker,
        ec2.reboot_node,
        *host.all(),
        *WorkloadActivities(core, settings, world).all(),
        *KubeAdmissionActivities(core, settings, world=world).all(),
    ]


def world_time_for(settings: Settings, client: Client) -> WorldTime:
    """The timeline the settings name: real, or the test server ``client`` talks to."""
    return TestServerTime(client) if settings.world_time == "test-server" else REAL_TIME


def kube_api_client(settings: Settings) -> k8s.ApiClient:
    """An API client for the simulator's URL, the in-cluster account or kubeconfig."""
    if settings.kube_api_url:
        configuration = k8s.Configuration(host=settings.kube_api_url)
        return k8s.ApiClient(configuration)
    try:
        kube_config.load_incluster_config()
    except kube_config.ConfigException:
        kube_config.load_kube_config(context=settings.kube_context)
    return k8s.ApiClient()


async def main() -> None:
    """Connect, run until a signal arrives, then drain and exit."""
    settings = Settings.from_env()
    configure_logging(settings.log_format, os.environ.get("LOG_LEVEL", "INFO"))
    # Before connecting: the runtime the client is made with exports the metrics.
    install_service_runtime(settings.metrics_bind, histogram_buckets=HISTOGRAM_BUCKETS)
    client = await connect()
    task_queue = os.environ.get("GPU_REMEDIATION_TASK_QUEUE", TASK_QUEUE)
    tuning = worker_tuning(settings)
    worker = build_worker(
        client,
        production_activities(settings, world_time_for(settings, client)),
        task_queue,
        production=True,
        visibility=ListingVisibility(client) if settings.world_time == "test-server" else None,
        **tuning,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    health = None
    if settings.health_bind:
        health = HealthServer(settings.health_bind, ready=lambda: temporal_ready(client))
        await health.start()
    try:
        async with worker:
            # The demo reads this line where the server cannot describe a task queue.
            log.info("%s %s (tuning: %s)", WORKER_POLLING, task_queue, tuning or "defaults")
            await stop.wait()
            log.info("shutting down (up to %s for running activities)", GRACEFUL_SHUTDOWN)
    finally:
        if health is not None:
            await health.stop()


async def temporal_ready(client: Client) -> tuple[bool, str]:
    """Readiness: the Temporal frontend answers its health check."""
    serving = await client.service_client.check_health(timeout=timedelta(seconds=2))
    return serving, f"Temporal at {client.service_client.config.target_host} " + (
        "serving" if serving else "not serving"
    )


if __name__ == "__main__":
    asyncio.run(main())
    # The SDK core's threads can crash interpreter finalization (see
    # gpu_remediation.process_exit): leave without it.
    exit_now(0)
