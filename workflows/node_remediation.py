"""One durable incident per GPU node: triage, grace, and the remediation ladder.

A GPU node that reports a fault gets exactly one run of this workflow (its id
is derived from cluster and node; the first report rides in the start's input
or its signal, later ones arrive by signal, so duplicate alerts land in the
same run). The run walks the graded ladder:
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
    from gpu_remediation.ids import NODE_WORKFLOW_TYPE
    from gpu_remediation.models import FaultClass, Outcome, Rung
    from gpu_remediation.search_attributes import (
        SA_CLUSTER,
        SA_FAULT_CLASS,
        SA_NODE,
        SA_NODE_POOL,
    )
    from gpu_remediation.workflow_models import NodeRemediationInput, NodeRemediationResult
    from workflows import ladder, metrics

    # The stage and handler modules hold no module-level state, only the
    # methods this class inherits. Passed through, they are imported once per
    # worker instead of once per incident in its sandbox, which is most of an
    # open incident's memory (bench/memory.py).
    from workflows.node_handlers import OperatorHandlers
    from workflows.node_incident import failure_cause
    from workflows.node_jobs import JOB_STAGE_PATCH, JobCoordination
    from workflows.node_rungs import CorrectiveRungs

# How long a run waits for its first evidence when started without a signal.
FIRST_EVIDENCE_WAIT = timedelta(minutes=1)
# Outcomes after which the node is back in service and the cooldown applies.
IN_SERVICE = (Outcome.REPAIRED, Outcome.RECOVERED, Outcome.NO_FAULT_FOUND)
# Cooldown: a report that came in while an unverified step ran counts as the fault back.
STEP_REPORTS_PATCH = "cooldown-sees-step-reports"


@workflow.defn(name=NODE_WORKFLOW_TYPE)
class NodeRemediationWorkflow(OperatorHandlers, JobCoordination, CorrectiveRungs):
    """Remediates one GPU node along the policy's ladder."""

    @workflow.init
    def __init__(self, input: NodeRemediationInput) -> None:
        super().__init__(input)

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
            if self._record.cleared and self._classification is not None:
                # Every signal cleared before the grace began (the recovery arrived
                # while triage read the node): nothing is left to measure a grace
                # from. Histories never took this path: it used to fail every task.
                return self._closed_as_transient()
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
                return self._closed_as_transient()
            self._classify()

    def _closed_as_transient(self) -> bool:
        self._record.decide("grace", "closed as transient", "the evidence cleared")
        self._outcome = Outcome.TRANSIENT
        return False

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
        if rung == Rung.ESCALATE and not self._policy.escalation.quarantine_first:
            self._record.decide(
                "quarantine", "skipped", "policy: escalation hands the node over untouched"
            )
        elif not await self._quarantine_node():
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

    async def _quarantine_node(self) -> bool:
        """Cordon and taint so no new work lands; False if that failed."""
        self._set_rung(Rung.QUARANTINE)
        if self._dry_run:
            self._record.decide("quarantine", "would cordon and taint", "dry run", Rung.QUARANTINE)
            return True
        try:
            self._quarantine = await self._actions.quarantine()
        except ActivityError as err:
            self._record.decide("quarantine", "failed", failure_cause(err), Rung.QUARANTINE)
            return False
        self._record.decide("quarantine", "cordoned and tainted", "no new work lands here")
        await self._note(Rung.QUARANTINE, "quarantined: cordoned and tainted NoSchedule")
        return True

    async def _stop_gpu_work(self) -> bool:
        """Give the jobs their wait, then evict the GPU pods, once, before the first disruption.

        Returns:
            False when an operator's skip or abort cut the job wait (or came
            while the incident was paused after it): nothing was evicted and the
            ladder's next decision applies what they asked.
        """
        if self._drained:
            return True
        if workflow.patched(JOB_STAGE_PATCH) and not await self._coordinate_jobs():
            return False
        if not await self._hold_while_paused():
            return False
        self._drained = True
        rung = Rung.STOP_GPU_WORK
        if not self._policy.rung(rung).enabled:
            self._record.decide("stop_gpu_work", "skipped", "disabled by policy", rung)
            return True
        self._set_rung(rung)
        if self._dry_run:
            self._record.decide("stop_gpu_work", "would evict GPU pods", "dry run", rung)
            return True
        attempt = self._record.begin(rung)
        try:
            drained = await self._actions.drain()
            result = f"evicted {len(drained.evicted_uids)} pods"
            if drained.remaining:
                result += f", {len(drained.remaining)} still running"
        except ActivityError as err:
            result = f"drain failed: {failure_cause(err)}"
        self._record.end(attempt, result)
        self._record.decide("stop_gpu_work", result, "GPUs must be idle to diagnose or reset")
        return True

    async def _run_rung(self, rung: Rung) -> Rung:
        """Run a working rung and its verification; return the rung to try next."""
        if not await self._stop_gpu_work():
            return rung  # an operator cut the job wait: the next decision applies it
        self._set_rung(rung)
        self._last_rung = rung
        if self._dry_run:
            self._plan_dry_run(rung)
            return rung
        attempt = self._record.begin(rung)
        self._version_at_step = self._record.version
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

    async def _recovered_mid_ladder(self) -> bool:
        """When every signal cleared while the ladder ran: verify, and release on a pass."""
        if not self._record.cleared:
            return False
        self._record.decide("ladder", "signals cleared", "verifying before release", self._rung)
        if self._dry_run:
            self._outcome = Outcome.DRY_RUN
            return True
        if not await self._stop_gpu_work():
            return False
        if await self._verify(None, "after recovery"):
            await self._close_in_service(Outcome.RECOVERED, "the node recovered on its own")
            return True
        return False

    async def _cooldown(self) -> bool:
        """Stay open after a repair; True when the fault came back and the ladder reopens."""
        cooldown = self._policy.cooldown
        if self._outcome not in IN_SERVICE or cooldown <= timedelta(0):
            return False
        self._set_stage("cooldown")
        self._show_outcome()
        if self._reported_again_during_step():
            returned = "reported again while the unverified step ran"
        else:
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
            returned = f"within {cooldown} of {self._outcome}"
        self._classify()
        self._record.decide("cooldown", "fault returned", returned)
        self._outcome, self._quarantine, self._drained = None, None, False
        self._withdraw_outcome()
        self._jobs_coordinated, self._answer = False, None
        return True

    def _reported_again_during_step(self) -> bool:
        """Whether, with no verification, the fault was reported again while the step ran.

        Without a diagnostic the trigger's condition is the only check: a report
        that arrived after the step began (the watcher's report of the fault on
        the new boot can beat the cooldown when real latency is stretched) is the
        fault seen again, as one during the cooldown is.
        """
        if self._policy.verification.enabled or self._record.cleared:
            return False
        if self._record.version == self._version_at_step:
            return False
        return workflow.patched(STEP_REPORTS_PATCH)

    def _rung_after_relapse(self, start: Rung) -> Rung:
        """After a relapse in cooldown, climb past the rung that seemed to work."""
        if self._last_rung is None or self._classification is None:
            return start
        climbed = ladder.climb(self._last_rung, self._classification)
        return climbed if climbed.order > start.order else start
