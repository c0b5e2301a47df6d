"""How operators and other workflows steer a node incident.

Evidence and permit grants arrive as signals; pause, resume, approve, skip,
retry and abort are updates whose validators refuse a request that cannot apply
(so the caller gets the reason at once); ``state`` is the query. The SDK collects
these handlers from this base class of ``NodeRemediationWorkflow``. The two waits
for a person live here too: approval of a rung and the hand-over at escalation
(which ``escalation.close_on_recovery`` may end once every signal has cleared).
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from gpu_remediation import decision_log as log_words
    from gpu_remediation.ids import Queries, Signals, Updates
    from gpu_remediation.models import EvidenceReport, Outcome, Rung
    from gpu_remediation.semaphore_models import PermitGrant
    from gpu_remediation.workflow_models import (
        AbortInput,
        ApproveInput,
        NodeRemediationState,
        OperatorRequest,
        RetryStepInput,
        SkipToInput,
    )
    from workflows import ladder, metrics

from workflows.node_compensation import Compensation


class OperatorHandlers(Compensation):
    """Signals, queries and updates of the node workflow, with their validators."""

    @workflow.signal(name=Signals.EVIDENCE, description="Add evidence (triggers, operators).")
    def add_evidence(self, report: EvidenceReport) -> None:
        """Record new evidence; repeats of a report or of evidence are ignored."""
        self._take_report(report)

    @workflow.signal(name=Signals.PERMIT_GRANTED, description="Internal: a semaphore grant.")
    def permit_granted(self, grant: PermitGrant) -> None:
        """Hand the replacement semaphore's grant to the permit helper."""
        self._permit.on_grant(grant)

    @workflow.query(name=Queries.STATE, description="Rung, attempts, evidence and decisions.")
    def state(self) -> NodeRemediationState:
        """Return the incident's full state."""
        return self._snapshot()

    @workflow.update(name=Updates.PAUSE, description="Stop before the next step.")
    def pause(self, request: OperatorRequest) -> NodeRemediationState:
        """Pause the ladder before its next step (a running step finishes)."""
        self._paused = True
        self._operator("paused", request)
        return self.state()

    @pause.validator
    def _validate_pause(self, request: OperatorRequest) -> None:
        self._require_open()
        if self._paused:
            raise ValueError("already paused")

    @workflow.update(name=Updates.RESUME, description="Continue after a pause.")
    def resume(self, request: OperatorRequest) -> NodeRemediationState:
        """Resume a paused ladder."""
        self._paused = False
        self._operator("resumed", request)
        return self.state()

    @resume.validator
    def _validate_resume(self, request: OperatorRequest) -> None:
        self._require_open()
        if not self._paused:
            raise ValueError("not paused")

    @workflow.update(name=Updates.APPROVE, description="Approve the step awaiting approval.")
    def approve(self, request: ApproveInput) -> NodeRemediationState:
        """Approve the rung that is waiting for an operator."""
        self._approved = True
        self._operator(f"approved {request.rung}", request)
        return self.state()

    @approve.validator
    def _validate_approve(self, request: ApproveInput) -> None:
        self._require_open()
        if self._awaiting_approval is None:
            raise ValueError("no step is waiting for approval")
        if request.rung != self._awaiting_approval:
            raise ValueError(
                f"{request.rung} is not waiting for approval; {self._awaiting_approval} is"
            )

    @workflow.update(name=Updates.SKIP_TO, description="Continue at a rung of your choice.")
    def skip_to(self, request: SkipToInput) -> NodeRemediationState:
        """Make the ladder continue at ``request.rung`` (past policy limits)."""
        self._skip_to = request.rung
        self._operator(f"skip to {request.rung}", request)
        return self.state()

    @skip_to.validator
    def _validate_skip_to(self, request: SkipToInput) -> None:
        self._require_open()
        if request.rung in ladder.PREPARATION:
            raise ValueError(f"cannot skip to {request.rung}: it runs before every step anyway")
        if self._classification is None or self._classification.start_rung is None:
            raise ValueError("this incident has no ladder to skip on")

    @workflow.update(name=Updates.RETRY_STEP, description="Run the last step once more.")
    def retry_step(self, request: RetryStepInput) -> NodeRemediationState:
        """Retry the last rung, past its attempt limit."""
        self._retry = True
        self._operator(f"retry {self._last_rung}", request)
        return self.state()

    @retry_step.validator
    def _validate_retry_step(self, request: RetryStepInput) -> None:
        self._require_open()
        if self._last_rung is None:
            raise ValueError("no step has run yet")
        if self._waiting_for is None:
            raise ValueError("a step is running; retry applies while the incident waits")

    @workflow.update(name=Updates.ABORT, description="Stop and clean up (untaint, uncordon).")
    def abort(self, request: AbortInput) -> NodeRemediationState:
        """Abort; the cleanup runs before the workflow closes."""
        self._abort = request
        self._operator("abort", request)
        return self.state()

    @abort.validator
    def _validate_abort(self, request: AbortInput) -> None:
        self._require_open()
        if self._abort is not None:
            raise ValueError("already aborting")

    async def _approval(self, rung: Rung) -> bool:
        """Wait for an operator to approve ``rung``; False on timeout or redirection."""
        if self._dry_run:
            self._record.decide("approval", f"would wait for approval of {rung}", "dry run", rung)
            return True
        timeout = self._policy.operator.approval_timeout
        self._awaiting_approval, self._approved = rung, False
        self._waiting_for = f"approval of {rung}"
        self._record.decide("approval", f"waiting for approval of {rung}", f"up to {timeout}", rung)
        self._update_details()
        try:
            await workflow.wait_condition(
                lambda: (
                    self._approved
                    or self._abort is not None
                    or self._skip_to is not None
                    or self._record.cleared
                ),
                timeout=timeout,
                timeout_summary=f"approval of {rung}",
            )
        except TimeoutError:
            self._record.decide("approval", f"{rung} not approved", f"none within {timeout}", rung)
        finally:
            self._awaiting_approval, self._waiting_for = None, None
        return self._approved and self._abort is None

    async def _escalate(self) -> Rung | None:
        """Hand the node to a human, then wait for their retry, skip or abort."""
        assert self._classification is not None
        self._set_rung(Rung.ESCALATE)
        reason = self._record.last_reason or "ladder exhausted"
        if self._dry_run:
            self._record.decide(
                log_words.ESCALATE_STAGE, "would escalate to a human", reason, Rung.ESCALATE
            )
            self._outcome = Outcome.DRY_RUN
            return None
        if self._escalation_reference is None:
            escalation = await self._actions.escalate(
                self._classification.fault_class, reason, self._record.summary()
            )
            self._escalation_reference = escalation.reference
            self._record.decide(
                log_words.ESCALATE_STAGE, log_words.handed_over(escalation.reference), reason
            )
            metrics.escalated(self._fault_value, self._pool)
        hold = self._policy.operator.escalation_hold
        self._waiting_for = "an operator: retry, skip or abort"
        self._update_details()
        try:
            await workflow.wait_condition(
                lambda: (
                    self._retry
                    or self._skip_to is not None
                    or self._abort is not None
                    or self._fixed_by_a_person()
                ),
                timeout=hold,
                timeout_summary="waiting for an operator",
            )
        except TimeoutError:
            self._record.decide(
                log_words.ESCALATE_STAGE, "closed", f"no operator action within {hold}"
            )
            self._outcome = Outcome.ESCALATED
            return None
        finally:
            self._waiting_for = None
        if not (self._retry or self._skip_to is not None or self._abort is not None):
            # Only escalation.close_on_recovery ends the wait so: the signals cleared.
            self._recovery_close_tried = True
            await self._close_in_service(
                Outcome.RECOVERED, "every signal cleared after the hand-over"
            )
            if self._outcome is not None:
                return None
            # The release failed: wait for an operator after all (no second try).
            return self._skip_to or Rung.ESCALATE
        if self._retry and self._last_rung is not None and self._skip_to is None:
            self._skip_to = self._last_rung  # retried past the rung's attempt limit
        self._retry = False
        self._ceiling = Rung.ESCALATE  # the operator owns the ladder from here
        return self._skip_to or Rung.ESCALATE

    def _fixed_by_a_person(self) -> bool:
        """Whether policy ends this hand-over now: every signal cleared since it began."""
        return (
            self._policy.escalation.close_on_recovery
            and self._record.cleared
            and not self._recovery_close_tried
        )

    def _operator(self, action: str, request: OperatorRequest) -> None:
        self._record.decide("operator", action, f"{request.by}: {request.reason}".rstrip(": "))
        self._update_details()

    def _require_open(self) -> None:
        if self._stage == "closed":
            raise ValueError(f"the incident is closed ({self._outcome})")
