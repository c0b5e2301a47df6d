"""Helpers for the job-stage tests: jobs on a node, answers as a job writes them."""

from __future__ import annotations

import json
from typing import Any

from gpu_remediation.ids import Activities as A
from gpu_remediation.ids import Signals
from gpu_remediation.job_contracts import CheckpointAnswerReport, NodeJobs, WatchedPodEnded
from gpu_remediation.jobs import JobRef
from tests.doubles import FakeFleet, fake_pod_uid
from tests.workflows.node_support import NodeHandle

JOBSET = "jobset.sigs.k8s.io/jobset-name"


def job(name: str = "llm", *, supported: bool = True, nodes: int = 4) -> JobRef:
    """A JobSet with one pod per node, one of them on the incident's node."""
    return JobRef(
        namespace="ml",
        label_key=JOBSET,
        name=name,
        nodes=nodes,
        pods=nodes,
        pods_on_node=1,
        checkpoint_supported=supported,
    )


def on_node(*jobs: JobRef) -> NodeJobs:
    """What find_node_jobs answers for a node running ``jobs``."""
    return NodeJobs(jobs=list(jobs), gpu_pods=sum(j.pods_on_node for j in jobs))


def requested_incident(fleet: FakeFleet) -> str:
    """The incident id the workflow wrote into its (only) checkpoint request."""
    [incident] = [
        arg.request_incident  # type: ignore[attr-defined]
        for name, arg in fleet.calls
        if name == A.REQUEST_CHECKPOINT
    ]
    return str(incident)


def answer_json(incident: str, step: int | None = 1200, **extra: Any) -> str:
    """An answer annotation as the contract says a job writes it."""
    return json.dumps(
        {"version": 1, "incident": incident, "step": step, "saved_at": "2026-12-04T13:04:31Z"}
        | extra
    )


async def relay_answer(
    handle: NodeHandle,
    incident: str,
    raw: str,
    *,
    truncated: bool = False,
    job: str | None = None,
    pod: str | None = None,
    pod_uid: str | None = None,
) -> None:
    """Send what the watcher's relay sends when a pod's answer changes.

    ``job`` is what the request on the pod names (default ``ml/llm``); the pod
    defaults to that job's first pod, and its uid to the one the fake fleet
    gave it (``pod_uid`` sends another, as a forged pod would).
    """
    pod = pod or f"{job or 'ml/llm'}-0"
    report = CheckpointAnswerReport(
        pod=pod,
        request_incident=incident,
        raw=raw,
        truncated=truncated,
        job=job,
        pod_uid=pod_uid or fake_pod_uid(pod),
    )
    await handle.signal(Signals.CHECKPOINT_ANSWER, report)


async def relay_pod_ended(handle: NodeHandle, incident: str) -> None:
    """Send what the relay sends when a watched pod ends."""
    report = WatchedPodEnded(pod="ml/llm-0", request_incident=incident, phase="Succeeded")
    await handle.signal(Signals.WATCHED_POD_ENDED, report)
