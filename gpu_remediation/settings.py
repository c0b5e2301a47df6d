"""Worker settings: how the activities reach the cluster and the cloud, and the tuning.

The tuning is the worker's task slots, pollers and cache (docs/scaling.md).
Read from ``GPU_REMEDIATION_*`` environment variables (validated; a bad value
stops the worker at start with the variable's name), so the same image runs
against EKS, the fleet simulator or a test emulator.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import timedelta
from typing import Literal

from pydantic import Field, ValidationError

from gpu_remediation.contracts import QUARANTINE_TAINT_KEY
from gpu_remediation.host_command import HOST_COMMAND_DOCUMENT
from gpu_remediation.models import Model

PREFIX = "GPU_REMEDIATION_"
# host:port, [v6]:port or :port (every address).
BIND_PATTERN = r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]*):[0-9]{1,5}$"


class Settings(Model):
    """Everything the activities need besides their clients, and the worker's tuning."""

    cluster: str = Field(default="default", min_length=1, max_length=100)
    kube_context: str | None = None
    kube_api_url: str | None = Field(
        default=None, description="Talk to this API server (the simulator's) instead of kubeconfig."
    )
    aws_region: str = "us-west-2"
    aws_endpoint_url: str | None = Field(default=None, description="moto in the simulator.")
    host_executor: Literal["ssm", "job"] = "ssm"
    ssm_document: str = Field(
        default=HOST_COMMAND_DOCUMENT,
        pattern=r"^[a-zA-Z0-9_.-]{3,128}$",
        description="The SSM Command document of the host commands "
        "(deploy/aws/gpu-remediation-host-command.json, created under this name).",
    )
    job_namespace: str = Field(
        default="gpu-remediation-jobs",
        pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$",
        description="Namespace of the Job executor's privileged Jobs: a namespace of its "
        "own (Pod Security privileged), never the services' (restricted).",
    )
    job_image: str = Field(
        default="nvcr.io/nvidia/cloud-native/dcgm:4.2.3-1-ubuntu22.04",
        description="Image with nvidia-smi and dcgmi for the Job executor.",
    )
    node_pool_label: str = "karpenter.sh/nodepool"
    quarantine_taint_key: str = QUARANTINE_TAINT_KEY
    events_namespace: str = "default"
    gpu_resource: str = "nvidia.com/gpu"
    eviction_retry: timedelta = Field(default=timedelta(seconds=5), gt=timedelta(0))
    poll_interval: timedelta = Field(default=timedelta(seconds=5), gt=timedelta(0))
    world_time: Literal["real", "test-server"] = Field(
        default="real",
        description=(
            "The timeline activities wait for the world on: real time, or (the clock-free "
            "what-if only, ADR 018) the clock of the Temporal time-skipping test server the "
            "worker is connected to; there the worker also lists runs without visibility."
        ),
    )
    # Observability (the service commands: worker, watcher; the receiver has its own flags).
    metrics_bind: str | None = Field(
        default=None,
        pattern=BIND_PATTERN,
        description="host:port of the worker's Prometheus /metrics (SDK and workflow metrics).",
    )
    health_bind: str | None = Field(
        default=None,
        pattern=BIND_PATTERN,
        description="host:port of /healthz and /readyz (worker), plus /metrics (watcher).",
    )
    log_format: Literal["text", "json"] = "text"
    ui_url: str | None = Field(
        default=None,
        pattern=r"^https?://",
        description="The Temporal UI's address, for the incident's link in a hand-over "
        "notification.",
    )
    # Worker tuning (docs/scaling.md): unset keeps the SDK's defaults (100 slots
    # of each kind, 5 pollers of each kind, 1,000 cached workflows).
    max_concurrent_workflow_tasks: int | None = Field(
        default=None, ge=2, description="Workflow task slots (the SDK needs 2 with a cache)."
    )
    max_concurrent_activities: int | None = Field(default=None, ge=1)
    workflow_task_pollers: int | None = Field(
        default=None, ge=2, description="Concurrent workflow task polls (sticky and normal)."
    )
    activity_task_pollers: int | None = Field(default=None, ge=1)
    max_cached_workflows: int | None = Field(
        default=None, ge=0, description="Workflows kept in memory between tasks (0: none)."
    )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Build the settings from ``GPU_REMEDIATION_<FIELD>`` variables.

        Raises:
            ValueError: Naming each bad variable.
        """
        source = os.environ if env is None else env
        values = {
            name: source[PREFIX + name.upper()]
            for name in cls.model_fields
            if PREFIX + name.upper() in source
        }
        try:
            return cls.model_validate(values)
        except ValidationError as err:
            problems = "; ".join(
                f"{PREFIX}{'.'.join(str(p) for p in e['loc']).upper()}: {e['msg']}"
                for e in err.errors()
            )
            raise ValueError(f"invalid settings: {problems}") from err
