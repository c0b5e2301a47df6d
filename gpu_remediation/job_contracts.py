"""Contracts of the job stage: the jobs on a node, the checkpoint request, relayed answers.

Activity inputs and results follow ``gpu_remediation.contracts`` (one
``<Verb>Input`` per activity); the two signal payloads are what the watcher's
relay sends an incident when a job answers or one of its watched pods ends.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from gpu_remediation.contracts import NodeInput
from gpu_remediation.jobs import JOB_MAX_CHARS, RELAYED_MAX_CHARS, JobRef
from gpu_remediation.models import Model, Urgency

_LABEL_KEYS = Field(min_length=1, max_length=20)


class FindNodeJobsInput(NodeInput):
    """Find the jobs whose GPU pods run on the node."""

    label_keys: list[str] = _LABEL_KEYS


class NodeJobs(Model):
    """The node's GPU pods, grouped by job."""

    jobs: list[JobRef] = Field(default_factory=list, max_length=64)
    gpu_pods: int = Field(default=0, ge=0, description="GPU pods on the node, in jobs or not.")
    unowned_pods: int = Field(default=0, ge=0, description="GPU pods that name no job.")


class RequestCheckpointInput(NodeInput):
    """Ask the node's jobs to checkpoint; mark the node's GPU pods as watched."""

    request_incident: str = Field(min_length=1, max_length=512, description="Run-level id.")
    deadline: datetime
    urgency: Urgency
    reason: str = Field(default="", max_length=256)
    label_keys: list[str] = _LABEL_KEYS
    jobs: list[JobRef] = Field(max_length=64)


class AskedPod(Model):
    """A pod that carries this incident's request, and the job it belongs to.

    The job is the one whose label selected the pod in its own namespace when
    the request was written, never what the pod says about itself.
    """

    uid: str = Field(min_length=1, max_length=64)
    pod: str = Field(min_length=1, max_length=317, description="namespace/name")
    job: str = Field(min_length=1, max_length=JOB_MAX_CHARS, description="namespace/name")


MAX_ASKED_PODS = 4096


class CheckpointRequestResult(Model):
    """What the request wrote (pods already carrying it count as done)."""

    requested_pods: int = Field(ge=0)
    watched_pods: int = Field(ge=0)
    asked: list[AskedPod] = Field(
        default_factory=list,
        max_length=MAX_ASKED_PODS,
        description="The pods carrying the request: the only ones whose answers count.",
    )


class WithdrawCheckpointInput(NodeInput):
    """Remove this incident's requests and watch marks (others' are left alone)."""

    request_incident: str = Field(min_length=1, max_length=512)
    label_keys: list[str] = _LABEL_KEYS
    jobs: list[JobRef] = Field(max_length=64)


class CheckpointWithdrawResult(Model):
    """How many pods still carried this incident's annotations."""

    cleared_pods: int = Field(ge=0)


class CheckpointAnswerReport(Model):
    """Relayed by the watcher: a pod of a job this incident asked wrote an answer."""

    pod: str = Field(min_length=1, max_length=317, description="namespace/name")
    request_incident: str = Field(min_length=1, max_length=512)
    raw: str = Field(max_length=RELAYED_MAX_CHARS)
    truncated: bool = False
    job: str | None = Field(
        default=None,
        max_length=JOB_MAX_CHARS,
        description="namespace/name of the job as the request on the pod names it: for the "
        "log only (the pod's owner can edit it); the incident takes the job from pod_uid.",
    )
    pod_uid: str | None = Field(
        default=None,
        max_length=64,
        description="The pod's metadata.uid (set by the API server): an answer counts only "
        "from a pod the incident asked.",
    )


class WatchedPodEnded(Model):
    """Relayed by the watcher: a GPU pod this incident waits on ended or was deleted."""

    pod: str = Field(min_length=1, max_length=317)
    request_incident: str = Field(min_length=1, max_length=512)
    phase: str = Field(default="Deleted", max_length=32)
