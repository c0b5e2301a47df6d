"""``remediate worker``: run the remediation worker (``worker.py``'s ``main``).

The worker itself reads its settings from the environment (``TEMPORAL_*``
through envconfig, ``GPU_REMEDIATION_*``); the options here only override
those variables for this process, so ``remediate worker`` and
``python worker.py`` always run the same code.
"""

from __future__ import annotations

import asyncio
import os
from typing import Annotated

import typer
from kubernetes.config import ConfigException

import worker as worker_module
from cli.connection import AddressOption, NamespaceOption, TemporalOptions
from cli.output import ExitCode, fail, run
from gpu_remediation.settings import Settings

worker_app = typer.Typer()


@worker_app.command("worker")
def worker(
    task_queue: Annotated[
        str | None,
        typer.Option(
            "--task-queue",
            help="Task queue to poll (default: GPU_REMEDIATION_TASK_QUEUE or gpu-remediation).",
            show_default=False,
        ),
    ] = None,
    address: AddressOption = None,
    namespace: NamespaceOption = None,
    metrics_bind: Annotated[
        str | None,
        typer.Option(
            "--metrics-bind",
            help="host:port of the Prometheus /metrics endpoint (SDK and workflow metrics; "
            "default: GPU_REMEDIATION_METRICS_BIND, else none).",
            show_default=False,
        ),
    ] = None,
    health_bind: Annotated[
        str | None,
        typer.Option(
            "--health-bind",
            help="host:port of /healthz and /readyz (default: GPU_REMEDIATION_HEALTH_BIND, "
            "else none).",
            show_default=False,
        ),
    ] = None,
    log_format: Annotated[
        str | None,
        typer.Option(
            "--log-format",
            help="text or json (default: GPU_REMEDIATION_LOG_FORMAT, else text).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Run the remediation worker until SIGINT/SIGTERM (then drain gracefully).

    Kubernetes, AWS and host-command settings come from GPU_REMEDIATION_*
    variables (docs/reference.md, "Settings"); a bad value stops the worker at start.
    """
    observability = {
        "GPU_REMEDIATION_METRICS_BIND": metrics_bind,
        "GPU_REMEDIATION_HEALTH_BIND": health_bind,
        "GPU_REMEDIATION_LOG_FORMAT": log_format,
    }
    os.environ.update({name: value for name, value in observability.items() if value})
    try:
        Settings.from_env()
    except ValueError as err:
        fail(str(err), ExitCode.INVALID_INPUT)
    options = TemporalOptions(address=address, namespace=namespace)
    # Fail fast and clearly (exit 3) rather than from inside the worker's startup.
    run(options.connect())
    profile = options.profile()
    overrides = {
        "TEMPORAL_ADDRESS": profile.address,
        "TEMPORAL_NAMESPACE": profile.namespace,
        "GPU_REMEDIATION_TASK_QUEUE": task_queue,
    }
    # The worker reads these itself; this process is the worker, so setting
    # them here affects nothing else.
    os.environ.update({name: value for name, value in overrides.items() if value})
    try:
        asyncio.run(worker_module.main())
    except ConfigException as err:
        fail(f"no Kubernetes configuration: {err}", ExitCode.INVALID_INPUT)
