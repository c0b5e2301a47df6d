"""``remediate watch``: run the node-condition watcher until SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import signal
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

import typer
from kubernetes.config import ConfigException
from temporalio.envconfig import ClientConfigProfile

from cli.output import ExitCode
from gpu_remediation.health import HealthServer
from gpu_remediation.ids import TASK_QUEUE, node_workflow_id
from gpu_remediation.logging_setup import LOG_FORMATS, configure_logging
from gpu_remediation.policy import Policy
from gpu_remediation.policy_loader import PolicyError, load_policy
from gpu_remediation.settings import Settings
from gpu_remediation.telemetry import install_service_runtime
from gpu_remediation.temporal_setup import connect
from triggers.checkpoint_relay import CheckpointRelay
from triggers.metrics import WatcherMetrics
from triggers.nvsentinel import ExternalRemediationRelay
from triggers.starter import IncidentStarter
from triggers.stragglers import StragglerDetector
from triggers.watcher import NodeConditionWatcher

log = logging.getLogger("gpu_remediation.watcher")


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(2)


def watch(
    policy: Annotated[
        Path | None,
        typer.Option(
            "--policy",
            exists=True,
            dir_okay=False,
            help="Policy YAML (merged over the defaults); its `triggers` section says which "
            "conditions count and their grace periods. Default: the packaged defaults.",
        ),
    ] = None,
    cluster: Annotated[
        str,
        typer.Option(
            "--cluster",
            envvar="GPU_REMEDIATION_CLUSTER",
            help="Cluster name (part of every node's workflow id).",
        ),
    ] = "default",
    selector: Annotated[
        str | None,
        typer.Option(
            "--selector",
            help="Label selector of the watched nodes (overrides triggers.node_selector; "
            "'' watches every node).",
            show_default=False,
        ),
    ] = None,
    kube_api_url: Annotated[
        str | None,
        typer.Option(
            "--kube-api-url",
            help="Kubernetes API URL (e.g. the simulator's) instead of in-cluster credentials "
            "or kubeconfig (default: GPU_REMEDIATION_KUBE_API_URL).",
            show_default=False,
        ),
    ] = None,
    kube_context: Annotated[
        str | None,
        typer.Option(
            "--kube-context",
            help="kubeconfig context (default: GPU_REMEDIATION_KUBE_CONTEXT, else the current).",
            show_default=False,
        ),
    ] = None,
    task_queue: Annotated[
        str,
        typer.Option(
            "--task-queue",
            envvar="GPU_REMEDIATION_TASK_QUEUE",
            help="Task queue of the remediation workers (for incidents this watcher starts).",
        ),
    ] = TASK_QUEUE,
    address: Annotated[
        str | None,
        typer.Option(
            help="Temporal frontend host:port (default: TEMPORAL_ADDRESS).", show_default=False
        ),
    ] = None,
    namespace: Annotated[
        str | None,
        typer.Option(help="Temporal namespace (default: TEMPORAL_NAMESPACE).", show_default=False),
    ] = None,
    tick: Annotated[
        float,
        typer.Option("--tick", min=0.05, max=60.0, help="Seconds between grace-period checks."),
    ] = 1.0,
    health_bind: Annotated[
        str | None,
        typer.Option(
            "--health-bind",
            help="host:port of /healthz, /readyz and /metrics (default: "
            "GPU_REMEDIATION_HEALTH_BIND, else none).",
            show_default=False,
        ),
    ] = None,
    checkpoint_relay: Annotated[
        bool,
        typer.Option(
            "--checkpoint-relay/--no-checkpoint-relay",
            help="Also watch Pods and relay jobs' checkpoint answers to their incidents "
            "(docs/checkpoint-contract.md).",
        ),
    ] = True,
    nvsentinel: Annotated[
        bool,
        typer.Option(
            "--nvsentinel/--no-nvsentinel",
            help="Also take NVIDIA NVSentinel's ExternalRemediationRequests into incidents "
            "and write each incident's outcome back on its request (docs/nvsentinel.md).",
        ),
    ] = False,
    log_format: Annotated[
        str | None,
        typer.Option(
            "--log-format",
            help="text or json (default: GPU_REMEDIATION_LOG_FORMAT, else text).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Watch GPU nodes' conditions and report problems to their incidents.

    Conditions, bad statuses, reason patterns and grace periods come from the
    policy's `triggers` section. Temporal is reached through the standard
    TEMPORAL_* settings (--address and --namespace override them). Runs until
    SIGINT or SIGTERM, then stops cleanly. Exits 2 on invalid input (policy,
    cluster name, settings, no Kubernetes configuration) and 1 when Temporal
    cannot be reached at start.
    """
    if log_format is not None and log_format not in LOG_FORMATS:
        raise _fail(f"unknown log format {log_format!r} (text or json)")
    try:
        pol = load_policy(policy)
    except PolicyError as err:
        raise _fail(str(err)) from err
    try:
        node_workflow_id(cluster, "n")  # validates the cluster name before connecting
        settings = Settings.from_env()
    except ValueError as err:
        raise _fail(str(err)) from err
    overrides = {
        "cluster": cluster,
        "kube_api_url": kube_api_url or settings.kube_api_url,
        "kube_context": kube_context or settings.kube_context,
        "health_bind": health_bind or settings.health_bind,
        "log_format": log_format or settings.log_format,
    }
    try:
        settings = Settings.model_validate({**settings.model_dump(), **overrides})
    except ValueError as err:
        raise _fail(f"invalid settings: {err}") from err
    configure_logging(settings.log_format, os.environ.get("LOG_LEVEL", "INFO"))
    if settings.log_format == "json":
        # The SDK core's own lines join Python logging, so every line is JSON.
        install_service_runtime()
    # Imported here: the worker module pulls in every activity and the AWS SDK.
    from worker import kube_api_client

    try:
        api = kube_api_client(settings)
    except ConfigException as err:
        raise _fail(f"no Kubernetes configuration: {err}") from err
    with api:
        asyncio.run(
            _run(
                api,
                settings.cluster,
                pol,
                selector=selector,
                task_queue=task_queue,
                tick=tick,
                address=address,
                namespace=namespace,
                health_bind=settings.health_bind,
                checkpoint_relay=checkpoint_relay,
                nvsentinel=nvsentinel,
                gpu_resource=settings.gpu_resource,
            )
        )


