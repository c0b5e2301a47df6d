"""``remediate receiver``: serve the Alertmanager webhook receiver (FastAPI + uvicorn).

The bearer token comes from ``GPU_REMEDIATION_RECEIVER_TOKEN`` or ``--token-file``
(never a plain flag: flags show up in process listings and shell history); the
receiver refuses to start without one. Temporal settings come from the standard
``TEMPORAL_*`` variables or a TOML profile (``temporalio.envconfig``), which
``--address`` and ``--namespace`` override.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from pathlib import Path
from typing import Annotated

import typer
import uvicorn
from temporalio.envconfig import ClientConfigProfile

from cli.output import ExitCode
from gpu_remediation.ids import TASK_QUEUE, node_workflow_id
from gpu_remediation.logging_setup import LOG_FORMATS, configure_logging
from gpu_remediation.policy_loader import PolicyError, load_policy
from gpu_remediation.telemetry import install_service_runtime
from gpu_remediation.temporal_setup import connect
from triggers import receiver as rx
from triggers.starter import IncidentStarter

TOKEN_ENV = "GPU_REMEDIATION_RECEIVER_TOKEN"
CLUSTER_ENV = "GPU_REMEDIATION_CLUSTER"


def _fail(message: str, code: int = 2) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


def read_token(token_file: Path | None, env: dict[str, str] | None = None) -> str:
    """Return the receiver's token from ``token_file`` or the environment.

    Raises:
        typer.Exit: With a message when there is no token, two tokens, or a short one.
    """
    source = os.environ if env is None else env
    from_env = source.get(TOKEN_ENV, "").strip()
    if token_file is not None and from_env:
        raise _fail(f"the token is given twice ({TOKEN_ENV} and --token-file); give one")
    if token_file is not None:
        try:
            token = token_file.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as err:
            raise _fail(f"cannot read the token file {token_file}: {err}") from err
    else:
        token = from_env
    if not token:
        raise _fail(
            f"no token: set {TOKEN_ENV} or pass --token-file (the receiver never runs open)"
        )
    if len(token) < rx.MIN_TOKEN_LENGTH:
        raise _fail(f"the token must have at least {rx.MIN_TOKEN_LENGTH} characters")
    return token


def receiver(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")] = 8080,
    policy_file: Annotated[
        Path | None,
        typer.Option(
            "--policy",
            exists=True,
            dir_okay=False,
            metavar="FILE",
            help="Policy YAML (over the defaults): new incidents run under it; its "
            "triggers.alert_node_labels name the node.",
        ),
    ] = None,
    cluster: Annotated[
        str, typer.Option(envvar=CLUSTER_ENV, help="Cluster name, part of every workflow id.")
    ] = "default",
    address: Annotated[
        str | None, typer.Option(help="Temporal frontend host:port (default: TEMPORAL_ADDRESS).")
    ] = None,
    namespace: Annotated[
        str | None, typer.Option(help="Temporal namespace (default: TEMPORAL_NAMESPACE).")
    ] = None,
    task_queue: Annotated[
        str,
        typer.Option(
            envvar="GPU_REMEDIATION_TASK_QUEUE",
            help="Task queue of the remediation workers (for incidents this receiver starts).",
        ),
    ] = TASK_QUEUE,
    token_file: Annotated[
        Path | None,
        typer.Option(dir_okay=False, help=f"File holding the bearer token (else ${TOKEN_ENV})."),
    ] = None,
    max_in_flight: Annotated[
        int, typer.Option(min=1, help="Temporal calls in flight at once.")
    ] = rx.DEFAULT_MAX_IN_FLIGHT,
    delivery_timeout: Annotated[
        float, typer.Option(min=0.1, help="Seconds per request for Temporal before a 503.")
    ] = rx.DEFAULT_DELIVERY_TIMEOUT,
    dedup_size: Annotated[
        int, typer.Option(min=0, help="Recent deliveries remembered to skip duplicates (0: off).")
    ] = rx.DEFAULT_DEDUP_SIZE,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
    access_log: Annotated[bool, typer.Option(help="Log every request.")] = True,
    log_format: Annotated[
        str,
        typer.Option(
            envvar="GPU_REMEDIATION_LOG_FORMAT",
            help="text, or json: one object per line with node and workflow_id.",
        ),
    ] = "text",
) -> None:
    """Serve the Alertmanager webhook receiver (POST /v1/alerts, /healthz, /readyz, /docs).

    Exits 2 on bad settings (no token, invalid policy, cluster name or Temporal
    client settings) and 1 when Temporal cannot be reached at start.
    """
    token = read_token(token_file)
    try:
        policy = load_policy(policy_file)
    except PolicyError as err:
        raise _fail(str(err)) from err
    try:
        node_workflow_id(cluster, "node")
    except ValueError as err:
        raise _fail(str(err)) from err
    level = log_level.upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise _fail(f"unknown log level {log_level!r}")
    if log_format not in LOG_FORMATS:
        raise _fail(f"unknown log format {log_format!r} (text or json)")
    json_logs = log_format == "json"
    if json_logs:
        configure_logging("json", level)
        # The SDK core's own lines join Python logging, so every line is JSON.
        install_service_runtime()
    else:
        logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    async def serve() -> None:
        try:
            profile = ClientConfigProfile.load()
        except Exception as err:  # envconfig raises plain errors for bad TOML or values
            raise _fail(f"invalid Temporal client settings (TEMPORAL_* / profile): {err}") from err
        profile = dataclasses.replace(
            profile,
            address=address or profile.address,
            namespace=namespace or profile.namespace,
        )
        try:
            client = await connect(profile)
        except Exception as err:
            # Any connection failure: say what we tried, then stop (the
            # orchestrator restarts us).
            raise _fail(f"cannot reach Temporal: {err}", code=ExitCode.UNREACHABLE) from err
        starter = IncidentStarter(client, cluster=cluster, policy=policy, task_queue=task_queue)
        app = rx.create_app(
            starter,
            token,
            client=client,
            max_in_flight=max_in_flight,
            delivery_timeout=delivery_timeout,
            dedup_size=dedup_size,
        )
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level=log_level.lower(),
            access_log=access_log,
            workers=1,
            # JSON mode: uvicorn's loggers propagate to the root's JSON handler.
            log_config=None if json_logs else uvicorn.config.LOGGING_CONFIG,
        )
        await uvicorn.Server(config).serve()

    asyncio.run(serve())
