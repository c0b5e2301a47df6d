"""The corrective rungs of the ladder and the diagnostic that verifies them.

Each helper runs one rung's activities and records what happened; the ladder in
``workflows.node_remediation`` decides which rung runs next.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from gpu_remediation import decision_log as log_words
    from gpu_remediation.models import EvidenceReport, Outcome, Rung
    from workflows import ladder, metrics

from workflows.node_compensation import Compensation
from workflows.node_incident import failure_cause


class CorrectiveRungs(Compensation):
    """GPU reset, reboot, replacement (with its permit) and the verification diagnostic."""

    async def _breaker_open(self, rung: Rung) -> bool:
        """Whether too much of the node's pool is unhealthy for ``rung`` to run."""
        manual = self._record.manual_request()
        if manual is not None and manual.force:
            self._record.decide(
                log_words.BREAKER_STAGE, "bypassed", f"forced by {manual.requested_by}", rung
            )
            return False
        pool = await self._actions.pool_health(self._pool)
        breaker = self._policy.breaker
        is_open = breaker.is_open(self._pool, pool.unhealthy, pool.total)
        metrics.breaker_checked(self._pool, is_open, pool.unhealthy, pool.total, rung)
        if not is_open:
            return False
        self._record.decide(
            log_words.BREAKER_STAGE,
            log_words.BREAKER_OPEN,
            f"{pool.unhealthy}/{pool.total} nodes of pool {self._pool} unhealthy (threshold "
            f"{breaker.threshold_for(self._pool):.0%}); {rung} blocked, node stays quarantined",
            rung,
        )
        return True

    async def _reset_gpus(self, attempt: int) -> bool:
        gpus = list(self._classification.gpu_indices) if self._classification else []
        try:
            result = await self._actions.reset_gpus(self._provider_id, gpus)
        except ActivityError as err:
            self._record.end(attempt, f"failed: {failure_cause(err)}")
            self._record.decide("gpu_reset", "failed", failure_cause(err), Rung.GPU_RESET)
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
            self._record.end(attempt, f"failed: {failure_cause(err)}")
            self._record.decide("reboot", "failed", failure_cause(err), Rung.REBOOT)
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
            self._record.decide(
                log_words.REPLACE_STAGE, "permit bypassed", f"forced by {manual.requested_by}"
            )
        elif not await self._take_permit(attempt):
            return False
        replaced = None
        try:
            asked_at = workflow.now()
            deleted = await self._actions.delete_node_claim(self._provider_id)
            self._record.decide(
                log_words.REPLACE_STAGE,
                log_words.deleted_node_claim(deleted.node_claim),
                "it was already gone"
                if deleted.already_gone
                else "Karpenter drains and terminates",
            )
            replaced = await self._actions.wait_for_replacement(self._pool, asked_at)
        except ActivityError as err:
            self._record.end(attempt, f"failed: {failure_cause(err)}")
            self._record.decide(
                log_words.REPLACE_STAGE, log_words.FAILED, failure_cause(err), Rung.REPLACE
            )
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
        await self._admission_of_replacement(replaced.new_node)
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
            self._record.decide(
                log_words.REPLACE_STAGE, "no permit", f"none within {wait}", Rung.REPLACE
            )
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
            self._record.decide(
                "verify", "diagnostic could not run", failure_cause(err), self._rung
            )
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
