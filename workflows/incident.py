"""A node incident's state: one pydantic model, and its record of evidence and decisions.

``NodeRemediationWorkflow`` keeps everything it knows and has done in one
``IncidentState``: the ``state`` query reads it, and a continue-as-new would
carry it whole. The record's bookkeeping rules (evidence dedup, what counts as
cleared, bounded logs) live on ``IncidentRecord``. Runs inside the workflow:
the clock is ``workflow.now()``.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field
from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from gpu_remediation.contracts import NodeHealth, QuarantineResult
    from gpu_remediation.job_contracts import CheckpointAnswerReport
    from gpu_remediation.jobs import CheckpointAnswer, JobRef
    from gpu_remediation.models import (
        Classification,
        Evidence,
        EvidenceReport,
        ManualEvidence,
        Outcome,
        Rung,
    )
    from gpu_remediation.workflow_models import AbortInput, Decision, RungAttempt

# Bounded so a flood of evidence or a long incident cannot outgrow the
# workflow's payload limits.
MAX_EVIDENCE = 200
MAX_DECISIONS = 500
MAX_REPORT_IDS = 1000
MAX_EARLY_ANSWERS = 64


class IncidentRecord(BaseModel):
    """What the incident knows and what it has done."""

    node: str
    evidence: list[Evidence] = Field(default_factory=list)
    active: dict[str, Evidence] = Field(default_factory=dict)
    decisions: list[Decision] = Field(default_factory=list)
    attempts: list[RungAttempt] = Field(default_factory=list)
    version: int = 0
    seen: set[tuple[str, str, bool]] = Field(default_factory=set)
    report_ids: list[str] = Field(default_factory=list)

    def add(self, report: EvidenceReport) -> bool:
        """Add a report's new evidence; return whether anything was new.

        A repeated report id, or evidence already seen (same key, time and
        polarity), is ignored: triggers may send the same thing many times.
        """
        if report.report_id:
            if report.report_id in self.report_ids:
                return False
            self.report_ids.append(report.report_id)
            del self.report_ids[:-MAX_REPORT_IDS]
        new = False
        for item in report.evidence:
            identity = (item.key, item.observed_at.isoformat(), item.cleared)
            if identity in self.seen:
                continue
            self.seen.add(identity)
            self.evidence.append(item)
            if item.cleared:
                self.active.pop(item.key, None)
            else:
                self.active[item.key] = item
            new = True
        if new:
            self.version += 1
            del self.evidence[:-MAX_EVIDENCE]
        return new

    @property
    def cleared(self) -> bool:
        """True when every signal that was raised has been reported cleared."""
        return not self.active

    def active_evidence(self) -> list[Evidence]:
        """The evidence still in force, oldest first."""
        return list(self.active.values())

    def manual_request(self) -> ManualEvidence | None:
        """The latest operator runbook request in force, if any."""
        for item in reversed(self.active_evidence()):
            if isinstance(item, ManualEvidence) and item.runbook != "auto":
                return item
        return None

    def decide(self, stage: str, action: str, reason: str = "", rung: Rung | None = None) -> None:
        """Append a decision (what and why) to the log."""
        self.decisions.append(
            Decision(at=workflow.now(), stage=stage, action=action, reason=reason, rung=rung)
        )
        del self.decisions[:-MAX_DECISIONS]
        workflow.logger.info("%s %s: %s (%s)", self.node, stage, action, reason)

    @property
    def last_reason(self) -> str:
        """The reason of the latest decision."""
        return self.decisions[-1].reason if self.decisions else ""

    def begin(self, rung: Rung) -> int:
        """Record the start of a rung attempt; return its index."""
        self.attempts.append(RungAttempt(rung=rung, started_at=workflow.now()))
        return len(self.attempts) - 1

    def end(self, index: int, result: str, *, ran: bool = True) -> None:
        """Record how attempt ``index`` ended (``ran=False``: nothing was done to the node)."""
        self.attempts[index] = self.attempts[index].model_copy(
            update={"ended_at": workflow.now(), "result": result, "ran": ran}
        )

    def rungs_tried(self) -> list[Rung]:
        """Distinct rungs attempted, in first-attempt order."""
        rungs: list[Rung] = []
        for attempt in self.attempts:
            if attempt.rung not in rungs:
                rungs.append(attempt.rung)
        return rungs

    def summary(self, last: int = 20) -> str:
        """The latest decisions as markdown lines."""
        return "\n".join(
            f"- {d.at:%H:%M:%S} **{d.stage}** {d.action}" + (f": {d.reason}" if d.reason else "")
            for d in self.decisions[-last:]
        )


class IncidentState(BaseModel):
    """Everything one node incident knows and has done (the workflow's only state)."""

    started_at: datetime
    record: IncidentRecord
    # Triage: what the fault is and the node's past.
    classification: Classification | None = None
    classified_at: datetime | None = None
    """When the current fault class was named (workflow time): a hang it caused began about
    then, and a checkpoint wait ends ``jobs.hung_job_deadline`` after it (ADR 029)."""
    health: NodeHealth | None = None
    """The node as triage read it: its UID and provider id pin the machine."""
    machine_replaced: str | None = None
    """Why an activity refused the node as another machine (the incident closes)."""
    prior_incidents: int = 0
    prior_attempts: list[RungAttempt] = Field(default_factory=list)
    ceiling: Rung = Rung.ESCALATE
    # Where the ladder stands.
    stage: str = "triage"
    rung: Rung | None = None
    last_rung: Rung | None = None
    version_at_step: int = 0
    """The record's version when the latest rung began."""
    waiting_for: str | None = None
    quarantine: QuarantineResult | None = None
    drained: bool = False
    outcome: Outcome | None = None
    replaced_by: str | None = None
    escalation_reference: str | None = None
    handover_until: datetime | None = None
    """When the current hand-over's hold ends (carried over a continue-as-new)."""
    breaker_until: datetime | None = None
    """When the current breaker hold ends at the latest (``breaker.max_hold``)."""
    cooldown_until: datetime | None = None
    """When the current cooldown ends (carried over a continue-as-new)."""
    cooldown_version: int = 0
    """The record's version when the cooldown began: newer evidence is a relapse."""
    continued: int = 0
    """How many times the incident continued as new (a fresh history each time)."""
    recovery_close_tried: bool = False
    recheck_after_hold: bool = False
    """The breaker just closed on a held incident: check the fault is still there."""
    # What operators asked for.
    paused: bool = False
    awaiting_approval: Rung | None = None
    approved: bool = False
    skip_to: Rung | None = None
    retry: bool = False
    abort: AbortInput | None = None
    force_refused: bool = False
    """A forced request was not honoured (unauthenticated): logged once."""
    # The job handshake before the first disruption.
    jobs: list[JobRef] = Field(default_factory=list)
    jobs_coordinated: bool = False
    request_incident: str | None = None
    """The incident id the current checkpoint request carries (None: no request)."""
    asked_jobs: list[str] = Field(default_factory=list)
    """``namespace/name`` of each job asked to checkpoint."""
    asked_pods: dict[str, str] = Field(default_factory=dict)
    """Pod uid to its job, for each pod the request was written on: answers count
    only from these, and the job is the one recorded here."""
    job_answers: list[tuple[str, str]] = Field(default_factory=list)
    """(job, what it answered), in the order the answers came."""
    asking: bool = False
    """The request is being written: which pods were asked is not known yet."""
    early_answers: list[CheckpointAnswerReport] = Field(default_factory=list)
    """Answers that came while the request was being written, judged once it is."""
    answer: CheckpointAnswer | None = None
    checkpoint: str | None = None
    """Where the handshake stands, for the operator."""
    permits_asked: int = 0
    """Disruption permits asked for so far (each request's id is fresh)."""
    pods_ended: int = 0
    ignored_answers: int = 0
    deferred: bool = False
    never_idle: bool = False
    """An ``idle_only`` wait ended with GPU work still on the node (or could not tell):
    it is given back untouched."""
    held_for_tenant: bool = False
    """The quarantine is marked held because only a tenant's word (a straggler report)
    made it: it does not count the node unhealthy for the breaker until a fault is named."""