async def _run(
    api: Any,
    cluster: str,
    policy: Policy,
    *,
    selector: str | None,
    task_queue: str,
    tick: float,
    address: str | None,
    namespace: str | None,
    health_bind: str | None = None,
    checkpoint_relay: bool = True,
    nvsentinel: bool = False,
    gpu_resource: str = "nvidia.com/gpu",
) -> None:
    profile = ClientConfigProfile.load()
    profile = dataclasses.replace(
        profile, address=address or profile.address, namespace=namespace or profile.namespace
    )
    try:
        client = await connect(profile)
    except Exception as err:
        # Whatever the cause (refused, TLS, DNS): say so and stop; the
        # orchestrator restarts the watcher.
        typer.echo(f"error: cannot reach Temporal: {err}", err=True)
        raise typer.Exit(ExitCode.UNREACHABLE) from err
    starter = IncidentStarter(client, cluster=cluster, policy=policy, task_queue=task_queue)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    metrics = WatcherMetrics()
    watcher = NodeConditionWatcher(
        api, starter, client, selector=selector, tick_interval=tick, metrics=metrics
    )
    health = None
    if health_bind:

        async def ready() -> tuple[bool, str]:
            if watcher.source.lists == 0:
                return False, "the nodes have not been listed yet"
            serving = await client.service_client.check_health(timeout=timedelta(seconds=2))
            return serving, "Temporal serving" if serving else "Temporal not serving"

        health = HealthServer(health_bind, ready=ready, metrics=metrics.exposition)
        await health.start()
    relay = None
    if checkpoint_relay:
        stragglers = policy.triggers.stragglers
        detector = (
            StragglerDetector(stragglers, policy.jobs.label_keys, gpu_resource=gpu_resource)
            if stragglers.enabled
            else None
        )
        relay = CheckpointRelay(
            api,
            client,
            cluster,
            stragglers=detector,
            report_stragglers=watcher.add_reports if detector is not None else None,
        )
    runs = [watcher.run(stop)]
    if relay is not None:
        runs.append(relay.run(stop))
    if nvsentinel:
        handovers = ExternalRemediationRelay(
            api,
            starter,
            client,
            watches=watcher.watches,
            ready=lambda: watcher.listed,
        )
        runs.append(handovers.run(stop))
    try:
        await asyncio.gather(*runs)
    finally:
        if health is not None:
            await health.stop()
    log.info("watcher stopped")
