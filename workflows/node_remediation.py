"""One durable incident per GPU node: triage, grace, the remediation ladder, cooldown.

A GPU node that reports a fault gets exactly one run of this workflow (its id
is derived from cluster and node; the first report rides in the start's input
or its signal, later ones arrive by signal, so duplicate alerts land in the
same run). Why one class: a reader finds every decision of an incident here
and in the rung table (``gpu_remediation.rungs``), and the incident's state is
one model (``workflows.incident.IncidentState``) that the ``state`` query reads.

The run walks the graded ladder: quarantine, stop GPU work (after the job
handshake), then the working rungs from the table (diagnose, GPU reset,
reboot, replace), each followed by a verification of the fault's component
(DCGM diagnostic for GPU faults, the node agent's EFA checks for EFA faults,
Ready on the new boot for host faults), and escalation to a person when the
ladder is exhausted. Every decision is logged with its reason; operators steer
with pause, resume, approve, skip, retry and abort. After a repair the run
stays open for a cooldown so that a fault that comes back climbs the ladder
instead of starting from the bottom. The policy is the node pool's effective
policy (``Policy.for_pool``), decided once triage has read the node.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Literal

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from gpu_remediation import admission_models as a
    from gpu_remediation import decision_log as log_words
    from gpu_remediation.admission_models import AdmissionTrigger
    from gpu_remediation.catalog import NPD_EFA_DEGRADED_CONDITION
    from gpu_remediation.classifier import classify
    from gpu_remediation.contracts import NodeHealth, NodePin
    from gpu_remediation.ids import (
        INCIDENT_HOLD_TAINT_VALUE,
        NODE_WORKFLOW_TYPE,
        Activities,
        Queries,
        Signals,
        Updates,
        step_semaphore_id,
    )
    from gpu_remediation.incident_summary import summary_line
    from gpu_remediation.job_contracts import CheckpointAnswerReport, NodeJobs, WatchedPodEnded
    from gpu_remediation.jobs import JobRef, describe_jobs, incident_id, judge_answer
    from gpu_remediation.models import (
        Evidence,
        EvidenceReport,
        FaultClass,
        Outcome,
        Rung,
        Urgency,
    )
    from gpu_remediation.policy import Policy
    from gpu_remediation.rungs import (
        ComponentCheck,
        RungAction,
        RungSpec,
        StepOutcome,
        Verification,
        can_fix,
        check_for,
        efa_conditions,
        rung_spec,
    )
    from gpu_remediation.search_attributes import (
        SA_CLUSTER,
        SA_FAULT_CLASS,
        SA_NODE,
        SA_NODE_POOL,
        SA_OUTCOME,
        SA_PROVIDER_ID,
        SA_RUNG,
    )
    from gpu_remediation.semaphore_models import PermitGrant
    from gpu_remediation.workflow_models import (
        AbortInput,
        ApproveInput,
        ContinuedIncident,
        NodeRemediationInput,
        NodeRemediationResult,
        NodeRemediationState,
        OperatorRequest,
        RetryStepInput,
        SkipToInput,
    )
    from workflows import ladder, metrics
    from workflows.incident import MAX_EARLY_ANSWERS, IncidentRecord, IncidentState
    from workflows.node_actions import BOOKKEEPING_RETRY, STEP_FAILED, NodeActions, failure_cause
    from workflows.permit import ReplacementPermit

FIRST_EVIDENCE_WAIT = timedelta(minutes=1)
"""How long a run waits for its first evidence when started without any."""
IN_SERVICE = (Outcome.REPAIRED, Outcome.RECOVERED, Outcome.NO_FAULT_FOUND)
"""Outcomes after which the node is back in service and the cooldown applies."""
MAX_IGNORED_ANSWER_LOGS = 10
"""Ignored checkpoint answers beyond this are counted, not logged (a looping
job must not fill the decision log)."""


def _left(until: datetime) -> timedelta:
    """Time left until ``until`` (a run continued as new may start just past it)."""
    return max(until - workflow.now(), timedelta(milliseconds=1))


@workflow.defn(name=NODE_WORKFLOW_TYPE)
class NodeRemediationWorkflow:
    """Remediates one GPU node along its pool's policy ladder."""

    @workflow.init
    def __init__(self, input: NodeRemediationInput) -> None:
        self._input = input
        # The whole policy until triage knows the node's pool (``_triage``).
        self._policy: Policy = input.policy
        self._dry_run = input.policy.dry_run
        if input.continued is not None:
            # A run continued as new: everything the last one knew, its pool's policy.
            self._state = IncidentState.model_validate(input.continued.state)
            self._policy = input.policy.for_pool(self._pool)
        else:
            self._state = IncidentState(
                started_at=workflow.now(),
                record=IncidentRecord(node=input.node),
                prior_incidents=input.prior_incidents or 0,
                prior_attempts=list(input.prior_attempts or []),
            )
        if input.evidence is not None:
            # A plain start carried the first report: taken before any signal.
            self._take_report(input.evidence)
        self._actions = self._node_actions(self._policy)
        self._permit = ReplacementPermit(input.semaphore_workflow_id)
        # One per capped step (issue 35), made when first asked for.
        self._step_permits: dict[Rung, ReplacementPermit] = {}

    @workflow.run
    async def run(self, input: NodeRemediationInput) -> NodeRemediationResult:
        """Run the incident to its end and return how it ended."""
        if input.continued is None:
            if not await self._triage():
                return self._finish()
            if not await self._grace():
                return self._finish()
            await self._ladder()
        elif input.continued.resume == "ladder":
            await self._ladder(resume_at=input.continued.rung)
        while await self._cooldown():
            await self._ladder()
        return self._finish()

    # ------------------------------------------------------------------ stages

    async def _triage(self) -> bool:
        """Classify the evidence and read the node; False ends the incident."""
        s = self._state
        self._set_stage("triage")
        try:
            await workflow.wait_condition(
                lambda: not s.record.cleared,
                timeout=FIRST_EVIDENCE_WAIT,
                timeout_summary="waiting for evidence",
            )
        except TimeoutError:
            s.record.decide("triage", "closed", "started without any evidence in force")
            s.outcome = Outcome.NO_ACTION
            return False
        self._classify()
        s.health = await self._actions.read_health()
        if not s.health.exists:
            s.record.decide("triage", "closed", "the node no longer exists")
            s.outcome = Outcome.NODE_GONE
            return False
        self._use_pool_policy()
        workflow.upsert_search_attributes(
            [
                SA_NODE.value_set(self._input.node),
                SA_CLUSTER.value_set(self._input.cluster),
                SA_FAULT_CLASS.value_set(self._fault_value),
                *([SA_NODE_POOL.value_set(self._pool)] if self._pool else []),
                *([SA_PROVIDER_ID.value_set(self._provider_id)] if self._provider_id else []),
            ]
        )
        if s.classification is not None and s.classification.start_rung is None:
            await self._leave_in_service()
            return False
        await self._load_history()
        return True

    async def _grace(self) -> bool:
        """Wait out the fault class's grace period; False when the evidence cleared."""
        s = self._state
        self._set_stage("grace")
        while True:
            if s.record.cleared and s.classification is not None:
                # Every signal cleared before the grace began (the recovery
                # arrived while triage read the node): nothing to wait for.
                return self._closed_as_transient()
            remaining = self._grace_left()
            if remaining <= timedelta(0):
                return True
            version = s.record.version
            s.waiting_for = f"grace period ({remaining} left)"
            try:
                await workflow.wait_condition(
                    lambda v=version: s.record.version != v or s.abort is not None,  # type: ignore[misc]
                    timeout=remaining,
                    timeout_summary=f"grace for {self._fault_value}",
                )
            except TimeoutError:
                continue  # the loop re-checks what is left of the grace period
            finally:
                s.waiting_for = None
            if s.abort is not None:
                await self._cleanup(Outcome.ABORTED)
                return False
            if s.record.cleared:
                return self._closed_as_transient()
            self._classify()

    async def _ladder(self, *, resume_at: Rung | None = None) -> None:
        """Quarantine, then climb until repaired, replaced, escalated or aborted.

        ``resume_at``: a run continued as new during a hold (a hand-over's, the
        breaker's) decides about that rung again, and so goes on holding.
        """
        s = self._state
        assert s.classification is not None
        if resume_at is not None:
            rung = resume_at
        else:
            start, s.ceiling, reason = ladder.starting_point(
                s.classification, self._policy, s.prior_incidents
            )
            assert start is not None
            rung = self._rung_after_relapse(start)
            s.record.decide("ladder", f"start at {rung}", reason, rung)
            # A pause during grace holds before the first touch of the node, too.
            await self._wait_while_paused()
            if s.abort is not None:
                await self._cleanup(Outcome.ABORTED)
                return
            if rung == Rung.ESCALATE and not self._policy.escalation.quarantine_first:
                s.record.decide(
                    "quarantine", "skipped", "policy: escalation hands the node over untouched"
                )
            elif not await self._quarantine_node():
                rung = Rung.ESCALATE
        while s.outcome is None:
            if s.machine_replaced is not None:
                self._close_machine_replaced()
                return
            rung = await self._next_step(rung)
            if s.outcome is not None:
                return
            if rung == Rung.ESCALATE:
                follow_up = await self._escalate()
                if follow_up is None:
                    return
                rung = follow_up
                continue
            recovered = await self._recovered_mid_ladder()
            if recovered == StepOutcome.ESCALATE:
                rung = Rung.ESCALATE
            elif recovered is None:
                ran, rung = rung, await self._run_rung(rung)
                metrics.attempt_finished(s.record.attempts, ran, s.outcome, s.abort)

    async def _cooldown(self) -> bool:
        """Stay open after a repair; True when the fault came back and the ladder reopens."""
        s = self._state
        cooldown = self._policy.cooldown
        if s.outcome not in IN_SERVICE or cooldown <= timedelta(0):
            return False
        self._set_stage("cooldown")
        self._show_outcome()
        if s.cooldown_until is None and self._reported_again_during_step():
            returned = "reported again while the unverified step ran"
        else:
            if s.cooldown_until is None:  # else a run continued as new goes on waiting
                s.cooldown_until = workflow.now() + cooldown
                s.cooldown_version = s.record.version
            s.waiting_for = f"cooldown ({cooldown})"
            self._update_details()
            try:
                await workflow.wait_condition(
                    lambda: (
                        (s.record.version != s.cooldown_version and not s.record.cleared)
                        or s.abort is not None
                        or self._history_full()
                    ),
                    timeout=_left(s.cooldown_until),
                    timeout_summary="cooldown after repair",
                )
            except TimeoutError:
                return False
            finally:
                s.waiting_for = None
            relapsed = s.record.version != s.cooldown_version and not s.record.cleared
            if not relapsed and s.abort is None:
                await self._continue_as_new("cooldown")
            s.cooldown_until = None
            if s.abort is not None:
                s.record.decide("cooldown", "closed", "aborted; the node is already in service")
                return False
            returned = f"within {cooldown} of {s.outcome}"
        self._classify()
        s.classified_at = workflow.now()  # a relapse: any hang it caused began about now
        s.record.decide("cooldown", "fault returned", returned)
        s.outcome, s.quarantine, s.drained = None, None, False
        workflow.upsert_search_attributes([SA_OUTCOME.value_unset()])
        s.jobs_coordinated, s.answer = False, None
        return True

    # ---------------------------------------------------------------- handlers

    @workflow.signal(name=Signals.EVIDENCE, description="Add evidence (triggers, operators).")
    def add_evidence(self, report: EvidenceReport) -> None:
        """Record new evidence; repeats of a report or of evidence are ignored."""
        self._take_report(report)

    @workflow.signal(name=Signals.PERMIT_GRANTED, description="Internal: a semaphore grant.")
    def permit_granted(self, grant: PermitGrant) -> None:
        """Hand a semaphore's grant to the permit helper that asked for it."""
        for permit in self._step_permits.values():
            if permit.request_id == grant.request_id:
                permit.on_grant(grant)
                return
        self._permit.on_grant(grant)  # the replacement's (it logs a grant nobody asked for)

    @workflow.signal(
        name=Signals.CHECKPOINT_ANSWER, description="Relayed: a job answered a checkpoint request."
    )
    def checkpoint_answer(self, report: CheckpointAnswerReport) -> None:
        """Accept each asked job's first valid answer; log the ones ignored.

        An answer counts only from a pod this incident wrote its request on
        (by the pod's uid, which the API server sets), and for the job that
        pod was asked as: what the pod's annotations say of its job is never
        trusted, since the pod's owner can write them.
        """
        s = self._state
        job = s.asked_pods.get(report.pod_uid or "")
        if job is not None and job in dict(s.job_answers):
            # More pods of the job, or its next save: not an error, and a job
            # that answers at every step must not fill the decision log.
            info = workflow.info()
            if report.request_incident == incident_id(info.workflow_id, info.run_id):
                return
        if s.request_incident is None or self._answers_end_wait():
            self._ignore_answer(report.pod, "no checkpoint request is pending")
            return
        if job is None and s.asking:
            # The request's activity has not returned yet: judged once it has.
            if len(s.early_answers) < MAX_EARLY_ANSWERS:
                s.early_answers.append(report)
            else:
                self._ignore_answer(report.pod, "too many answers before the request was written")
            return
        if job is None:
            self._ignore_answer(report.pod, "this pod was not asked to checkpoint")
            return
        verdict = judge_answer(report.raw, report.truncated, s.request_incident)
        if verdict.answer is None:
            self._ignore_answer(report.pod, verdict.problem or "unreadable")
            return
        s.answer = answer = verdict.answer
        if answer.refused is not None:
            what = f"refused by {report.pod}"
            s.record.decide(
                log_words.JOBS_STAGE, "checkpoint refused", f"{report.pod}: {answer.refused}"
            )
        else:
            what = f"saved at step {answer.step}"
            saved = answer.saved_at.isoformat() if answer.saved_at else "time not given"
            s.record.decide(
                log_words.JOBS_STAGE,
                log_words.CHECKPOINT_ANSWERED,
                f"{report.pod}: step {answer.step}, saved {saved}",
            )
        s.job_answers.append((job, what))
        s.checkpoint = self._answers_summary("asked")
        self._update_details()

    @workflow.signal(
        name=Signals.WATCHED_POD_ENDED,
        description="Relayed: a GPU pod this incident waits on ended.",
    )
    def watched_pod_ended(self, report: WatchedPodEnded) -> None:
        """Wake the job wait to look again at what still runs on the node."""
        if report.request_incident == self._state.request_incident:
            self._state.pods_ended += 1

    @workflow.query(name=Queries.STATE, description="Rung, attempts, evidence and decisions.")
    def state(self) -> NodeRemediationState:
        """Return the incident's full state."""
        s = self._state
        return NodeRemediationState(
            cluster=self._input.cluster,
            node=self._input.node,
            node_pool=self._pool,
            fault_class=self._fault,
            rung=s.rung,
            stage=s.stage,
            waiting_for=s.waiting_for,
            awaiting_approval=s.awaiting_approval,
            paused=s.paused,
            dry_run=self._dry_run,
            evidence=list(s.record.evidence),
            active_evidence=s.record.active_evidence(),
            attempts=list(s.record.attempts),
            decisions=list(s.record.decisions),
            outcome=s.outcome,
            started_at=s.started_at,
            jobs=list(s.jobs),
            checkpoint=s.checkpoint,
        )

    @workflow.update(name=Updates.PAUSE, description="Stop before the next step.")
    def pause(self, request: OperatorRequest) -> NodeRemediationState:
        """Pause the ladder before its next step (a running step finishes)."""
        self._state.paused = True
        self._operator("paused", request)
        return self.state()

    @pause.validator
    def _validate_pause(self, request: OperatorRequest) -> None:
        self._require_open()
        if self._state.paused:
            raise ValueError("already paused")

    @workflow.update(name=Updates.RESUME, description="Continue after a pause.")
    def resume(self, request: OperatorRequest) -> NodeRemediationState:
        """Resume a paused ladder."""
        self._state.paused = False
        self._operator("resumed", request)
        return self.state()

    @resume.validator
    def _validate_resume(self, request: OperatorRequest) -> None:
        self._require_open()
        if not self._state.paused:
            raise ValueError("not paused")

    @workflow.update(name=Updates.APPROVE, description="Approve the step awaiting approval.")
    def approve(self, request: ApproveInput) -> NodeRemediationState:
        """Approve the rung that is waiting for an operator."""
        self._state.approved = True
        self._operator(f"approved {request.rung}", request)
        return self.state()

    @approve.validator
    def _validate_approve(self, request: ApproveInput) -> None:
        self._require_open()
        waiting = self._state.awaiting_approval
        if waiting is None:
            raise ValueError("no step is waiting for approval")
        if request.rung != waiting:
            raise ValueError(f"{request.rung} is not waiting for approval; {waiting} is")

    @workflow.update(name=Updates.SKIP_TO, description="Continue at a rung of your choice.")
    def skip_to(self, request: SkipToInput) -> NodeRemediationState:
        """Make the ladder continue at ``request.rung`` (past policy limits)."""
        self._state.skip_to = request.rung
        self._operator(f"skip to {request.rung}", request)
        return self.state()

    @skip_to.validator
    def _validate_skip_to(self, request: SkipToInput) -> None:
        self._require_open()
        if request.rung in ladder.PREPARATION:
            raise ValueError(f"cannot skip to {request.rung}: it runs before every step anyway")
        classification = self._state.classification
        if classification is None or classification.start_rung is None:
            raise ValueError("this incident has no ladder to skip on")

    @workflow.update(name=Updates.RETRY_STEP, description="Run the last step once more.")
    def retry_step(self, request: RetryStepInput) -> NodeRemediationState:
        """Retry the last rung, past its attempt limit."""
        self._state.retry = True
        self._operator(f"retry {self._state.last_rung}", request)
        return self.state()

    @retry_step.validator
    def _validate_retry_step(self, request: RetryStepInput) -> None:
        self._require_open()
        if self._state.last_rung is None:
            raise ValueError("no step has run yet")
        if self._state.waiting_for is None:
            raise ValueError("a step is running; retry applies while the incident waits")

    @workflow.update(name=Updates.ABORT, description="Stop and clean up (untaint, uncordon).")
    def abort(self, request: AbortInput) -> NodeRemediationState:
        """Abort; the cleanup runs before the workflow closes."""
        self._state.abort = request
        self._operator("abort", request)
        return self.state()

    @abort.validator
    def _validate_abort(self, request: AbortInput) -> None:
        self._require_open()
        if self._state.abort is not None:
            raise ValueError("already aborting")

    def _operator(self, action: str, request: OperatorRequest) -> None:
        self._state.record.decide(
            "operator", action, f"{request.by}: {request.reason}".rstrip(": ")
        )
        self._update_details()

    def _require_open(self) -> None:
        if self._state.stage == "closed":
            raise ValueError(f"the incident is closed ({self._state.outcome})")

    # ------------------------------------------------------- triage and grace

    def _take_report(self, report: EvidenceReport) -> None:
        """Record a report's new evidence (start or signal); another node's is dropped."""
        if report.node != self._input.node:
            workflow.logger.warning("evidence for %s sent to %s", report.node, self._input.node)
            return
        self._state.record.add(report)

    def _classify(self) -> None:
        s = self._state
        active = s.record.active_evidence()
        if not active and s.classification is not None:
            return  # every report cleared: the last verdict stands; the stage decides
        classification = classify(active, self._policy)
        if s.classification is None or classification.fault_class != self._fault:
            if s.classified_at is None or not self._fault_named():
                # The first fault named; a class after it keeps its clock (a hang
                # began with the first), while a tenant's straggler word starts none.
                s.classified_at = workflow.now()
            reasons = "; ".join(classification.reasons)
            s.record.decide("triage", f"classified {classification.fault_class}", reasons)
            if s.classification is not None:
                workflow.upsert_search_attributes(
                    [SA_FAULT_CLASS.value_set(classification.fault_class.value)]
                )
        s.classification = classification

    def _use_pool_policy(self) -> None:
        """From here on, the node pool's effective policy (its overrides applied)."""
        pool_policy = self._input.policy.for_pool(self._pool)
        if pool_policy is self._policy:
            return
        self._policy = pool_policy
        self._actions = self._node_actions(pool_policy)
        self._state.record.decide("triage", f"policy of pool {self._pool}", "pool override")
        self._classify()  # the pool's fault classes may start elsewhere

    async def _load_history(self) -> None:
        """Count the node's earlier incidents, unless the starter already did."""
        s = self._state
        if self._input.prior_incidents is not None and self._input.prior_attempts is not None:
            return
        now = workflow.now()
        longest_budget = max(rung.window for rung in self._policy.rungs.values())
        history = await self._actions.node_history(
            incidents_since=now - self._policy.repeat_offender.window,
            attempts_since=now - longest_budget,
        )
        if self._input.prior_incidents is None:
            s.prior_incidents = history.incidents
        if self._input.prior_attempts is None:
            s.prior_attempts = list(history.attempts)
        s.record.decide(
            "triage",
            "history read",
            f"{history.incidents} earlier incident(s) within "
            f"{self._policy.repeat_offender.window}, {len(history.attempts)} rung attempt(s)",
        )

    async def _leave_in_service(self) -> None:
        """Application-side or informational faults: tell the owner, never touch the node."""
        s = self._state
        assert s.classification is not None
        fault = s.classification.fault_class
        message = "; ".join(s.classification.reasons) or fault.value
        application = fault == FaultClass.APPLICATION
        s.outcome = Outcome.APPLICATION_FAULT if application else Outcome.NO_ACTION
        s.record.decide("triage", "node left in service", message)
        if application and not self._dry_run:
            await self._actions.notify_workload_owner(fault, message)

    def _forced_by(self) -> str | None:
        """Who forced the runbook in force, as the decision log names them; None: not forced.

        The name says whether the requester's connection authenticated it. With
        ``operator.force_requires_authentication`` an unauthenticated force is
        not honoured (the request runs as an ordinary one, and the log says so once).
        """
        manual = self._state.record.manual_request()
        if manual is None or not manual.force:
            return None
        who = manual.requested_by or "an unnamed requester"
        if manual.authenticated_as is not None:
            return f"{who} (authenticated as {manual.authenticated_as})"
        if self._policy.operator.force_requires_authentication:
            if not self._state.force_refused:
                self._state.force_refused = True
                self._state.record.decide(
                    "operator",
                    "force not honoured",
                    f"{who}'s connection is not authenticated (no client certificate) and "
                    "policy operator.force_requires_authentication is on",
                )
            return None
        return f"{who} (name given by the requester, not authenticated)"

    def _grace_left(self) -> timedelta:
        s = self._state
        if s.record.manual_request() is not None or s.classification is None:
            return timedelta(0)
        grace = self._policy.fault_class(s.classification.fault_class).grace
        # Measured from when the signal was first observed, so time a trigger
        # already waited (a condition's own grace) is not waited twice.
        first_seen = min(e.observed_at for e in s.record.active_evidence())
        return grace - (workflow.now() - first_seen)

    def _closed_as_transient(self) -> bool:
        self._state.record.decide("grace", "closed as transient", "the evidence cleared")
        self._state.outcome = Outcome.TRANSIENT
        return False

    # ------------------------------------------------------------------ ladder

    def _rung_after_relapse(self, start: Rung) -> Rung:
        """After a relapse in cooldown, climb past the rung that seemed to work."""
        s = self._state
        if s.last_rung is None or s.classification is None:
            return start
        climbed = self._next_rung(s.last_rung)
        return climbed if climbed.order > start.order else start

    async def _wait_while_paused(self) -> None:
        s = self._state
        if not s.paused:
            return
        s.waiting_for = "resume (paused by an operator)"
        self._update_details()
        await workflow.wait_condition(lambda: not s.paused or s.abort is not None)
        s.waiting_for = None

    async def _quarantine_node(self) -> bool:
        """Cordon and taint so no new work lands; False if that failed."""
        s = self._state
        self._set_rung(Rung.QUARANTINE)
        if self._dry_run:
            s.record.decide("quarantine", "would cordon and taint", "dry run", Rung.QUARANTINE)
            return True
        # A tenant's word alone (a straggler report) must not count towards the breaker:
        # the quarantine is marked held until a diagnostic names a fault.
        tenant_word = self._fault == FaultClass.STRAGGLER
        try:
            s.quarantine = await self._actions.quarantine(held=tenant_word)
        except ActivityError as err:
            s.record.decide("quarantine", "failed", failure_cause(err), Rung.QUARANTINE)
            return False
        s.held_for_tenant = tenant_word
        s.record.decide("quarantine", "cordoned and tainted", "no new work lands here")
        await self._note(Rung.QUARANTINE, "quarantined: cordoned and tainted NoSchedule")
        return True

    async def _next_step(self, rung: Rung) -> Rung:
        """Apply pause, abort, operator skips, policy limits, approval and the breaker."""
        s = self._state
        while True:
            await self._wait_while_paused()
            if s.abort is not None:
                await self._cleanup(Outcome.ABORTED)
                return rung
            operator_chosen = s.skip_to is not None
            if s.skip_to is not None:
                rung, s.skip_to, s.retry = s.skip_to, None, False
            else:
                attempts = [*s.prior_attempts, *s.record.attempts]
                blocked = ladder.blocked_by_policy(
                    rung, s.ceiling, attempts, workflow.now(), self._policy
                )
                if blocked is None and not can_fix(rung, self._fault):
                    blocked = f"{rung} cannot fix a {self._fault_value} fault"
                if blocked is not None:
                    s.record.decide("ladder", f"pass over {rung}", blocked, rung)
                    at_top = rung.order >= s.ceiling.order
                    rung = Rung.ESCALATE if at_top else ladder.first_working_rung(rung.next())
                    continue
            if rung == Rung.ESCALATE:
                return rung
            if self._policy.rung(rung).requires_approval and not await self._approval(rung):
                if s.abort is not None or s.skip_to is not None:
                    continue
                return rung if s.record.cleared else Rung.ESCALATE
            if rung_spec(rung).disruptive and await self._breaker_open(rung):
                if await self._held_by_breaker(rung):
                    continue  # the breaker closed, or an operator cut in: decide again
                return rung if s.record.cleared else Rung.ESCALATE
            if operator_chosen:
                s.record.decide("ladder", f"run {rung}", "chosen by an operator", rung)
            return rung

    async def _approval(self, rung: Rung) -> bool:
        """Wait for an operator to approve ``rung``; False on timeout or redirection."""
        s = self._state
        if self._dry_run:
            s.record.decide("approval", f"would wait for approval of {rung}", "dry run", rung)
            return True
        timeout = self._policy.operator.approval_timeout
        s.awaiting_approval, s.approved = rung, False
        s.waiting_for = f"approval of {rung}"
        s.record.decide("approval", f"waiting for approval of {rung}", f"up to {timeout}", rung)
        self._update_details()
        try:
            await workflow.wait_condition(
                lambda: (
                    s.approved or s.abort is not None or s.skip_to is not None or s.record.cleared
                ),
                timeout=timeout,
                timeout_summary=f"approval of {rung}",
            )
        except TimeoutError:
            s.record.decide("approval", f"{rung} not approved", f"none within {timeout}", rung)
        finally:
            s.awaiting_approval, s.waiting_for = None, None
        return s.approved and s.abort is None

    async def _breaker_open(self, rung: Rung, *, quiet: bool = False) -> bool:
        """Whether too much of the node's pool is unhealthy for ``rung`` to run.

        ``quiet`` (a re-check while held) logs nothing when it is still open.
        """
        s = self._state
        forced_by = self._forced_by()
        if forced_by is not None:
            s.record.decide(log_words.BREAKER_STAGE, "bypassed", f"forced by {forced_by}", rung)
            return False
        pool = await self._actions.pool_health(self._pool)
        breaker = self._policy.breaker
        is_open = breaker.is_open(self._pool, pool.unhealthy, pool.total)
        metrics.breaker_checked(self._pool, is_open, pool.unhealthy, pool.total, rung)
        if not is_open:
            return False
        if not quiet:
            s.record.decide(
                log_words.BREAKER_STAGE,
                log_words.BREAKER_OPEN,
                f"{pool.unhealthy}/{pool.total} nodes of pool {self._pool} unhealthy (threshold "
                f"{breaker.threshold_for(self._pool):.0%}); {rung} held, node stays quarantined",
                rung,
            )
        return True

    async def _held_by_breaker(self, rung: Rung) -> bool:
        """Hold the quarantined node while the pool's breaker is open.

        An open breaker is not a hand-over: the incident waits, looking at the
        pool every ``breaker.recheck_interval``. It ends the hold when the
        breaker closes or an operator pauses, skips, retries or aborts (True:
        decide again), or when every signal cleared (False: the ladder then
        verifies and releases the node, so an outage that heals leaves nothing
        cordoned). Held for ``breaker.max_hold`` with the signal still in force,
        it returns False too and the node is handed to a person.
        """
        s = self._state
        breaker = self._policy.breaker
        if s.breaker_until is None:  # else a run continued as new goes on holding
            s.breaker_until = workflow.now() + breaker.max_hold
        self._set_stage("held")
        await self._mark_held(True)
        try:
            decide_again = await self._hold(rung, s.breaker_until)
        except BaseException:
            if s.quarantine is not None:
                await self._mark_held(False)
            raise
        if decide_again is None:
            # The hold goes on in a fresh run, the quarantine still marked held.
            await self._continue_as_new("ladder", rung)
            decide_again = True  # not due after all: decide again here
        if s.quarantine is not None:
            await self._mark_held(False)
        s.breaker_until = None
        return decide_again

    async def _mark_held(self, held: bool) -> None:
        """Mark the quarantine as held (or not), so it alone keeps no breaker open."""
        s = self._state
        if self._dry_run or s.quarantine is None:
            return
        try:
            await self._actions.quarantine(held=held)
        except ActivityError as err:
            s.record.decide(log_words.BREAKER_STAGE, "could not mark the hold", failure_cause(err))

    async def _hold(self, rung: Rung, held_until: datetime) -> bool | None:
        """The hold's loop (``_held_by_breaker``); None: continue as new, still holding."""
        s = self._state
        breaker = self._policy.breaker
        while True:
            s.waiting_for = f"the breaker of pool {self._pool or 'of GPU nodes'} to close ({rung})"
            self._update_details()
            try:
                await workflow.wait_condition(
                    lambda: (
                        s.record.cleared
                        or s.abort is not None
                        or s.skip_to is not None
                        or s.paused
                        or self._history_full()
                    ),
                    timeout=min(breaker.recheck_interval, _left(held_until)),
                    timeout_summary="the breaker to close",
                )
            except TimeoutError:
                pass
            finally:
                s.waiting_for = None
            if s.abort is not None or s.skip_to is not None or s.paused:
                return True
            if s.record.cleared:
                s.record.decide(log_words.BREAKER_STAGE, "hold over", "every signal cleared", rung)
                return False
            if self._history_full():
                return None
            if workflow.now() >= held_until:
                s.record.decide(
                    log_words.BREAKER_STAGE,
                    "hold over",
                    f"still open after {breaker.max_hold}: a person must look",
                    rung,
                )
                return False
            if not await self._breaker_open(rung, quiet=True):
                s.record.decide(log_words.BREAKER_STAGE, "closed", f"{rung} may run", rung)
                s.recheck_after_hold = True
                return True

    async def _recovered_mid_ladder(self) -> StepOutcome | None:
        """When every signal cleared while the ladder ran: verify, and release on a pass.

        Returns:
            None when the node still needs the rung (signals in force, or the
            check failed); FIXED when it was released; ESCALATE when the
            release failed; ABORTED when an operator cut the job wait.
        """
        s = self._state
        rechecking, s.recheck_after_hold = s.recheck_after_hold, False
        if not s.record.cleared:
            if rechecking and check_for(self._fault) != ComponentCheck.DCGM_DIAG:
                return await self._still_faulty_after_hold()
            return None
        s.record.decide("ladder", "signals cleared", "verifying before release", s.rung)
        if self._dry_run:
            s.outcome = Outcome.DRY_RUN
            return StepOutcome.FIXED
        # Only a GPU diagnostic needs idle GPUs: a node whose host or network
        # recovered keeps its jobs running (an outage that heals evicts nothing).
        needs_idle = check_for(self._fault) == ComponentCheck.DCGM_DIAG
        if needs_idle:
            prepared = await self._stop_gpu_work()
            if prepared == StepOutcome.ESCALATE:
                return StepOutcome.ESCALATE
            if prepared != StepOutcome.FIXED:
                return StepOutcome.ABORTED
            if s.outcome is not None:
                return StepOutcome.FIXED  # given back untouched (idle_only)
        if not await self._verify(None, "after recovery"):
            return None
        if await self._close_in_service(Outcome.RECOVERED, "the node recovered on its own"):
            return StepOutcome.FIXED
        return StepOutcome.ESCALATE  # the release failed: a person must look

    async def _still_faulty_after_hold(self) -> StepOutcome | None:
        """After a hold, check the fault is still there before climbing on.

        The pool may have healed with this node (an outage), its trigger's
        clearing report not in yet: a host or network check that needs no
        drain tells. Passed, the node is released; failed, the rung runs.
        """
        if not await self._verify(None, "after the breaker's hold"):
            return None
        reason = "the fault was gone when the breaker closed"
        if await self._close_in_service(Outcome.RECOVERED, reason):
            return StepOutcome.FIXED
        return StepOutcome.ESCALATE

    async def _run_rung(self, rung: Rung) -> Rung:
        """Run a working rung from the table and verify it; return the rung to try next.

        The step's action is the table's; so is its verification, which checks
        the fault's component. The step's outcome decides what comes next:
        fixed (the node leaves the ladder), climb, escalate, or aborted (the
        next decision applies what the operator asked).
        """
        s = self._state
        spec = rung_spec(rung)
        prepared = await self._stop_gpu_work()
        if prepared == StepOutcome.ESCALATE:
            return Rung.ESCALATE
        if prepared != StepOutcome.FIXED or s.outcome is not None:
            # An operator cut in, or the permit's wait: the next decision applies.
            # Or the node was given back untouched (idle_only): the ladder ends.
            return rung
        named = await self._past_the_tenant_word(rung)
        if named is not None:
            return named
        self._set_rung(rung)
        s.last_rung = rung
        if self._dry_run:
            self._plan_dry_run(rung)
            return rung
        attempt = s.record.begin(rung)
        s.version_at_step = s.record.version
        step = await self._act(spec, rung, attempt)
        if step == StepOutcome.FIXED:
            step = await self._verify_step(spec, rung, attempt)
        if step == StepOutcome.FIXED:
            return rung
        if step == StepOutcome.ESCALATE:
            return Rung.ESCALATE
        if step in (StepOutcome.ABORTED, StepOutcome.HELD):
            return rung  # decided again: the operator's request, or the breaker's hold
        if s.skip_to is not None or s.abort is not None:
            return rung
        return self._climb(rung)

    async def _stop_gpu_work(self) -> StepOutcome:
        """Take a drain permit, give the jobs their wait, then evict the GPU pods, once.

        Runs before the first disruption. The drain permit (issue 35) is held
        until the node is back in service or handed to a person; an operator's
        retry after a hand-over waits for it again (the jobs stay stopped).

        Returns:
            FIXED when the GPUs are idle (or need not be); ABORTED when an
            operator's skip or abort cut the job wait (or came while the
            incident was paused after it), HELD when the wait for a permit was
            cut: nothing was evicted and the ladder's next decision applies;
            ESCALATE when no permit came in time.
        """
        s = self._state
        rung = Rung.STOP_GPU_WORK
        if s.drained:
            if not self._policy.rung(rung).enabled:
                return StepOutcome.FIXED
            # Held already, or given back at a hand-over: a retried node counts again.
            return await self._take_step_permit(rung)
        enabled = self._policy.rung(rung).enabled
        # idle_only waits for the node to be idle before it holds a drain permit: a
        # day-long wait on a tenant's word must not hold the pool's drain budget.
        permit_first = enabled and self._urgency()[0] != Urgency.IDLE_ONLY
        if permit_first:
            permitted = await self._take_step_permit(rung)
            if permitted != StepOutcome.FIXED:
                return permitted
        if not await self._coordinate_jobs():
            return StepOutcome.ABORTED
        if s.never_idle:
            return await self._give_back_untouched()
        if enabled and not permit_first:
            permitted = await self._take_step_permit(rung)
            if permitted != StepOutcome.FIXED:
                return permitted
        if not await self._hold_while_paused():
            return StepOutcome.ABORTED
        s.drained = True
        if not self._policy.rung(rung).enabled:
            s.record.decide("stop_gpu_work", "skipped", "disabled by policy", rung)
            return StepOutcome.FIXED
        self._set_rung(rung)
        if self._dry_run:
            s.record.decide("stop_gpu_work", "would evict GPU pods", "dry run", rung)
            return StepOutcome.FIXED
        attempt = s.record.begin(rung)
        try:
            drained = await self._actions.drain()
            result = f"evicted {len(drained.evicted_uids)} pods"
            if drained.remaining:
                result += f", {len(drained.remaining)} still running"
        except STEP_FAILED as err:
            result = f"drain failed: {failure_cause(err)}"
        s.record.end(attempt, result)
        s.record.decide("stop_gpu_work", result, "GPUs must be idle to diagnose or reset")
        return StepOutcome.FIXED

    async def _coordinate_jobs(self) -> bool:
        """Find the jobs and wait as the urgency says; False when an operator cut in.

        By the fault class's urgency the incident goes on at once
        (``immediate``), asks the jobs that opted in to checkpoint and waits for
        each asked job's answer up to ``jobs.checkpoint_timeout``
        (``checkpoint_first``), keeps the quarantined node running its job
        until the job ends or checkpoints, up to ``jobs.max_defer``
        (``when_idle``), or waits up to ``jobs.max_defer`` for the node's GPU
        work to end, asking nobody, and marks the node ``never_idle`` when it
        does not (``idle_only``: the node is then given back untouched).
        Operators cut the wait with ``approve stop_gpu_work`` or ``skip_to``;
        ``abort`` withdraws the request.
        """
        s = self._state
        if s.jobs_coordinated:
            return True
        urgency, why = self._urgency()
        idle_only = urgency == Urgency.IDLE_ONLY
        if not self._policy.jobs.enabled:
            if idle_only:  # it cannot tell the node is idle: nothing is evicted for it
                s.jobs_coordinated = s.never_idle = True
                s.record.decide(log_words.JOBS_STAGE, "cannot tell the node is idle", why)
            return True
        s.jobs_coordinated = True
        found = await self._find_jobs()
        if found is None:
            s.never_idle = idle_only  # not knowing the jobs is not knowing the node idle
            return True
        if found.gpu_pods == 0:
            return True
        # idle_only never evicts, so it asks no job to save: it waits for the work to end.
        asked = [job for job in found.jobs if job.checkpoint_supported and urgency.asks_jobs]
        if urgency == Urgency.IMMEDIATE:
            s.record.decide(log_words.JOBS_STAGE, "no wait", why)
            return True
        if urgency == Urgency.CHECKPOINT_FIRST and not asked:
            s.record.decide(
                log_words.JOBS_STAGE, "no wait", "no job on the node opted in to checkpoints"
            )
            return True
        jobs = self._policy.jobs
        timeout = jobs.checkpoint_timeout if urgency == Urgency.CHECKPOINT_FIRST else jobs.max_defer
        if urgency == Urgency.CHECKPOINT_FIRST:
            timeout, why = self._before_a_hang_fails(timeout, why)
            if timeout <= timedelta(0):
                s.record.decide(log_words.JOBS_STAGE, "no wait", why)
                return True
        if self._dry_run:
            what = "ask for a checkpoint" if asked else "wait for the jobs to end"
            s.record.decide(log_words.JOBS_STAGE, f"would {what}", f"{why}; up to {timeout}")
            return True
        went_on = await self._wait_for_jobs(urgency, asked, timeout, why)
        if went_on and idle_only and self._fault_named():
            # Evidence of a fault came during the wait: its own urgency applies now.
            s.jobs_coordinated = s.never_idle = False
            return await self._coordinate_jobs()
        return went_on

    def _before_a_hang_fails(self, wait: timedelta, why: str) -> tuple[timedelta, str]:
        """A checkpoint wait cut to end ``jobs.hung_job_deadline`` after the fault was named.

        A job the fault hung never answers; waiting past its collective timeout
        only lets that timeout fail it, where a drain would restart it (ADR 029).
        """
        s = self._state
        deadline = self._policy.jobs.hung_job_deadline
        left = (s.classified_at or s.started_at) + deadline - workflow.now()
        if left >= wait:
            return wait, why
        cut = f"the wait ends {deadline} after the fault was named: a hung job never answers"
        return max(left, timedelta(0)), f"{why}; {cut}"

    async def _past_the_tenant_word(self, rung: Rung) -> Rung | None:
        """Once a fault is named in a straggler incident, treat the node as the fault's.

        The quarantine counts for the breaker from then on, and a fault named while
        the node waited to be idle starts its own ladder (its start rung and ceiling)
        instead of the straggler's diagnosis. Returns that start rung when it lies
        above ``rung`` (the ladder decides again), else None.
        """
        s = self._state
        if not (s.held_for_tenant and self._fault_named()):
            return None
        assert s.classification is not None
        s.held_for_tenant = False
        await self._mark_held(False)
        if s.classification.max_rung.order > s.ceiling.order:
            s.ceiling = s.classification.max_rung
        start = s.classification.start_rung
        if start is None or start.order <= rung.order:
            return None
        s.record.decide("ladder", f"start at {start}", f"{self._fault_value} named", start)
        return start

    def _fault_named(self) -> bool:
        """Whether evidence in force names a fault beyond a tenant's straggler report."""
        c = self._state.classification
        return c is not None and c.fault_class != FaultClass.STRAGGLER and c.start_rung is not None

    async def _give_back_untouched(self) -> StepOutcome:
        """End an ``idle_only`` incident whose node never went idle: release it, evict nothing.

        Returns:
            FIXED with the outcome set once the node is back in service
            (``recovered`` when every report cleared first, else ``no_action``);
            ESCALATE when the release failed (a person must look).
        """
        if not self._state.record.active_evidence():
            # The report that opened the incident cleared while the node still worked.
            reason = f"{self._fault_value}: every report cleared before the node went idle"
            if await self._close_in_service(Outcome.RECOVERED, reason):
                return StepOutcome.FIXED
            return StepOutcome.ESCALATE
        max_defer = self._policy.jobs.max_defer
        reason = f"{self._fault_value}: the node's GPU work did not end within {max_defer}"
        if await self._close_in_service(Outcome.NO_ACTION, reason):
            return StepOutcome.FIXED
        return StepOutcome.ESCALATE

    async def _find_jobs(self, *, quiet_if_same: bool = False) -> NodeJobs | None:
        """Look at the node's jobs; with ``quiet_if_same``, log only what changed."""
        s = self._state
        try:
            found = await self._actions.find_jobs()
        except ActivityError as err:
            # Not knowing the jobs must not keep a broken node in service.
            s.record.decide(log_words.JOBS_STAGE, "could not list the jobs", failure_cause(err))
            return None
        same = list(found.jobs) == s.jobs
        s.jobs = list(found.jobs)
        if quiet_if_same and same:
            return found
        extra = f"; {found.unowned_pods} GPU pod(s) of no job" if found.unowned_pods else ""
        s.record.decide(
            log_words.JOBS_STAGE, f"on the node: {describe_jobs(s.jobs)}", extra.lstrip("; ")
        )
        self._update_details()
        return found

    def _urgency(self) -> tuple[Urgency, str]:
        s = self._state
        assert s.classification is not None
        forced_by = self._forced_by()
        if forced_by is not None:
            return Urgency.IMMEDIATE, f"forced by {forced_by}"
        fault = s.classification.fault_class
        urgency = self._policy.fault_class(fault).urgency
        return urgency, log_words.urgency_reason(urgency, fault)

    async def _wait_for_jobs(
        self, urgency: Urgency, asked: list[JobRef], wait: timedelta, why: str
    ) -> bool:
        """Ask, then wait for an answer, the jobs' end, the deadline or an operator."""
        s = self._state
        info = workflow.info()
        s.request_incident = incident_id(info.workflow_id, info.run_id)
        s.asked_jobs = [job.display for job in asked]
        s.asked_pods, s.job_answers = {}, []
        deadline = workflow.now() + wait
        s.asking = True
        try:
            result = await self._actions.request_checkpoint(
                s.request_incident, s.jobs, deadline, urgency, why
            )
        except ActivityError as err:
            s.record.decide(log_words.JOBS_STAGE, "could not ask the jobs", failure_cause(err))
            s.request_incident = None
            s.never_idle = urgency == Urgency.IDLE_ONLY  # it cannot watch the work end
            return True
        finally:
            s.asking = False
        s.asked_pods = {pod.uid: pod.job for pod in result.asked}
        what = (
            log_words.asked_to_checkpoint(describe_jobs(asked))
            if asked
            else log_words.WAITING_FOR_JOBS
        )
        s.checkpoint = "asked" if asked else "waiting for the jobs to end"
        s.record.decide(
            log_words.JOBS_STAGE,
            what,
            f"{why}; {result.requested_pods} pod(s) asked, {result.watched_pods} watched, "
            f"until {deadline.isoformat(timespec='seconds')} ({wait})",
        )
        early, s.early_answers = s.early_answers, []
        for report in early:
            self.checkpoint_answer(report)
        s.awaiting_approval, s.approved = Rung.STOP_GPU_WORK, False
        try:
            outcome = await self._wait_loop(
                deadline,
                "a job checkpoint" if asked else "jobs to end",
                on_evidence=urgency == Urgency.IDLE_ONLY,
            )
        finally:
            s.awaiting_approval = None
        s.record.decide(log_words.JOBS_STAGE, "wait over", outcome)
        await self._withdraw_request()
        s.request_incident = None
        if urgency == Urgency.WHEN_IDLE:
            s.deferred = True
        if urgency == Urgency.IDLE_ONLY and outcome in (
            log_words.DEADLINE_PASSED,
            log_words.EVIDENCE_CLEARED,
        ):
            s.never_idle = True  # given back untouched (_give_back_untouched says why)
        return s.abort is None and s.skip_to is None

    async def _wait_loop(self, deadline: datetime, what: str, *, on_evidence: bool = False) -> str:
        """Wait until something ends the wait; return what did.

        Besides the relay's signals, a coarse timer (``jobs.recheck_interval``)
        looks at the node's jobs itself: the relay forgets watched pods when it
        restarts, and a pod deleted meanwhile sends no event. ``on_evidence``
        (an ``idle_only`` wait): new evidence is classified, and a fault named by
        it ends the wait, its own urgency then applying.
        """
        s = self._state
        while True:
            if on_evidence and self._fault_named():
                return "evidence of a fault came: its urgency applies"
            evidence_version = s.record.version
            remaining = deadline - workflow.now()
            if remaining <= timedelta(0):
                if s.job_answers:
                    s.checkpoint = self._answers_summary(log_words.DEADLINE_PASSED)
                elif s.answer is None:
                    s.checkpoint = log_words.DEADLINE_PASSED
                return log_words.DEADLINE_PASSED
            timeout = min(remaining, self._policy.jobs.recheck_interval)
            seen = s.pods_ended
            s.waiting_for = f"{what} (until {deadline.isoformat(timespec='seconds')})"
            self._update_details()
            rechecking = False
            try:
                await workflow.wait_condition(
                    lambda seen=seen, version=evidence_version: (  # type: ignore[misc]
                        self._answers_end_wait()
                        or s.pods_ended != seen
                        or s.approved
                        or s.skip_to is not None
                        or s.abort is not None
                        or (on_evidence and s.record.version != version)
                    ),
                    timeout=timeout,
                    timeout_summary=f"wait for {what}",
                )
            except TimeoutError:
                if workflow.now() >= deadline:
                    continue  # the loop sees the deadline passed
                rechecking = True
            finally:
                s.waiting_for = None
            if s.abort is not None:
                return "aborted by an operator"
            if s.approved or s.skip_to is not None:
                return "cut short by an operator"
            if on_evidence and s.record.version != evidence_version:
                if not s.record.active_evidence():
                    return log_words.EVIDENCE_CLEARED  # nothing left to diagnose
                self._classify()
                continue  # the loop's top sees whether a fault is named now
            if self._answers_end_wait():
                return s.checkpoint or "answered"
            found = await self._find_jobs(quiet_if_same=rechecking)
            if found is None:
                continue
            if found.gpu_pods == 0:
                s.checkpoint = "the jobs ended"
                return "no GPU work left on the node"
            if s.job_answers and not self._still_asked(found):
                s.checkpoint = self._answers_summary("left the node")
                return "every asked job still on the node answered"

    def _answers_end_wait(self) -> bool:
        """Whether the answers so far end the wait: every asked job has answered."""
        s = self._state
        answered = dict(s.job_answers)
        return bool(s.asked_jobs) and all(job in answered for job in s.asked_jobs)

    def _answers_summary(self, pending: str) -> str:
        """What each asked job answered (``pending`` for the others), for the operator."""
        s = self._state
        answered = dict(s.job_answers)
        if len(s.asked_jobs) == 1:
            return answered.get(s.asked_jobs[0], pending)
        return "; ".join(f"{job}: {answered.get(job, pending)}" for job in s.asked_jobs)

    def _still_asked(self, found: NodeJobs) -> list[str]:
        """Asked jobs that run on the node and have not answered."""
        here = {job.display for job in found.jobs}
        answered = dict(self._state.job_answers)
        return [job for job in self._state.asked_jobs if job in here and job not in answered]

    def _ignore_answer(self, pod: str, problem: str) -> None:
        s = self._state
        s.ignored_answers += 1
        if s.ignored_answers <= MAX_IGNORED_ANSWER_LOGS:
            s.record.decide(log_words.JOBS_STAGE, "answer ignored", f"{pod}: {problem}")

    async def _withdraw_request(self) -> None:
        """Remove the request from the jobs' pods (on other nodes they keep running)."""
        s = self._state
        assert s.request_incident is not None
        try:
            result = await self._actions.withdraw_checkpoint(s.request_incident, s.jobs)
        except ActivityError as err:
            s.record.decide(
                log_words.JOBS_STAGE, "could not withdraw the request", failure_cause(err)
            )
            return
        if result.cleared_pods:
            s.record.decide(
                log_words.JOBS_STAGE, "request withdrawn", f"from {result.cleared_pods} pod(s)"
            )

    async def _hold_while_paused(self) -> bool:
        """Keep a paused incident from draining (a pause does not end the job wait itself).

        Returns:
            False when an operator's skip or abort came while it was held.
        """
        s = self._state
        if not s.paused:
            return True
        s.record.decide(log_words.JOBS_STAGE, "drain held", "paused by an operator")
        await self._wait_while_paused()
        return s.abort is None and s.skip_to is None

    def _plan_dry_run(self, rung: Rung) -> None:
        """Record what the ladder would do from ``rung`` on, and stop."""
        s = self._state
        plan: list[str] = []
        current = rung
        while current.order < s.ceiling.order:
            current = ladder.first_working_rung(current.next())
            plan.append(current.value)
        if Rung.ESCALATE.value not in plan:
            plan.append(Rung.ESCALATE.value)
        then = " -> ".join(plan)
        s.record.decide("dry_run", f"would run {rung}", f"if verification fails: {then}", rung)
        s.outcome = Outcome.DRY_RUN

    async def _act(self, spec: RungSpec, rung: Rung, attempt: int) -> StepOutcome:
        """Run the rung's action; FIXED means it did its part and verification decides."""
        match spec.action:
            case RungAction.NONE:
                return StepOutcome.FIXED
            case RungAction.RESET_GPUS:
                return await self._with_step_permit(rung, attempt, self._reset_gpus)
            case RungAction.REBOOT_HOST:
                return await self._with_step_permit(rung, attempt, self._reboot)
            case RungAction.REPLACE_NODE:
                return await self._replace(attempt)
            case RungAction.ACTIVITY:
                return await self._run_step_activity(rung, attempt)
            case _:
                # A table entry whose action the workflow cannot run is a bug:
                # fail the task (visible, retried after a fix), never guess.
                raise ValueError(f"rung {rung} has action {spec.action}, which cannot run here")

    async def _with_step_permit(
        self, rung: Rung, attempt: int, step: Callable[[int], Awaitable[StepOutcome]]
    ) -> StepOutcome:
        """Run ``step`` holding ``rung``'s disruption permit, given back when it ends."""
        permitted = await self._take_step_permit(rung)
        if permitted != StepOutcome.FIXED:
            self._state.record.end(attempt, f"no {rung} permit", ran=False)
            return permitted
        try:
            return await step(attempt)
        finally:
            await self._release_step_permit(rung, f"{rung} done")

    async def _run_step_activity(self, rung: Rung, attempt: int) -> StepOutcome:
        """A rung with an activity of its own (``Activities.rung_step``); verification decides."""
        s = self._state
        gpus = list(s.classification.gpu_indices) if s.classification else []
        try:
            result = await self._actions.run_step(rung, self._provider_id, gpus)
        except STEP_FAILED as err:
            s.record.end(attempt, f"failed: {failure_cause(err)}")
            s.record.decide(rung.value, "failed", failure_cause(err), rung)
            return StepOutcome.CLIMB
        verdict = "ok" if result.ok else "failed"
        s.record.end(attempt, verdict)
        s.record.decide(rung.value, verdict, result.detail, rung)
        await self._note(rung, f"{rung}: {verdict}", warning=not result.ok)
        return StepOutcome.FIXED if result.ok else StepOutcome.CLIMB

    async def _reset_gpus(self, attempt: int) -> StepOutcome:
        s = self._state
        gpus = list(s.classification.gpu_indices) if s.classification else []
        try:
            result = await self._actions.reset_gpus(self._provider_id, gpus)
        except STEP_FAILED as err:
            s.record.end(attempt, f"failed: {failure_cause(err)}")
            s.record.decide("gpu_reset", "failed", failure_cause(err), Rung.GPU_RESET)
            return StepOutcome.CLIMB
        s.record.end(attempt, result.status)
        s.record.decide("gpu_reset", f"reset {result.status}", result.detail, Rung.GPU_RESET)
        await self._note(
            Rung.GPU_RESET,
            f"GPU reset {gpus or 'all'}: {result.status}",
            warning=result.status != "ok",
        )
        return StepOutcome.FIXED if result.status == "ok" else StepOutcome.CLIMB

    async def _reboot(self, attempt: int) -> StepOutcome:
        s = self._state
        # The boot id read now goes into the activity's input, and so into the
        # history: a retried or replayed reboot sees it changed and does not
        # reboot a second time. A host not back within the window is not
        # rebooted again (RebootNotConfirmed is not retried): the ladder climbs.
        health = await self._actions.read_health("read the boot id")
        if not self._same_machine(health):
            s.record.end(attempt, "not rebooted: another machine")
            return StepOutcome.CLIMB
        try:
            # The pinned provider id, never a re-read one: only this machine reboots.
            result = await self._actions.reboot(self._provider_id, health.boot_id)
        except STEP_FAILED as err:
            s.record.end(attempt, f"failed: {failure_cause(err)}")
            s.record.decide("reboot", "failed", failure_cause(err), Rung.REBOOT)
            return StepOutcome.CLIMB
        s.record.end(attempt, f"boot id {health.boot_id} -> {result.boot_id_after}")
        s.record.decide("reboot", "rebooted", f"new boot id {result.boot_id_after}", Rung.REBOOT)
        await self._note(Rung.REBOOT, "host rebooted; node Ready again")
        return StepOutcome.FIXED

    async def _replace(self, attempt: int) -> StepOutcome:
        """Take a permit, delete the NodeClaim, wait for new capacity, give the permit back."""
        s = self._state
        forced_by = self._forced_by()
        if forced_by is not None:
            s.record.decide(log_words.REPLACE_STAGE, "permit bypassed", f"forced by {forced_by}")
        else:
            if not await self._within_replacement_rate(attempt):
                return StepOutcome.ESCALATE
            permitted = await self._take_permit(attempt)
            if permitted != StepOutcome.FIXED:
                return permitted
        replaced = None
        try:
            asked_at = workflow.now()
            deleted = await self._actions.delete_node_claim(self._provider_id)
            s.record.decide(
                log_words.REPLACE_STAGE,
                log_words.deleted_node_claim(deleted.node_claim),
                "it was already gone"
                if deleted.already_gone
                else "Karpenter drains and terminates",
            )
            replaced = await self._actions.wait_for_replacement(self._pool, asked_at)
        except STEP_FAILED as err:
            s.record.end(attempt, f"failed: {failure_cause(err)}")
            s.record.decide(
                log_words.REPLACE_STAGE, log_words.FAILED, failure_cause(err), Rung.REPLACE
            )
            return StepOutcome.CLIMB
        finally:
            # The incident goes on (to escalation, or cleanup if cancelled).
            if self._permit.held and replaced is None:
                await self._permit.release("replacement did not finish")
        if self._permit.held:
            # A replaced node's incident closes at once (no cooldown): its
            # closing hands the permit back through the guard (ADR 007).
            self._permit.leave_to_guard()
        s.replaced_by = replaced.new_node
        s.record.end(attempt, f"replaced by {replaced.new_node or 'new capacity'}")
        await self._admission_of_replacement(replaced.new_node)
        return StepOutcome.FIXED

    async def _take_step_permit(self, rung: Rung) -> StepOutcome:
        """Wait for ``rung``'s disruption permit, fleet-wide and per pool (issue 35).

        The node waits quarantined. A drain's permit has a guard (it is held
        until the node is back in service); a reset's or reboot's is held only
        while the step runs and its lease covers that.

        Returns:
            FIXED with the permit held (or none needed); HELD when the wait was
            cut (the signals cleared, or an operator paused, skipped or
            aborted): the ladder decides again; ESCALATE when none came within
            ``disruption.permit_wait_timeout``.
        """
        s = self._state
        disruption = self._input.policy.disruption  # fleet-wide: the base policy's
        budget = disruption.budget(rung)
        if not disruption.enabled or budget is None or self._dry_run:
            return StepOutcome.FIXED
        permit = self._step_permits.get(rung)
        if permit is None:
            semaphore = step_semaphore_id(self._input.semaphore_workflow_id, rung.value)
            permit = self._step_permits[rung] = ReplacementPermit(semaphore)
        if permit.request_id is not None:
            return StepOutcome.FIXED  # held already (a drain's, kept for the incident)
        forced_by = self._forced_by()
        if forced_by is not None:
            s.record.decide("disruption", f"{rung} permit bypassed", f"forced by {forced_by}")
            return StepOutcome.FIXED
        s.permits_asked += 1
        cleared_at_start = s.record.cleared

        def cut() -> bool:
            # Signals that clear while it waits end the wait; a wait begun on
            # cleared signals (to verify a recovery) is for the permit itself.
            cleared = s.record.cleared and not cleared_at_start
            return s.abort is not None or s.paused or s.skip_to is not None or cleared

        drain = rung == Rung.STOP_GPU_WORK
        step_window = self._policy.rung(rung).timeout
        s.waiting_for = f"a {rung} permit"
        self._update_details()
        try:
            granted = await permit.acquire(
                request_id=f"{workflow.info().run_id}/{rung}/{s.permits_asked}",
                lease=disruption.drain_lease if drain else 2 * step_window,
                timeout=disruption.permit_wait_timeout,
                capacity=budget.fleet,
                interrupted=cut,
                pool=self._pool,
                pool_capacity=budget.per_pool,
                purpose=f"{rung} steps",
                guarded=drain,
            )
        finally:
            s.waiting_for = None
        if granted:
            return StepOutcome.FIXED
        if cut():
            s.record.decide("disruption", f"stopped waiting for a {rung} permit", "decide again")
            return StepOutcome.HELD
        wait = disruption.permit_wait_timeout
        s.record.decide("disruption", f"no {rung} permit", f"none within {wait}", rung)
        return StepOutcome.ESCALATE

    async def _release_step_permit(self, rung: Rung, reason: str) -> None:
        """Give ``rung``'s disruption permit back, if one is held or asked for."""
        permit = self._step_permits.get(rung)
        if permit is not None and permit.request_id is not None:
            await permit.release(reason)

    async def _within_replacement_rate(self, attempt: int) -> bool:
        """Whether the pool's replacement budget for ``replacement.rate.window`` has room.

        Past it, a person decides (the step escalates): replacements that keep
        coming, two at a time, are more likely a wrong check than bad hardware.
        """
        s = self._state
        rate = self._policy.replacement.rate
        if not rate.enabled:
            return True
        pool = await self._actions.pool_health(self._pool)
        done = await self._actions.count_replacements(
            self._input.cluster, self._pool, workflow.now() - rate.window
        )
        budget = rate.budget(pool.total)
        if done.count < budget:
            return True
        s.record.end(attempt, "replacement rate budget spent")
        s.record.decide(
            log_words.REPLACE_STAGE,
            "rate budget spent",
            f"{done.count} node(s) of pool {self._pool} replaced within {rate.window} "
            f"(budget {budget} for {pool.total} nodes): a person decides",
            Rung.REPLACE,
        )
        return False

    async def _take_permit(self, attempt: int) -> StepOutcome:
        """Wait for a replacement permit, then re-check the breaker under it.

        Returns:
            FIXED with the permit held; ABORTED when an operator aborted;
            ESCALATE when no permit came in time or the breaker opened.
        """
        s = self._state
        replacement = self._policy.replacement
        granted, pauses = False, 0
        while True:
            await self._wait_while_paused()
            if s.abort is not None:
                break
            # A paused incident gives up its place (and any permit) rather than
            # replace a node the operator is looking at; it queues again on resume.
            request_id = f"{workflow.info().run_id}/{attempt}" + (f"/{pauses}" if pauses else "")
            s.waiting_for = "a replacement permit"
            self._update_details()
            try:
                # An abort must not wait for the line to move (up to hours).
                granted = await self._permit.acquire(
                    request_id=request_id,
                    lease=replacement.lease,
                    timeout=replacement.permit_wait_timeout,
                    # The semaphore is fleet-wide: its cap is the base policy's,
                    # whatever the node's pool overrides.
                    capacity=self._input.policy.replacement.max_concurrent,
                    interrupted=lambda: s.abort is not None or s.paused,
                    pool=self._pool,
                    pool_capacity=self._input.policy.replacement.max_per_pool,
                )
            finally:
                s.waiting_for = None
            if not s.paused:
                break
            if granted:
                await self._permit.release("paused by an operator")
                granted = False
            pauses += 1
        if s.abort is not None:
            if granted:
                await self._permit.release("aborted by an operator")
            s.record.end(attempt, "aborted while waiting for a permit")
            return StepOutcome.ABORTED
        if not granted:
            s.record.end(attempt, "no permit")
            wait = replacement.permit_wait_timeout
            s.record.decide(
                log_words.REPLACE_STAGE, "no permit", f"none within {wait}", Rung.REPLACE
            )
            return StepOutcome.ESCALATE
        # The fleet may have changed while this node waited in line. An open
        # breaker holds, it does not hand over: the permit goes back, the
        # attempt spends no budget, and the ladder's next decision holds the
        # node until the breaker closes (or its signals clear).
        if await self._breaker_open(Rung.REPLACE):
            await self._permit.release("breaker opened while waiting")
            s.record.end(attempt, "breaker opened under the permit: held", ran=False)
            return StepOutcome.HELD
        return StepOutcome.FIXED

    async def _verify_step(self, spec: RungSpec, rung: Rung, attempt: int) -> StepOutcome:
        """Verify what the step did, by the table; release the node when it passed."""
        s = self._state
        if spec.verification == Verification.BURN_IN:
            self._close_replaced()  # the new node's admission verifies it
            return StepOutcome.FIXED
        verified_attempt = attempt if spec.action == RungAction.NONE else None
        label = "diagnose" if spec.action == RungAction.NONE else f"after {rung}"
        if not await self._verify(verified_attempt, label):
            return StepOutcome.CLIMB
        assert spec.released_as is not None
        reason = "diagnostics found no fault" if spec.action == RungAction.NONE else None
        if await self._close_in_service(spec.released_as, reason or f"{rung} fixed the node"):
            return StepOutcome.FIXED
        return (
            StepOutcome.ESCALATE if s.skip_to is None and s.abort is None else StepOutcome.ABORTED
        )

    async def _verify(self, attempt: int | None, label: str) -> bool:
        """Check the fault's component; a failed check's findings become evidence."""
        s = self._state
        if not self._policy.verification.enabled:
            s.record.decide("verify", "skipped", "verification disabled by policy", s.rung)
            if attempt is not None:
                s.record.end(attempt, "not verified")
            return True
        check = check_for(self._fault)
        try:
            if check == ComponentCheck.EFA_CHECK:
                passed, summary, failures = await self._check_efa(label)
            elif check == ComponentCheck.NODE_READY:
                passed, summary, failures = await self._check_node_ready()
            else:
                # The class may ask for a deeper level (a slow GPU: level 3's bandwidth tests).
                fault = self._fault
                level = self._policy.fault_class(fault).diag_level if fault else None
                result = await self._actions.diagnose(self._provider_id, label, level)
                passed, summary, failures = result.passed, result.summary, result.failures
        except STEP_FAILED as err:
            s.record.decide("verify", f"{check} could not run", failure_cause(err), s.rung)
            if attempt is not None:
                s.record.end(attempt, "diagnostic error")
            return False
        verdict = "pass" if passed else "fail"
        if attempt is not None:
            s.record.end(attempt, verdict)
        what = "diagnostic" if check == ComponentCheck.DCGM_DIAG else str(check)
        s.record.decide("verify", f"{what} {verdict}", summary or label, s.rung)
        if not passed and failures:
            s.record.add(EvidenceReport(node=self._input.node, evidence=failures[:256]))
            self._classify()
        return passed

    async def _check_efa(self, label: str) -> tuple[bool, str, list[Evidence]]:
        """The node agent's EFA verdict, read after its next cycles on this boot.

        A slow port (EfaDegraded) is first put under load: idle, it would pass.
        """
        verification = self._policy.verification
        conditions = efa_conditions(self._fault)
        degraded = NPD_EFA_DEGRADED_CONDITION in conditions
        settle = verification.efa_settle
        if degraded:
            settle = max(settle, verification.efa_degraded_settle)
        if settle > timedelta(0):
            await workflow.sleep(settle, summary=f"the node agent's next EFA checks ({label})")
        if degraded and verification.efa_load_test.enabled:
            load = await self._actions.efa_loopback(self._provider_id, label)
            if load.ran and not load.passed:
                return False, load.summary, list(load.failures)
            verdict = "pass" if load.ran else "not run"
            self._state.record.decide(
                "verify", f"EFA load test {verdict}", load.summary, self._state.rung
            )
        deadline = workflow.now() + verification.timeout
        while True:
            result = await self._actions.check_efa(conditions)
            if result.reported or workflow.now() >= deadline:
                summary = result.summary or ("EFA healthy" if result.passed else "EFA not reported")
                return result.passed and result.reported, summary, list(result.evidence)
            await workflow.sleep(
                max(verification.efa_settle, timedelta(seconds=30)),
                summary="the node agent has not reported EFA yet",
            )

    async def _check_node_ready(self) -> tuple[bool, str, list[Evidence]]:
        """A host fault's check: the node is Ready (a reboot also confirmed its new boot)."""
        health = await self._actions.read_health("check the node is Ready")
        if not self._same_machine(health):
            return False, "another machine under the node's name", []
        if health.ready:
            return True, f"node Ready on boot {health.boot_id}", []
        return False, "node not Ready", []

    def _same_machine(self, health: NodeHealth) -> bool:
        """Whether a fresh read is still the pinned machine; notes it when it is not."""
        pin = self._pin()
        if pin is None or not health.exists:
            return True  # a missing node is the steps' own concern
        if (health.uid, health.provider_id) == (pin.uid, pin.provider_id):
            return True
        self._on_machine_replaced(
            f"node {self._input.node} is another machine now: uid {health.uid}, "
            f"provider id {health.provider_id}; the incident pinned {pin.uid}, {pin.provider_id}"
        )
        return False

    def _close_machine_replaced(self) -> None:
        """The machine this incident was about is gone: nothing more is done under its name."""
        s = self._state
        s.record.decide(
            "ladder",
            "closed: the machine is gone",
            f"{s.machine_replaced}; a new incident starts for the new machine if its "
            "signals say so",
            s.rung,
        )
        s.outcome = Outcome.NODE_GONE

    def _climb(self, rung: Rung) -> Rung:
        s = self._state
        if s.outcome is not None or s.skip_to is not None or s.abort is not None:
            return rung
        assert s.classification is not None
        nxt = self._next_rung(rung)
        if s.classification.max_rung.order > s.ceiling.order:
            s.ceiling = s.classification.max_rung
        s.record.decide("ladder", f"climb to {nxt}", f"{rung} did not fix the node", nxt)
        return nxt

    def _next_rung(self, rung: Rung) -> Rung:
        """The rung after ``rung`` (honouring a stronger classification)."""
        assert self._state.classification is not None
        return ladder.climb(rung, self._state.classification)

    async def _escalate(self) -> Rung | None:
        """Hand the node to a human, then wait for their retry, skip or abort."""
        s = self._state
        assert s.classification is not None
        self._set_rung(Rung.ESCALATE)
        reason = s.record.last_reason or "ladder exhausted"
        if self._dry_run:
            s.record.decide(
                log_words.ESCALATE_STAGE, "would escalate to a human", reason, Rung.ESCALATE
            )
            s.outcome = Outcome.DRY_RUN
            return None
        if s.escalation_reference is None:
            escalation = await self._actions.escalate(
                s.classification.fault_class, reason, s.record.summary()
            )
            s.escalation_reference = escalation.reference
            s.record.decide(
                log_words.ESCALATE_STAGE, log_words.handed_over(escalation.reference), reason
            )
            # A person owns the node now: it no longer counts against the drain budget.
            await self._release_step_permit(Rung.STOP_GPU_WORK, "handed to a person")
            metrics.escalated(self._fault_value, self._pool)
            await self._notify_hand_over(reason, escalation.reference)
        hold = self._policy.operator.escalation_hold
        if s.handover_until is None:  # else a run continued as new goes on waiting
            s.handover_until = workflow.now() + hold

        def answered() -> bool:
            return (
                s.retry or s.skip_to is not None or s.abort is not None or self._fixed_by_a_person()
            )

        s.waiting_for = "an operator: retry, skip or abort"
        self._update_details()
        try:
            await workflow.wait_condition(
                lambda: answered() or self._history_full(),
                timeout=_left(s.handover_until),
                timeout_summary="waiting for an operator",
            )
        except TimeoutError:
            s.handover_until = None
            s.record.decide(log_words.ESCALATE_STAGE, "closed", f"no operator action within {hold}")
            s.outcome = Outcome.ESCALATED
            return None
        finally:
            s.waiting_for = None
        if not answered():
            await self._continue_as_new("ladder", Rung.ESCALATE)
        s.handover_until = None
        if not (s.retry or s.skip_to is not None or s.abort is not None):
            # Only escalation.close_on_recovery ends the wait so: the signals cleared.
            s.recovery_close_tried = True
            if await self._close_in_service(
                Outcome.RECOVERED, "every signal cleared after the hand-over"
            ):
                return None
            # The release failed: wait for an operator after all (no second try).
            return s.skip_to or Rung.ESCALATE
        if s.retry and s.last_rung is not None and s.skip_to is None:
            s.skip_to = s.last_rung  # retried past the rung's attempt limit
        s.retry = False
        s.ceiling = Rung.ESCALATE  # the operator owns the ladder from here
        return s.skip_to or Rung.ESCALATE

    async def _notify_hand_over(self, reason: str, reference: str) -> None:
        """Tell the policy's webhook (``escalation.notify``); a failure is logged, never fatal."""
        notify = self._policy.escalation.notify
        s = self._state
        if notify is None or s.classification is None:
            return
        try:
            result = await self._actions.notify_hand_over(
                self._input.cluster,
                notify,
                s.classification.fault_class,
                reason,
                reference,
                summary_line(
                    self._input.node,
                    self._pool,
                    self._fault_value,
                    rung=Rung.ESCALATE.value,
                ),
            )
        except ActivityError as err:
            s.record.decide(
                log_words.ESCALATE_STAGE, "people not notified", failure_cause(err), Rung.ESCALATE
            )
            return
        s.record.decide(
            log_words.ESCALATE_STAGE,
            "people notified",
            f"the hand-over webhook answered HTTP {result.status} (attempt {result.attempt})",
            Rung.ESCALATE,
        )

    def _fixed_by_a_person(self) -> bool:
        """Whether policy ends this hand-over now: every signal cleared since it began."""
        s = self._state
        return (
            self._policy.escalation.close_on_recovery
            and s.record.cleared
            and not s.recovery_close_tried
        )

    def _history_full(self) -> bool:
        """Whether this run should continue as new now: a long history, nothing held.

        Only while it waits (a cooldown, a hand-over's hold, the breaker's hold)
        with no permit asked for or held, so nothing the semaphores know of is
        tied to this run. A breaker hold after a drain keeps its drain permit:
        there the history stays bounded by ``breaker.max_hold`` over
        ``breaker.recheck_interval`` (about 11 events a recheck).
        """
        info = workflow.info()
        long = (
            info.get_current_history_length() >= self._input.history_limit
            or info.is_continue_as_new_suggested()
        )
        held = self._permit.request_id is not None or any(
            permit.request_id is not None for permit in self._step_permits.values()
        )
        return long and not held

    async def _continue_as_new(
        self, resume: Literal["cooldown", "ladder"], rung: Rung | None = None
    ) -> None:
        """Carry the whole state into a fresh run that goes on with the same wait.

        Returns only when nothing calls for it (see :meth:`_history_full`).
        """
        if not self._history_full():
            return
        # Updates and signals still running finish first; their effects travel along.
        await workflow.wait_condition(workflow.all_handlers_finished)
        s = self._state
        s.continued += 1
        events = workflow.info().get_current_history_length()
        s.record.decide(
            s.stage, "continued as new", f"{events} events in this run's history; state carried"
        )
        workflow.continue_as_new(
            self._input.model_copy(
                update={
                    "continued": ContinuedIncident(
                        resume=resume, rung=rung, state=s.model_dump(mode="json")
                    ),
                    "evidence": None,
                }
            )
        )

    # ------------------------------------------------------ release and close

    async def _close_in_service(self, outcome: Outcome, reason: str) -> bool:
        """Return the node to service; False when the release failed (a person must look)."""
        s = self._state
        s.record.decide("release", outcome.value, reason, s.rung)
        await self._admission_before_release()
        if not await self._release(uncordon=True):
            return False
        await self._release_step_permit(Rung.STOP_GPU_WORK, "back in service")
        s.outcome = outcome
        metrics.back_in_service(self._fault_value, outcome, s.started_at)
        return True

    def _close_replaced(self) -> None:
        s = self._state
        s.quarantine = None  # the node is gone: nothing to release
        s.outcome = Outcome.REPLACED
        metrics.back_in_service(self._fault_value, Outcome.REPLACED, s.started_at)
        s.record.decide(
            log_words.REPLACE_STAGE,
            log_words.REPLACED,
            f"new node {s.replaced_by or 'unknown'}",
        )

    async def _cleanup(self, outcome: Outcome) -> None:
        """Compensation in one place: give back the permit, untaint, uncordon."""
        s = self._state
        self._set_stage("cleanup")
        if self._permit.held:
            await self._permit.release("incident ended")
        for rung in list(self._step_permits):
            await self._release_step_permit(rung, "incident ended")
        uncordon = s.abort.uncordon if s.abort is not None else True
        await self._release(uncordon=uncordon)
        s.outcome = outcome

    async def _release(self, *, uncordon: bool) -> bool:
        """Undo what quarantine did, and only that; False if it could not."""
        s = self._state
        if s.quarantine is None:
            return True
        # A node an operator had cordoned before the incident stays cordoned.
        uncordon = uncordon and not s.quarantine.was_already_cordoned
        try:
            result = await self._actions.release(uncordon=uncordon)
        except ActivityError as err:
            s.record.decide("release", "failed; node stays quarantined", failure_cause(err))
            return False
        s.quarantine = None
        s.record.decide(
            "release",
            "released",
            f"untainted: {result.taint_removed}, uncordoned: {result.uncordoned}",
        )
        await self._note(None, "returned to service" if result.uncordoned else "quarantine lifted")
        return True

    async def _note(self, rung: Rung | None, message: str, *, warning: bool = False) -> None:
        """Tell the story on the node (annotation + event) so kubectl shows it."""
        if self._dry_run:
            return
        try:
            await self._actions.record(rung, self._fault, message, warning=warning)
        except ActivityError as err:
            # The history has the step; a missing node event must not stop a
            # repair, so the failure is logged in the decision log instead.
            self._state.record.decide(
                "record", "could not record on the node", failure_cause(err), rung
            )

    # --------------------------------------------- hand-off to admission (ADR 011)

    def _hands_to_admission(self) -> bool:
        gate = self._policy.admission
        return gate.enabled and gate.after_incidents and not self._dry_run

    async def _admission_before_release(self) -> None:
        """Gate the node's current boot behind burn-in if it rebooted or was never admitted."""
        if not self._hands_to_admission():
            return
        health = self._state.health
        before = health.boot_id if health is not None else ""
        verification = self._policy.verification
        verified = verification.diag_level if verification.enabled else None
        await self._hand_over(self._input.node, rebooted_from=before, verified=verified)

    async def _admission_of_replacement(self, new_node: str | None) -> None:
        """Start the burn-in of the node that replaced this one."""
        if new_node and self._hands_to_admission():
            await self._hand_over(new_node, rebooted_from=None, verified=None)

    async def _hand_over(
        self, node: str, *, rebooted_from: str | None, verified: int | None
    ) -> None:
        """Hold ``node`` behind the startup taint and start its admission.

        A replacement node registered without the startup taint has taken work
        already (its NodePool lacks the taint) and is left alone.
        """
        s = self._state
        replacement = node != self._input.node
        info = workflow.info()
        try:
            hold: a.AdmissionHold = await workflow.execute_activity(
                Activities.HOLD_FOR_ADMISSION,
                a.HoldForAdmissionInput(node=node, admission_id=info.workflow_id, add_taint=False),
                result_type=a.AdmissionHold,
                start_to_close_timeout=self._policy.timeouts.bookkeeping,
                retry_policy=BOOKKEEPING_RETRY,
                summary=f"read {node} for its admission",
            )
            if not hold.exists or not hold.boot_id or hold.admitted_boot == hold.boot_id:
                return  # gone, or this boot already passed
            if replacement and not hold.tainted:
                # Tainting it now and burning in GPUs a job holds would fail
                # the job's node.
                s.record.decide(
                    "admission",
                    f"{node} not gated",
                    "registered without the startup taint (add it to the NodePool)",
                )
                return
            rebooted = rebooted_from is not None and hold.boot_id != rebooted_from
            if not (replacement or rebooted or hold.tainted):
                return  # same boot, admitted before the gate existed: nothing to gate
            trigger: AdmissionTrigger = (
                "replacement" if replacement else "reboot" if rebooted else "repaired"
            )
            hold = await workflow.execute_activity(
                Activities.HOLD_FOR_ADMISSION,
                a.HoldForAdmissionInput(
                    node=node,
                    boot_id=hold.boot_id,
                    admission_id=info.workflow_id,
                    add_taint=True,
                    # The watcher would otherwise race this start with a bare one.
                    taint_value=INCIDENT_HOLD_TAINT_VALUE,
                ),
                result_type=a.AdmissionHold,
                start_to_close_timeout=self._policy.timeouts.bookkeeping,
                retry_policy=BOOKKEEPING_RETRY,
                summary=f"hold {node} behind the startup taint",
            )
            started: a.StartAdmissionResult = await workflow.execute_activity(
                Activities.START_ADMISSION,
                a.StartAdmissionInput(
                    admission=a.AdmissionInput(
                        cluster=self._input.cluster,
                        node=node,
                        boot_id=hold.boot_id,
                        policy=self._policy,
                        trigger=trigger,
                        first_boot=replacement,
                        replaces=self._input.node if replacement else None,
                        verified_diag_level=verified,
                        semaphore_workflow_id=self._input.semaphore_workflow_id,
                    )
                ),
                result_type=a.StartAdmissionResult,
                start_to_close_timeout=self._policy.timeouts.bookkeeping,
                retry_policy=BOOKKEEPING_RETRY,
                summary=f"start the burn-in of {node}",
            )
        except ActivityError as err:
            s.record.decide("admission", f"hand-off of {node} failed", failure_cause(err))
            return
        s.record.decide("admission", f"{node} handed to admission ({trigger})", started.workflow_id)

    # ------------------------------------------------------------- cooldown

    def _reported_again_during_step(self) -> bool:
        """Whether, with no verification, the fault was reported again while the step ran.

        Without a check the trigger's condition is the only one: a report that
        arrived after the step began (the watcher's report of the fault on the
        new boot can beat the cooldown when real latency is stretched) is the
        fault seen again, as one during the cooldown is.
        """
        s = self._state
        if self._policy.verification.enabled or s.record.cleared:
            return False
        return s.record.version != s.version_at_step

    def _show_outcome(self) -> None:
        """Put the outcome in the list while the run stays open (cooldown)."""
        if self._state.outcome is not None:
            workflow.upsert_search_attributes([SA_OUTCOME.value_set(self._state.outcome.value)])

    # ------------------------------------------------------- the pinned machine

    def _node_actions(self, policy: Policy) -> NodeActions:
        return NodeActions(
            policy,
            self._input.node,
            lambda: self._state.abort is not None,
            self._pin,
            self._on_machine_replaced,
        )

    def _pin(self) -> NodePin | None:
        """The machine triage read (UID and provider id); None before triage."""
        health = self._state.health
        if health is None or not health.exists:
            return None
        return NodePin(uid=health.uid, provider_id=health.provider_id)

    def _on_machine_replaced(self, reason: str) -> None:
        if self._state.machine_replaced is None:
            self._state.machine_replaced = reason[:1024]

    # ---------------------------------------------------------------- view

    @property
    def _pool(self) -> str | None:
        health = self._state.health
        return health.node_pool if health else None

    @property
    def _provider_id(self) -> str:
        assert self._state.health is not None, "triage reads the node first"
        return self._state.health.provider_id

    @property
    def _fault(self) -> FaultClass | None:
        classification = self._state.classification
        return classification.fault_class if classification else None

    @property
    def _fault_value(self) -> str:
        return self._fault.value if self._fault else "unclassified"

    def _set_stage(self, stage: str) -> None:
        self._state.stage = stage
        self._update_details()

    def _set_rung(self, rung: Rung) -> None:
        self._state.rung = rung
        self._state.stage = rung.value
        workflow.upsert_search_attributes([SA_RUNG.value_set(rung.value)])
        self._update_details()

    def _update_details(self) -> None:
        """The markdown header the Temporal UI shows (``remediate status`` shares its line)."""
        s = self._state
        headline = summary_line(
            self._input.node,
            self._pool,
            self._fault.value if self._fault else None,
            rung=s.rung.value if s.rung else None,
            outcome=s.outcome.value if s.outcome else None,
        )
        parts = [f"stage **{s.stage}**", f"rung **{s.rung or '-'}**"]
        if s.waiting_for:
            parts.append(f"waiting for **{s.waiting_for}**")
        if s.paused:
            parts.append("**PAUSED**")
        if self._dry_run:
            parts.append("dry run")
        if s.outcome:
            parts.append(f"outcome **{s.outcome}**")
        header = f"### {headline}\n\n" + " · ".join(parts)
        if s.jobs:
            header += f"\n\njobs: {describe_jobs(s.jobs)}"
            if s.checkpoint:
                header += f" · checkpoint: **{s.checkpoint}**"
        workflow.set_current_details(header + "\n\n" + s.record.summary())

    def _finish(self) -> NodeRemediationResult:
        s = self._state
        assert s.outcome is not None
        self._set_stage("closed")
        metrics.incident_closed(self._fault_value, s.outcome, self._pool, s.started_at)
        workflow.upsert_search_attributes([SA_OUTCOME.value_set(s.outcome.value)])
        now = workflow.now()
        return NodeRemediationResult(
            node=self._input.node,
            outcome=s.outcome,
            fault_class=self._fault,
            rungs_tried=s.record.rungs_tried(),
            attempts=s.record.attempts,
            started_at=s.started_at,
            ended_at=now,
            duration_s=(now - s.started_at).total_seconds(),
            replaced_by=s.replaced_by,
            escalation_reference=s.escalation_reference,
        )
