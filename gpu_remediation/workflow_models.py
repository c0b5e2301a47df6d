"""Input, result, state and operator-request models of the node workflow."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from gpu_remediation.ids import SEMAPHORE_WORKFLOW_ID
from gpu_remediation.jobs import JobRef
from gpu_remediation.models import (
    Evidence,
    EvidenceReport,
    FaultClass,
    Model,
    NodeName,
    Outcome,
    Rung,
)
from gpu_remediation.policy import Policy


class RungAttempt(Model):
    """One run of a rung and how it went."""

    rung: Rung
    started_at: datetime
    ended_at: datetime | None = None
    result: str = ""
    ran: bool = Field(
        default=True,
        description="False: begun, but nothing was done to the node (the breaker opened "
        "under the permit); it spends no attempt of the rung's budget.",
    )


HISTORY_LIMIT = 10_000
"""Events in a run's history after which a waiting incident continues as new.

Temporal ends a run at 51,200 events and suggests continuing well before; a
node incident waits for days (a hand-over, a cooldown) while signals keep
arriving, so it starts a fresh history at a safe point instead (issue 34).
"""


class ContinuedIncident(Model):
    """Where a node incident's run stood when it continued as new, and all it knew."""

    resume: Literal["cooldown", "ladder"] = Field(
        description="The wait the new run goes on with: the cooldown after a repair, or "
        "the ladder's decision about ``rung`` (a hand-over's hold, a breaker's hold)."
    )
    rung: Rung | None = Field(default=None, description="The rung the ladder was deciding.")
    state: dict[str, Any] = Field(
        description="The run's whole state (``workflows.incident.IncidentState`` as JSON; "
        "the workflow validates it)."
    )


class NodeRemediationInput(Model):
    """Start a node's incident.

    The first report rides in ``evidence`` when a trigger starts the incident
    with a plain start (``IncidentStarter``); later reports, and the first one
    of an incident started by signal-with-start, arrive by signal.
    """

    cluster: str = Field(min_length=1, max_length=100)
    node: NodeName
    policy: Policy
    prior_incidents: int | None = Field(
        default=None,
        ge=0,
        description="Incidents of this node within the repeat-offender window; "
        "None: the workflow looks them up (closed runs of its workflow id).",
    )
    prior_attempts: list[RungAttempt] | None = Field(
        default=None,
        max_length=200,
        description="Rung attempts of this node's earlier incidents (per-node attempt limits); "
        "None: looked up with the incidents.",
    )
    semaphore_workflow_id: str = Field(
        default=SEMAPHORE_WORKFLOW_ID, min_length=1, description="The replacement semaphore."
    )
    evidence: EvidenceReport | None = Field(
        default=None,
        description="The report that started the incident, taken as if signalled "
        "before anything else; None: the evidence arrives by signal.",
    )
    continued: ContinuedIncident | None = Field(
        default=None, description="Set only by the incident itself when it continues as new."
    )
    history_limit: int = Field(
        default=HISTORY_LIMIT,
        ge=100,
        le=50_000,
        description="Events in a run's history after which a waiting incident continues "
        "as new (or earlier, when Temporal suggests it).",
    )


class Decision(Model):
    """One entry of the incident's decision log."""

    at: datetime
    stage: str
    action: str
    reason: str = ""
    rung: Rung | None = None


class NodeRemediationState(Model):
    """The full state, for the query and for the CLI."""

    cluster: str
    node: str
    node_pool: str | None
    fault_class: FaultClass | None
    rung: Rung | None
    stage: str
    waiting_for: str | None
    awaiting_approval: Rung | None = Field(
        default=None, description="The rung waiting for an operator's approve, if any."
    )
    paused: bool
    dry_run: bool
    evidence: list[Evidence]
    active_evidence: list[Evidence] = Field(
        default_factory=list,
        description="The evidence still in force (raised and not cleared since), oldest first.",
    )
    attempts: list[RungAttempt]
    decisions: list[Decision]
    outcome: Outcome | None
    started_at: datetime
    jobs: list[JobRef] = Field(
        default_factory=list, description="The training jobs found on the node before disruption."
    )
    checkpoint: str | None = Field(
        default=None, description="Where the checkpoint handshake stands (asked, answered, ...)."
    )


class NodeRemediationResult(Model):
    """How the incident ended."""

    node: str
    outcome: Outcome
    fault_class: FaultClass | None
    rungs_tried: list[Rung]
    attempts: list[RungAttempt]
    started_at: datetime
    ended_at: datetime
    duration_s: float
    replaced_by: str | None = None
    escalation_reference: str | None = None


class OperatorRequest(Model):
    """Who asks, and why (recorded in the decision log)."""

    by: str = Field(default="operator", min_length=1, max_length=256)
    reason: str = Field(default="", max_length=1024)


class ApproveInput(OperatorRequest):
    """Approve the step that is waiting for approval."""

    rung: Rung


class SkipToInput(OperatorRequest):
    """Jump to a rung (from the next decision point on)."""

    rung: Rung


class RetryStepInput(OperatorRequest):
    """Run the current (or, after escalation, the last) rung once more."""


class AbortInput(OperatorRequest):
    """Stop the incident and clean up."""

    uncordon: bool = Field(default=True, description="False leaves the node cordoned.")
