"""One durable incident per GPU node: triage, grace, and the remediation ladder.

A GPU node that reports a fault gets exactly one run of this workflow (its id
is derived from cluster and node; evidence arrives by signal-with-start, so
duplicate alerts land in the same run). The run walks the graded ladder:
quarantine, stop GPU work, GPU reset, reboot, replacement, escalation, with a
verification diagnostic after each corrective step. Every decision is logged
with its reason, and operators steer it with pause, resume, approve, skip,
retry and abort. After a repair the run stays open for a cooldown so that a
fault that comes back climbs the ladder instead of starting from the bottom.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from gpu_remediation.classifier import classify
    from gpu_remediation.contracts import NodeHealth, QuarantineResult
    from gpu_remediation.ids import (
        NODE_WORKFLOW_TYPE,
        SA_CLUSTER,
        SA_FAULT_CLASS,
        SA_NODE,
        SA_NODE_POOL,
        SA_OUTCOME,
        SA_RUNG,
        Queries,
        Signals,
        Updates,
    )
    from gpu_remediation.models import Classification, EvidenceReport, FaultClass, Outcome, Rung
    from gpu_remediation.semaphore_models import PermitGrant
    from gpu_remediation.workflow_models import (
        AbortInput,
        ApproveInput,
        NodeRemediationInput,
        NodeRemediationResult,
        NodeRemediationState,
        OperatorRequest,
        RetryStepInput,
        SkipToInput,
    )
    from workflows import ladder, metrics
    from workflows.incident import IncidentRecord
    from workflows.node_actions import NodeActions
    from workflows.permit import ReplacementPermit

# How long a run waits for its first evidence when started without a signal.
FIRST_EVIDENCE_WAIT = timedelta(minutes=1)
# Outcomes after which the node is back in service and the cooldown applies.
IN_SERVICE = (Outcome.REPAIRED, Outcome.RECOVERED, Outcome.NO_FAULT_FOUND)


@workflow.defn(name=NODE_WORKFLOW_TYPE)
class NodeRemediationWorkflow:
    """Remediates one GPU node along the policy's ladder."""

    @workflow.init
    def __init__(self, input: NodeRemediationInput) -> None:
        self._input = input
        self._policy = input.policy
        self._dry_run = input.policy.dry_run
        self._started_at = workflow.now()
        self._record = IncidentRecord(input.node)
        self._actions = NodeActions(input.policy, input.node, lambda: self._abort is not None)
        self._permit = ReplacementPermit(input.semaphore_workflow_id)
        self._classification: Classification | None = None
        self._prior_incidents = input.prior_incidents or 0
        self._prior_attempts = list(input.prior_attempts or [])
        self._ceiling = Rung.ESCALATE
        self._health: NodeHealth | None = None
        self._rung: Rung | None = None
        self._last_rung: Rung | None = None
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

    @workflow.run
    async def run(self, input: NodeRemediationInput) -> NodeRemediationResult:
        """Run the incident to its end and return how it ended."""
        if not await self._triage():
            return self._finish()
        if not await self._grace():
            return self._finish()
        while True:
            await self._ladder()
            if not await self._cooldown():
                return self._finish()

    # ------------------------------------------------------------ handlers

    @workflow.signal(name=Signals.EVIDENCE, description="Add evidence (triggers, operators).")
    def add_evidence(self, report: EvidenceReport) -> None:
        """Record new evidence; repeats of a report or of evidence are ignored."""
        if report.node != self._input.node:
            workflow.logger.warning("evidence for %s sent to %s", report.node, self._input.node)
            return
        self._record.add(report)

    @workflow.signal(name=Signals.PERMIT_GRANTED, description="Internal: a semaphore grant.")
    def permit_granted(self, grant: PermitGrant) -> None:
        """Hand the replacement semaphore's grant to the permit helper."""
        self._permit.on_grant(grant)

    @workflow.query(name=Queries.STATE, description="Rung, attempts, evidence and decisions.")
    def state(self) -> NodeRemediationState:
        """Return the incident's full state."""
        return NodeRemediationState(
            cluster=self._input.cluster,
            node=self._input.node,
            node_pool=self._pool,
            fault_class=self._fault,
            rung=self._rung,
            stage=self._stage,
            waiting_for=self._waiting_for,
            awaiting_approval=self._awaiting_approval,
            paused=self._paused,
            dry_run=self._dry_run,
            evidence=list(self._record.evidence),
            active_evidence=self._record.active_evidence(),
            attempts=list(self._record.attempts),
            decisions=list(self._record.decisions),
            outcome=self._outcome,
            started_at=self._started_at,
        )

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

    # ------------------------------------------------------------ stages

    async def _triage(self) -> bool:
        """Classify the evidence and read the node; False ends the incident."""
        self._set_stage("triage")
        try:
            await workflow.wait_condition(
                lambda: not self._record.cleared,
                timeout=FIRST_EVIDENCE_WAIT,
                timeout_summary="waiting for evidence",
            )
        except TimeoutError:
            self._record.decide("triage", "closed", "started without any evidence in force")
            self._outcome = Outcome.NO_ACTION
            return False
        self._classify()
        self._health = await self._actions.read_health()
        if not self._health.exists:
            self._record.decide("triage", "closed", "the node no longer exists")
            self._outcome = Outcome.NODE_GONE
            return False
        workflow.upsert_search_attributes(
            [
                SA_NODE.value_set(self._input.node),
                SA_CLUSTER.value_set(self._input.cluster),
                SA_FAULT_CLASS.value_set(self._fault_value),
                *([SA_NODE_POOL.value_set(self._pool)] if self._pool else []),
            ]
        )
        if self._classification is not None and self._classification.start_rung is None:
            await self._leave_in_service()
            return False
        await self._load_history()
        return True

    async def _load_history(self) -> None:
        """Count the node's earlier incidents, unless the starter already did."""
        if self._input.prior_incidents is not None and self._input.prior_attempts is not None:
            return
        now = workflow.now()
        longest_budget = max(rung.window for rung in self._policy.rungs.values())
        history = await self._actions.node_history(
            incidents_since=now - self._policy.repeat_offender.window,
            attempts_since=now - longest_budget,
        )
        if self._input.prior_incidents is None:
            self._prior_incidents = history.incidents
        if self._input.prior_attempts is None:
            self._prior_attempts = list(history.attempts)
        self._record.decide(
            "triage",
            "history read",
            f"{history.incidents} earlier incident(s) within "
            f"{self._policy.repeat_offender.window}, {len(history.attempts)} rung attempt(s)",
        )

    async def _leave_in_service(self) -> None:
        """Application-side or informational faults: tell the owner, never touch the node."""
        assert self._classification is not None
        fault = self._classification.fault_class
        message = "; ".join(self._classification.reasons) or fault.value
        application = fault == FaultClass.APPLICATION
        self._outcome = Outcome.APPLICATION_FAULT if application else Outcome.NO_ACTION
        self._record.decide("triage", "node left in service", message)
        if application and not self._dry_run:
            await self._actions.notify_workload_owner(fault, message)

    async def _grace(self) -> bool:
        """Wait out the fault class's grace period; False when the evidence cleared."""
        self._set_stage("grace")
        while True:
            remaining = self._grace_left()
            if remaining <= timedelta(0):
                return True
            version = self._record.version
            self._waiting_for = f"grace period ({remaining} left)"
            try:
                await workflow.wait_condition(
                    lambda v=version: self._record.version != v or self._abort is not None,  # type: ignore[misc]
                    timeout=remaining,
                    timeout_summary=f"grace for {self._fault_value}",
                )
            except TimeoutError:
                continue  # the loop re-checks what is left of the grace period
            finally:
                self._waiting_for = None
            if self._abort is not None:
                await self._cleanup(Outcome.ABORTED)
                return False
            if self._record.cleared:
                self._record.decide("grace", "closed as transient", "the evidence cleared")
                self._outcome = Outcome.TRANSIENT
                return False
            self._classify()

    async def _ladder(self) -> None:
        """Quarantine, then climb until repaired, replaced, escalated or aborted."""
        assert self._classification is not None
        start, self._ceiling, reason = ladder.starting_point(
            self._classification, self._policy, self._prior_incidents
        )
        assert start is not None
        rung = self._rung_after_relapse(start)
        self._record.decide("ladder", f"start at {rung}", reason, rung)
        # A pause during grace holds before the first touch of the node, too.
        await self._wait_while_paused()
        if self._abort is not None:
            await self._cleanup(Outcome.ABORTED)
            return
        if not await self._quarantine_node():
            rung = Rung.ESCALATE
        while self._outcome is None:
            rung = await self._next_step(rung)
            if self._outcome is not None:
                return
            if rung == Rung.ESCALATE:
                follow_up = await self._escalate()
                if follow_up is None:
                    return
                rung = follow_up
            elif not await self._recovered_mid_ladder():
                ran, rung = rung, await self._run_rung(rung)
                metrics.attempt_finished(self._record.attempts, ran, self._outcome, self._abort)

    async def _next_step(self, rung: Rung) -> Rung:
        """Apply pause, abort, operator skips, policy limits, approval and the breaker."""
        while True:
            await self._wait_while_paused()
            if self._abort is not None:
                await self._cleanup(Outcome.ABORTED)
                return rung
            operator_chosen = self._skip_to is not None
            if self._skip_to is not None:
                rung, self._skip_to, self._retry = self._skip_to, None, False
            else:
                attempts = [*self._prior_attempts, *self._record.attempts]
                blocked = ladder.blocked_by_policy(
                    rung, self._ceiling, attempts, workflow.now(), self._policy
                )
                if blocked is not None:
                    self._record.decide("ladder", f"pass over {rung}", blocked, rung)
                    at_top = rung.order >= self._ceiling.order
                    rung = Rung.ESCALATE if at_top else ladder.first_working_rung(rung.next())
                    continue
            if rung == Rung.ESCALATE:
                return rung
            if self._policy.rung(rung).requires_approval and not await self._approval(rung):
                if self._abort is not None or self._skip_to is not None:
                    continue
                return rung if self._record.cleared else Rung.ESCALATE
            if rung.is_disruptive and await self._breaker_open(rung):
                return Rung.ESCALATE
            if operator_chosen:
                self._record.decide("ladder", f"run {rung}", "chosen by an operator", rung)
            return rung

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

    async def _breaker_open(self, rung: Rung) -> bool:
        """Whether too much of the node's pool is unhealthy for ``rung`` to run."""
        manual = self._record.manual_request()
        if manual is not None and manual.force:
            self._record.decide("breaker", "bypassed", f"forced by {manual.requested_by}", rung)
            return False
        pool = await self._actions.pool_health(self._pool)
        breaker = self._policy.breaker
        is_open = breaker.is_open(self._pool, pool.unhealthy, pool.total)
        metrics.breaker_checked(self._pool, is_open, pool.unhealthy, pool.total, rung)
        if not is_open:
            return False
        self._record.decide(
            "breaker",
            "open",
            f"{pool.unhealthy}/{pool.total} nodes of pool {self._pool} unhealthy (threshold "
            f"{breaker.threshold_for(self._pool):.0%}); {rung} blocked, node stays quarantined",
            rung,
        )
        return True

    async def _quarantine_node(self) -> bool:
        """Cordon and taint so no new work lands; False if that failed."""
        self._set_rung(Rung.QUARANTINE)
        if self._dry_run:
            self._record.decide("quarantine", "would cordon and taint", "dry run", Rung.QUARANTINE)
            return True
        try:
            self._quarantine = await self._actions.quarantine()
        except ActivityError as err:
            self._record.decide("quarantine", "failed", _cause(err), Rung.QUARANTINE)
            return False
        self._record.decide("quarantine", "cordoned and tainted", "no new work lands here")
        await self._note(Rung.QUARANTINE, "quarantined: cordoned and tainted NoSchedule")
        return True

    async def _stop_gpu_work(self) -> None:
        """Evict the GPU pods once, before the first step that needs idle GPUs."""
        if self._drained:
            return
        self._drained = True
        rung = Rung.STOP_GPU_WORK
        if not self._policy.rung(rung).enabled:
            self._record.decide("stop_gpu_work", "skipped", "disabled by policy", rung)
            return
        self._set_rung(rung)
        if self._dry_run:
            self._record.decide("stop_gpu_work", "would evict GPU pods", "dry run", rung)
            return
        attempt = self._record.begin(rung)
        try:
            drained = await self._actions.drain()
            result = f"evicted {len(drained.evicted_uids)} pods"
            if drained.remaining:
                result += f", {len(drained.remaining)} still running"
        except ActivityError as err:
            result = f"drain failed: {_cause(err)}"
        self._record.end(attempt, result)
        self._record.decide("stop_gpu_work", result, "GPUs must be idle to diagnose or reset")

    async def _run_rung(self, rung: Rung) -> Rung:
        """Run a working rung and its verification; return the rung to try next."""
        await self._stop_gpu_work()
        self._set_rung(rung)
        self._last_rung = rung
        if self._dry_run:
            self._plan_dry_run(rung)
            return rung
        attempt = self._record.begin(rung)
        if rung == Rung.DIAGNOSE:
            if await self._verify(attempt, "diagnose"):
                await self._close_in_service(Outcome.NO_FAULT_FOUND, "diagnostics found no fault")
            return self._climb(rung)
        if rung == Rung.REPLACE:
            if await self._replace(attempt):
                self._close_replaced()
            return self._climb(rung)
        fixed = await (
            self._reset_gpus(attempt) if rung == Rung.GPU_RESET else self._reboot(attempt)
        )
        if fixed and await self._verify(None, f"after {rung}"):
            await self._close_in_service(Outcome.REPAIRED, f"{rung} fixed the node")
        return self._climb(rung)

    async def _reset_gpus(self, attempt: int) -> bool:
        gpus = list(self._classification.gpu_indices) if self._classification else []
        try:
            result = await self._actions.reset_gpus(self._provider_id, gpus)
        except ActivityError as err:
            self._record.end(attempt, f"failed: {_cause(err)}")
            self._record.decide("gpu_reset", "failed", _cause(err), Rung.GPU_RESET)
            return False
        self._record.end(attempt, result.status)
        self._record.decide("gpu_reset", f"reset {result.status}", result.detail, Rung.GPU_RESET)
        await self._note(
            Rung.GPU_RESET,
            f"GPU reset {gpus or 'all'}: {result.status}",
            warning=result.status != "ok",
        )
        return result.status == "ok"

    async def _reboot(self, attempt: int) -> bool:
        # The boot id read now goes into the activity's input, and so into
        # the history: a retried or replayed reboot sees it changed and does
        # not reboot a second time.
        health = await self._actions.read_health("read the boot id")
        try:
            result = await self._actions.reboot(health.provider_id, health.boot_id)
        except ActivityError as err:
            self._record.end(attempt, f"failed: {_cause(err)}")
            self._record.decide("reboot", "failed", _cause(err), Rung.REBOOT)
            return False
        self._record.end(attempt, f"boot id {health.boot_id} -> {result.boot_id_after}")
        self._record.decide(
            "reboot", "rebooted", f"new boot id {result.boot_id_after}", Rung.REBOOT
        )
        await self._note(Rung.REBOOT, "host rebooted; node Ready again")
        return True

    async def _replace(self, attempt: int) -> bool:
        """Take a permit, delete the NodeClaim, wait for new capacity, give the permit back."""
        manual = self._record.manual_request()
        if manual is not None and manual.force:
            self._record.decide("replace", "permit bypassed", f"forced by {manual.requested_by}")
        elif not await self._take_permit(attempt):
            return False
        replaced = None
        try:
            asked_at = workflow.now()
            deleted = await self._actions.delete_node_claim(self._provider_id)
            self._record.decide(
                "replace",
                f"deleted NodeClaim {deleted.node_claim}",
                "it was already gone"
                if deleted.already_gone
                else "Karpenter drains and terminates",
            )
            replaced = await self._actions.wait_for_replacement(self._pool, asked_at)
        except ActivityError as err:
            self._record.end(attempt, f"failed: {_cause(err)}")
            self._record.decide("replace", "failed", _cause(err), Rung.REPLACE)
            return False
        finally:
            # The incident goes on (to escalation, or cleanup if cancelled).
            if self._permit.held and replaced is None:
                await self._permit.release("replacement did not finish")
        if self._permit.held:
            # A replaced node's incident closes at once (no cooldown): its
            # closing hands the permit back through the guard (ADR 007).
            self._permit.leave_to_guard()
        self._replaced_by = replaced.new_node
        self._record.end(attempt, f"replaced by {replaced.new_node or 'new capacity'}")
        return True

    async def _take_permit(self, attempt: int) -> bool:
        """Wait for a replacement permit, then re-check the breaker under it."""
        replacement = self._policy.replacement
        granted, pauses = False, 0
        while True:
            await self._wait_while_paused()
            if self._abort is not None:
                break
            # A paused incident gives up its place (and any permit) rather than
            # replace a node the operator is looking at; it queues again on resume.
            request_id = f"{workflow.info().run_id}/{attempt}" + (f"/{pauses}" if pauses else "")
            self._waiting_for = "a replacement permit"
            self._update_details()
            try:
                # An abort must not wait for the line to move (up to hours).
                granted = await self._permit.acquire(
                    request_id=request_id,
                    lease=replacement.lease,
                    timeout=replacement.permit_wait_timeout,
                    capacity=replacement.max_concurrent,
                    interrupted=lambda: self._abort is not None or self._paused,
                )
            finally:
                self._waiting_for = None
            if not self._paused:
                break
            if granted:
                await self._permit.release("paused by an operator")
                granted = False
            pauses += 1
        if self._abort is not None:
            if granted:
                await self._permit.release("aborted by an operator")
            self._record.end(attempt, "aborted while waiting for a permit")
            return False
        if not granted:
            self._record.end(attempt, "no permit")
            wait = replacement.permit_wait_timeout
            self._record.decide("replace", "no permit", f"none within {wait}", Rung.REPLACE)
            self._skip_to = Rung.ESCALATE
            return False
        # The fleet may have changed while this node waited in line.
        if await self._breaker_open(Rung.REPLACE):
            await self._permit.release("breaker opened while waiting")
            self._record.end(attempt, "breaker open")
            self._skip_to = Rung.ESCALATE
            return False
        return True

    async def _verify(self, attempt: int | None, label: str) -> bool:
        """Run the verification diagnostic; failures become evidence for the next rung."""
        if not self._policy.verification.enabled:
            self._record.decide("verify", "skipped", "verification disabled by policy", self._rung)
            if attempt is not None:
                self._record.end(attempt, "not verified")
            return True
        try:
            result = await self._actions.diagnose(self._provider_id, label)
        except ActivityError as err:
            self._record.decide("verify", "diagnostic could not run", _cause(err), self._rung)
            if attempt is not None:
                self._record.end(attempt, "diagnostic error")
            return False
        verdict = "pass" if result.passed else "fail"
        if attempt is not None:
            self._record.end(attempt, verdict)
        self._record.decide("verify", f"diagnostic {verdict}", result.summary or label, self._rung)
        if not result.passed and result.failures:
            self._record.add(EvidenceReport(node=self._input.node, evidence=result.failures[:256]))
            self._classify()
        return result.passed

    async def _recovered_mid_ladder(self) -> bool:
        """When every signal cleared while the ladder ran: verify, and release on a pass."""
        if not self._record.cleared:
            return False
        self._record.decide("ladder", "signals cleared", "verifying before release", self._rung)
        if self._dry_run:
            self._outcome = Outcome.DRY_RUN
            return True
        await self._stop_gpu_work()
        if await self._verify(None, "after recovery"):
            await self._close_in_service(Outcome.RECOVERED, "the node recovered on its own")
            return True
        return False

    async def _escalate(self) -> Rung | None:
        """Hand the node to a human, then wait for their retry, skip or abort."""
        assert self._classification is not None
        self._set_rung(Rung.ESCALATE)
        reason = self._record.last_reason or "ladder exhausted"
        if self._dry_run:
            self._record.decide("escalate", "would escalate to a human", reason, Rung.ESCALATE)
            self._outcome = Outcome.DRY_RUN
            return None
        if self._escalation_reference is None:
            escalation = await self._actions.escalate(
                self._classification.fault_class, reason, self._record.summary()
            )
            self._escalation_reference = escalation.reference
            self._record.decide("escalate", f"handed over ({escalation.reference})", reason)
            metrics.escalated(self._fault_value, self._pool)
        hold = self._policy.operator.escalation_hold
        self._waiting_for = "an operator: retry, skip or abort"
        self._update_details()
        try:
            await workflow.wait_condition(
                lambda: self._retry or self._skip_to is not None or self._abort is not None,
                timeout=hold,
                timeout_summary="waiting for an operator",
            )
        except TimeoutError:
            self._record.decide("escalate", "closed", f"no operator action within {hold}")
            self._outcome = Outcome.ESCALATED
            return None
        finally:
            self._waiting_for = None
        if self._retry and self._last_rung is not None and self._skip_to is None:
            self._skip_to = self._last_rung  # retried past the rung's attempt limit
        self._retry = False
        self._ceiling = Rung.ESCALATE  # the operator owns the ladder from here
        return self._skip_to or Rung.ESCALATE

    async def _cooldown(self) -> bool:
        """Stay open after a repair; True when the fault came back and the ladder reopens."""
        cooldown = self._policy.cooldown
        if self._outcome not in IN_SERVICE or cooldown <= timedelta(0):
            return False
        self._set_stage("cooldown")
        version = self._record.version
        self._waiting_for = f"cooldown ({cooldown})"
        self._update_details()
        try:
            await workflow.wait_condition(
                lambda: (
                    (self._record.version != version and not self._record.cleared)
                    or self._abort is not None
                ),
                timeout=cooldown,
                timeout_summary="cooldown after repair",
            )
        except TimeoutError:
            return False
        finally:
            self._waiting_for = None
        if self._abort is not None:
            self._record.decide("cooldown", "closed", "aborted; the node is already in service")
            return False
        self._classify()
        self._record.decide("cooldown", "fault returned", f"within {cooldown} of {self._outcome}")
        self._outcome, self._quarantine, self._drained = None, None, False
        return True

    # ------------------------------------------------------ closing and cleanup

    async def _close_in_service(self, outcome: Outcome, reason: str) -> None:
        """Return the node to service; if release fails, escalate instead."""
        self._record.decide("release", outcome.value, reason, self._rung)
        if await self._release(uncordon=True):
            self._outcome = outcome
            metrics.back_in_service(self._fault_value, outcome, self._started_at)
        else:
            self._skip_to = Rung.ESCALATE

    def _close_replaced(self) -> None:
        self._quarantine = None  # the node is gone: nothing to release
        self._outcome = Outcome.REPLACED
        metrics.back_in_service(self._fault_value, Outcome.REPLACED, self._started_at)
        self._record.decide("replace", "replaced", f"new node {self._replaced_by or 'unknown'}")

    async def _cleanup(self, outcome: Outcome) -> None:
        """Compensation in one place: give back the permit, untaint, uncordon."""
        self._set_stage("cleanup")
        if self._permit.held:
            await self._permit.release("incident ended")
        uncordon = self._abort.uncordon if self._abort is not None else True
        await self._release(uncordon=uncordon)
        self._outcome = outcome

    async def _release(self, *, uncordon: bool) -> bool:
        """Undo what quarantine did, and only that; False if it could not."""
        if self._quarantine is None:
            return True
        # A node an operator had cordoned before the incident stays cordoned.
        uncordon = uncordon and not self._quarantine.was_already_cordoned
        try:
            result = await self._actions.release(uncordon=uncordon)
        except ActivityError as err:
            self._record.decide("release", "failed; node stays quarantined", _cause(err))
            return False
        self._quarantine = None
        self._record.decide(
            "release",
            "released",
            f"untainted: {result.taint_removed}, uncordoned: {result.uncordoned}",
        )
        await self._note(None, "returned to service" if result.uncordoned else "quarantine lifted")
        return True

    def _finish(self) -> NodeRemediationResult:
        assert self._outcome is not None
        self._set_stage("closed")
        metrics.incident_closed(self._fault_value, self._outcome, self._pool, self._started_at)
        workflow.upsert_search_attributes([SA_OUTCOME.value_set(self._outcome.value)])
        now = workflow.now()
        return NodeRemediationResult(
            node=self._input.node,
            outcome=self._outcome,
            fault_class=self._fault,
            rungs_tried=self._record.rungs_tried(),
            attempts=self._record.attempts,
            started_at=self._started_at,
            ended_at=now,
            duration_s=(now - self._started_at).total_seconds(),
            replaced_by=self._replaced_by,
            escalation_reference=self._escalation_reference,
        )

    # ------------------------------------------------------------ helpers

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

    def _rung_after_relapse(self, start: Rung) -> Rung:
        """After a relapse in cooldown, climb past the rung that seemed to work."""
        if self._last_rung is None or self._classification is None:
            return start
        climbed = ladder.climb(self._last_rung, self._classification)
        return climbed if climbed.order > start.order else start

    def _climb(self, rung: Rung) -> Rung:
        if self._outcome is not None or self._skip_to is not None or self._abort is not None:
            return rung
        assert self._classification is not None
        nxt = ladder.climb(rung, self._classification)
        if self._classification.max_rung.order > self._ceiling.order:
            self._ceiling = self._classification.max_rung
        self._record.decide("ladder", f"climb to {nxt}", f"{rung} did not fix the node", nxt)
        return nxt

    def _plan_dry_run(self, rung: Rung) -> None:
        """Record what the ladder would do from ``rung`` on, and stop."""
        plan: list[str] = []
        current = rung
        while current.order < self._ceiling.order:
            current = ladder.first_working_rung(current.next())
            plan.append(current.value)
        if Rung.ESCALATE.value not in plan:
            plan.append(Rung.ESCALATE.value)
        then = " -> ".join(plan)
        self._record.decide("dry_run", f"would run {rung}", f"if verification fails: {then}", rung)
        self._outcome = Outcome.DRY_RUN

    async def _wait_while_paused(self) -> None:
        if not self._paused:
            return
        self._waiting_for = "resume (paused by an operator)"
        self._update_details()
        await workflow.wait_condition(lambda: not self._paused or self._abort is not None)
        self._waiting_for = None

    def _operator(self, action: str, request: OperatorRequest) -> None:
        self._record.decide("operator", action, f"{request.by}: {request.reason}".rstrip(": "))
        self._update_details()

    def _require_open(self) -> None:
        if self._stage == "closed":
            raise ValueError(f"the incident is closed ({self._outcome})")

    def _set_stage(self, stage: str) -> None:
        self._stage = stage
        self._update_details()

    def _set_rung(self, rung: Rung) -> None:
        self._rung = rung
        self._stage = rung.value
        workflow.upsert_search_attributes([SA_RUNG.value_set(rung.value)])
        self._update_details()

    def _update_details(self) -> None:
        parts = [
            f"fault **{self._fault_value}**",
            f"stage **{self._stage}**",
            f"rung **{self._rung or '-'}**",
        ]
        if self._waiting_for:
            parts.append(f"waiting for **{self._waiting_for}**")
        if self._paused:
            parts.append("**PAUSED**")
        if self._dry_run:
            parts.append("dry run")
        if self._outcome:
            parts.append(f"outcome **{self._outcome}**")
        header = f"### {self._input.node} ({self._pool or 'no pool'})\n" + " · ".join(parts)
        workflow.set_current_details(header + "\n\n" + self._record.summary())

    async def _note(self, rung: Rung | None, message: str, *, warning: bool = False) -> None:
        """Tell the story on the node (annotation + event) so kubectl shows it."""
        if self._dry_run:
            return
        try:
            await self._actions.record(rung, self._fault, message, warning=warning)
        except ActivityError as err:
            # The history has the step; a missing node event must not stop a
            # repair, so the failure is logged in the decision log instead.
            self._record.decide("record", "could not record on the node", _cause(err), rung)


def _cause(err: BaseException) -> str:
    """The innermost message of an activity failure, for the decision log."""
    while err.__cause__ is not None:
        err = err.__cause__
    return str(err) or type(err).__name__
