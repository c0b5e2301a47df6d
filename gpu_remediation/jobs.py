"""Training jobs on a node and the checkpoint handshake, as data.

The handshake is specified in docs/checkpoint-contract.md.

The worker writes a request annotation on the pods of a job that opted in; the
job answers with an annotation on its own pod; the watcher's relay forwards the
answer to the incident, which validates it here. Everything a job writes is
untrusted: it is parsed with these models, bounded in size, and an answer that
does not parse is reported, never acted on.
"""

from __future__ import annotations

import re
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from gpu_remediation.ids import node_workflow_id, node_workflow_id_prefix
from gpu_remediation.models import Model, Urgency

OPT_IN_ANNOTATION = "gpu-remediation.io/checkpoint"
OPT_IN_VALUE = "supported"
REQUEST_ANNOTATION = "gpu-remediation.io/checkpoint-request"
ANSWER_ANNOTATION = "gpu-remediation.io/checkpoint-answer"
INCIDENT_ANNOTATION = "gpu-remediation.io/incident"
"""On the GPU pods of a node whose incident waits for them: the incident's id, so
the relay can tell the incident when such a pod ends."""
ANSWER_MAX_BYTES = 1024
"""Answers longer than this are ignored (an annotation can hold 256 KiB)."""
RELAYED_MAX_CHARS = 2 * ANSWER_MAX_BYTES
"""The relay forwards at most this much of an answer (enough to tell it is oversized)."""
CONTRACT_VERSION = 1

# Temporal run ids are UUIDs.
_RUN_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def incident_id(workflow_id: str, run_id: str) -> str:
    """Return the id that names one incident (one run of a node's workflow)."""
    return f"{workflow_id}/{run_id}"


def parse_incident_id(value: str, cluster: str) -> tuple[str, str] | None:
    """Split an incident id of ``cluster`` into (workflow id, run id); None if it is not one.

    The relay only signals workflows of its own cluster, so a pod cannot make it
    signal anything else by writing an annotation.
    """
    prefix = node_workflow_id_prefix(cluster)
    if not value.startswith(prefix) or len(value) > 512:
        return None
    node, sep, run_id = value[len(prefix) :].partition("/")
    if not sep or not _RUN_ID.match(run_id):
        return None
    try:
        workflow_id = node_workflow_id(cluster, node)
    except ValueError:
        return None
    return workflow_id, run_id


class JobRef(Model):
    """One training job with pods on the node."""

    namespace: str = Field(min_length=1, max_length=63)
    label_key: str = Field(min_length=1, max_length=316, description="The label naming it.")
    name: str = Field(min_length=1, max_length=63)
    nodes: int = Field(ge=1, description="Nodes the job's pods run on (this one included).")
    pods: int = Field(ge=1, description="The job's pods, on every node.")
    pods_on_node: int = Field(ge=1)
    checkpoint_supported: bool = Field(description="Its pods opted in to the handshake.")

    @property
    def display(self) -> str:
        """``namespace/name``, as operators know the job."""
        return f"{self.namespace}/{self.name}"


def describe_jobs(jobs: list[JobRef]) -> str:
    """One line naming each job, its span and whether it speaks the handshake."""
    if not jobs:
        return "no job"
    return ", ".join(
        f"{job.display} ({job.nodes} node{'s' if job.nodes != 1 else ''}"
        f"{', checkpoints' if job.checkpoint_supported else ''})"
        for job in jobs
    )


JOB_MAX_CHARS = 127
"""``namespace/name``: a namespace (63) and a label value (63)."""


class CheckpointRequest(Model):
    """What the worker writes on a job's pods."""

    version: int = CONTRACT_VERSION
    incident: str = Field(min_length=1, max_length=512)
    node: str = Field(min_length=1, max_length=253)
    deadline: datetime
    urgency: Urgency
    reason: str = Field(default="", max_length=256)
    job: str | None = Field(
        default=None,
        max_length=JOB_MAX_CHARS,
        description="The asked job, namespace/name: the incident waits for each job's answer. "
        "Absent in requests written before it existed.",
    )

    def annotation(self) -> str:
        """The annotation's value (compact JSON, UTC times with a Z)."""
        return self.model_dump_json()


class CheckpointAnswer(BaseModel):
    """What a job writes on its own pod once its checkpoint is saved (or refused)."""

    # Jobs may add fields of their own; only these are read.
    model_config = ConfigDict(frozen=True, extra="ignore")

    version: int = Field(strict=True)
    incident: str = Field(min_length=1, max_length=512)
    step: int | None = Field(default=None, ge=0)
    saved_at: datetime | None = None
    refused: str | None = Field(default=None, max_length=256)

    @field_validator("version")
    @classmethod
    def _this_version(cls, version: int) -> int:
        # A later contract may change what the fields mean: do not guess.
        if version != CONTRACT_VERSION:
            raise ValueError(f"version {version} is not supported (expected {CONTRACT_VERSION})")
        return version


class AnswerVerdict(Model):
    """How an incident judged one relayed answer."""

    answer: CheckpointAnswer | None = None
    problem: str | None = None
    """Why the answer is ignored; None when it is accepted."""


def judge_answer(raw: str, truncated: bool, expected_incident: str) -> AnswerVerdict:
    """Parse a job's answer and check it is for ``expected_incident``.

    Args:
        raw: The annotation's value as relayed (at most ``RELAYED_MAX_CHARS``).
        truncated: Whether the relay cut the value short.
        expected_incident: The incident id this run put in its request.
    """
    if truncated or len(raw.encode()) > ANSWER_MAX_BYTES:
        return AnswerVerdict(problem=f"oversized answer (over {ANSWER_MAX_BYTES} bytes)")
    try:
        answer = CheckpointAnswer.model_validate_json(raw)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "value"
        return AnswerVerdict(problem=f"malformed answer ({where}: {first['msg']})")
    if answer.incident != expected_incident:
        return AnswerVerdict(problem=f"answer for another incident ({answer.incident[:128]})")
    if answer.refused is None and answer.step is None and answer.saved_at is None:
        return AnswerVerdict(problem="answer names no checkpoint (step or saved_at) nor a refusal")
    if answer.refused is not None and (answer.step is not None or answer.saved_at is not None):
        return AnswerVerdict(
            problem="a refusal names a checkpoint (step and saved_at must be null)"
        )
    return AnswerVerdict(answer=answer)
