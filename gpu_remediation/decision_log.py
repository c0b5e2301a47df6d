"""The decision-log wording that other parts read back.

An incident's decision log is for people, but the demo and compare summaries
also count from it (replacement windows, breaker trips, the job stage's
checkpoint requests). The wording they match is made and recognised here, in
one place, so rewording a decision in a workflow cannot silently zero a count.
"""

from __future__ import annotations

from gpu_remediation.models import Urgency

JOBS_STAGE = "jobs"
REPLACE_STAGE = "replace"
BREAKER_STAGE = "breaker"
ESCALATE_STAGE = "escalate"

BREAKER_OPEN = "open"
"""The breaker stage's action when a pool's breaker was found open."""
CHECKPOINT_ANSWERED = "checkpoint answered"
WAITING_FOR_JOBS = "waiting for jobs to end"
REPLACED = "replaced"
FAILED = "failed"

_ASKED, _TO_CHECKPOINT = "asked ", " to checkpoint"
_DELETED_CLAIM = "deleted NodeClaim "
_URGENCY = "urgency "
_HANDED_OVER = "handed over"


def asked_to_checkpoint(jobs: str) -> str:
    """The job stage's action when it asked ``jobs`` (a description) to checkpoint."""
    return f"{_ASKED}{jobs}{_TO_CHECKPOINT}"


def is_asked_to_checkpoint(action: str) -> bool:
    """Whether ``action`` is :func:`asked_to_checkpoint`'s."""
    return action.startswith(_ASKED) and action.endswith(_TO_CHECKPOINT)


DEADLINE_PASSED = "deadline passed"
"""How the job stage's wait ended when nothing but its deadline ended it."""

EVIDENCE_CLEARED = "every report cleared"
"""How an ``idle_only`` wait ended when the evidence that opened it cleared (a job's
straggler report back within its margin) before the node went idle."""


def urgency_reason(urgency: Urgency, fault: str) -> str:
    """Why the job stage waits as it does: the fault class's urgency."""
    return f"{_URGENCY}{urgency} for {fault}"


def is_deferred(reason: str) -> bool:
    """Whether a job-stage reason says the urgency lets the node wait for its jobs."""
    return reason.startswith(f"{_URGENCY}{Urgency.WHEN_IDLE}")


def handed_over(reference: str) -> str:
    """The escalate stage's action once the node was handed to a person (the ticket)."""
    return f"{_HANDED_OVER} ({reference})"


def is_handed_over(action: str) -> bool:
    """Whether ``action`` is :func:`handed_over`'s."""
    return action.startswith(_HANDED_OVER)


def deleted_node_claim(name: str | None) -> str:
    """The replace stage's action once the node's NodeClaim was deleted."""
    return f"{_DELETED_CLAIM}{name}"


def is_deleted_node_claim(action: str) -> bool:
    """Whether ``action`` is :func:`deleted_node_claim`'s."""
    return action.startswith(_DELETED_CLAIM)
