"""Helpers for the admission workflow tests: a worker with the real admission activities
against the Kubernetes API emulator, a scripted DCGM diagnostic, nodes, policies.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes import client as k8s
from temporalio import activity
from temporalio.client import Client, WorkflowHandle

from activities.kube_admission import KubeAdmissionActivities
from gpu_remediation import contracts as c
from gpu_remediation.admission_models import AdmissionInput, AdmissionResult, AdmissionState
from gpu_remediation.ids import (
    STARTUP_TAINT_KEY,
    Activities,
    Queries,
    admission_workflow_id,
)
from gpu_remediation.models import DcgmEvidence
from gpu_remediation.policy import AdmissionPolicy, Policy
from gpu_remediation.settings import Settings
from simulator.kube_api import NODES, KubeApiServer, KubeStore
from tests.workflows.node_support import policy as node_policy
from worker import build_worker

TAINT = {"key": STARTUP_TAINT_KEY, "effect": "NoSchedule"}
EFA_OK = {"type": "EfaHealthProblem", "status": "False", "reason": "EfaIsHealthy", "message": ""}


def gate_policy(**admission: Any) -> Policy:
    """The default policy with the gate on and fast burn-in timings (real seconds)."""
    settings: dict[str, Any] = {
        "enabled": True,
        "settle": timedelta(milliseconds=100),
        "poll_interval": timedelta(milliseconds=200),
        "check_timeout": timedelta(seconds=30),
        "ready_timeout": timedelta(seconds=5),
        **admission,
    }
    return node_policy(admission=AdmissionPolicy(**settings))


def put_gated_node(
    store: KubeStore, name: str, boot: str = "boot-a", *, efa: dict[str, str] | None = None
) -> None:
    """A node as Karpenter registers it: Ready, behind the startup taint."""
    store.put_node(
        name,
        node_pool="h100",
        provider_id=f"aws:///us-west-2a/i-{uuid.uuid4().hex[:17]}",
        boot_id=boot,
        taints=[dict(TAINT)],
        labels={"node.kubernetes.io/instance-type": "p5.48xlarge"},
        conditions=[efa or EFA_OK],
    )


def taint_keys(store: KubeStore, name: str) -> list[str]:
    """The node's taint keys."""
    return [t["key"] for t in store.get(NODES, name)["spec"].get("taints") or []]


@dataclass
class ScriptedDiag:
    """The DCGM diagnostic, scripted: passes or fails, optionally held until released."""

    fail: bool = False
    hold: bool = False
    runs: list[str] = field(default_factory=list)
    cancelled: int = 0
    release: asyncio.Event = field(default_factory=asyncio.Event)
    running: asyncio.Event = field(default_factory=asyncio.Event)

    def activity(self) -> Any:
        @activity.defn(name=Activities.RUN_DIAGNOSTIC)
        async def run_diagnostic(input: c.RunDiagnosticInput) -> c.DiagnosticResult:
            self.runs.append(f"{input.node}@{input.level}")
            self.running.set()
            try:
                while self.hold and not self.release.is_set():
                    activity.heartbeat()
                    await asyncio.sleep(0.05)
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
            if self.fail:
                failure = DcgmEvidence(
                    observed_at=datetime.now(UTC),
                    source="dcgm-diag",
                    check="diag",
                    error_id=80,
                    gpu_index=3,
                    message="row remap failure",
                )
                return c.DiagnosticResult(passed=False, failures=[failure], summary="fail")
            return c.DiagnosticResult(passed=True, summary="all tests passed")

        return run_diagnostic


@asynccontextmanager
async def admission_worker(
    client: Client, kube: KubeApiServer, task_queue: str, diag: ScriptedDiag
) -> AsyncIterator[None]:
    """A worker with every workflow, the real admission activities and the scripted diag."""
    with kube.api_client() as api:
        kube_admission = KubeAdmissionActivities(
            k8s.CoreV1Api(api), Settings(kube_api_url=kube.url)
        )
        async with build_worker(
            client,
            [*kube_admission.all(), diag.activity()],
            task_queue,
            # Heartbeats (and so cancellations) reach the server at once, not after 24 s.
            max_heartbeat_throttle_interval=timedelta(milliseconds=100),
            default_heartbeat_throttle_interval=timedelta(milliseconds=100),
        ):
            yield


AdmissionHandle = WorkflowHandle[Any, AdmissionResult]


async def start(
    client: Client,
    task_queue: str,
    node: str,
    *,
    boot: str = "boot-a",
    policy: Policy | None = None,
    **fields: Any,
) -> tuple[str, AdmissionHandle]:
    """Start an admission of ``node`` at ``boot`` in a fresh cluster; return (cluster, handle)."""
    cluster = fields.pop("cluster", f"c{uuid.uuid4().hex[:8]}")
    admission = AdmissionInput(
        cluster=cluster,
        node=node,
        boot_id=boot,
        policy=policy or gate_policy(),
        semaphore_workflow_id=f"sem-{cluster}",
        **fields,
    )
    handle = await client.start_workflow(
        "NodeAdmission",
        admission,
        id=admission_workflow_id(cluster, node, boot),
        task_queue=task_queue,
        result_type=AdmissionResult,
    )
    return cluster, handle


async def admission_state(handle: AdmissionHandle) -> AdmissionState:
    """The admission's state query."""
    state: AdmissionState = await handle.query(Queries.ADMISSION_STATE, result_type=AdmissionState)
    return state
