"""The state one node incident carries, shared by the workflow and its mixins.

Split out of the workflow file so that the ladder there reads top to bottom; the
state is set up once from the input, with no I/O (``@workflow.init`` calls it).
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from gpu_remediation.classifier import classify
    from gpu_remediation.contracts import NodeHealth, QuarantineResult
    from gpu_remediation.jobs import CheckpointAnswer, JobRef
    from gpu_remediation.models import Classification, EvidenceReport, FaultClass, Outcome, Rung
    from gpu_remediation.search_attributes import SA_FAULT_CLASS
    from gpu_remediation.workflow_models import AbortInput, NodeRemediationInput
    from workflows.incident import IncidentRecord
    from workflows.node_actions import NodeActions
    from workflows.permit import ReplacementPermit


class NodeIncident:
    """What one incident knows: its input, evidence, classification and progress.

    The workflow class and its mixins share this state; only the workflow class
    is registered with Temporal (``workflows.node_remediation``).
    """

    def __init__(self, input: NodeRemediationInput) -> None:
        """Set up the incident's state from the run's input (no I/O)."""
        self._input = input
        self._policy = input.policy
        self._dry_run = input.policy.dry_run
        self._started_at = workflow.now()
        self._record = IncidentRecord(input.node)
        if input.evidence is not None:
            # A plain start carried the first report: taken before any signal.
            self._take_report(input.evidence)
        self._actions = NodeActions(input.policy, input.node, lambda: self._abort is not None)
        self._permit = ReplacementPermit(input.semaphore_workflow_id)
        self._classification: Classification | None = None
        self._prior_incidents = input.prior_incidents or 0
        self._prior_attempts = list(input.prior_attempts or [])
        self._ceiling = Rung.ESCALATE
        self._health: NodeHealth | None = None
        self._rung: Rung | None = None
        self._last_rung: Rung | None = None
        self._version_at_step = 0  # the record's version when the latest rung began
        self._stage = "triage"
        self._waiting_for: str | None = None
        self._paused = False
        self._awaiting_approval: Rung | None = None
        self._approved = False
        self._skip_to: Rung | None = None
        self._retry = False
        self._abort: AbortInput | None = None
        self._quarantine: QuarantineResult | None = None
        self._drained = False
        self._outcome: Outcome | None = None
        self._replaced_by: str | None = None
        self._escalation_reference: str | None = None
        # The job stage (workflows.node_jobs).
        self._jobs: list[JobRef] = []
        self._jobs_coordinated = False
        self._request_incident: str | None = None
        self._answer: CheckpointAnswer | None = None
        self._checkpoint: str | None = None
        self._pods_ended = 0
        self._ignored_answers = 0
        self._deferred = False
        self._recovery_close_tried = False

    def _take_report(self, report: EvidenceReport) -> None:
        """Record a report's new evidence (start or signal); another node's is dropped."""
        if report.node != self._input.node:
            workflow.logger.warning("evidence for %s sent to %s", report.node, self._input.node)
            return
        self._record.add(report)

    @property
    def _pool(self) -> str | None:
        return self._health.node_pool if self._health else None

    @property
    def _provider_id(self) -> str:
        assert self._health is not None, "triage reads the node first"
        return self._health.provider_id

    @property
    def _fault(self) -> FaultClass | None:
        return self._classification.fault_class if self._classification else None

    @property
    def _fault_value(self) -> str:
        return self._fault.value if self._fault else "unclassified"

    def _classify(self) -> None:
        classification = classify(self._record.active_evidence(), self._policy)
        if self._classification is None or classification.fault_class != self._fault:
            reasons = "; ".join(classification.reasons)
            self._record.decide("triage", f"classified {classification.fault_class}", reasons)
            if self._classification is not None:
                workflow.upsert_search_attributes(
                    [SA_FAULT_CLASS.value_set(classification.fault_class.value)]
                )
        self._classification = classification

    def _grace_left(self) -> timedelta:
        if self._record.manual_request() is not None or self._classification is None:
            return timedelta(0)
        grace = self._policy.fault_class(self._classification.fault_class).grace
        # Measured from when the signal was first observed, so time a trigger
        # already waited (a condition's own grace) is not waited twice.
        first_seen = min(e.observed_at for e in self._record.active_evidence())
        return grace - (workflow.now() - first_seen)


def failure_cause(err: BaseException) -> str:
    """The innermost message of an activity failure, for the decision log."""
    while err.__cause__ is not None:
        err = err.__cause__
    return str(err) or type(err).__name__
