"""Compensation in one place: give the permit back, untaint, uncordon, close.

Every path that ends an incident with the node back in service, replaced or
aborted goes through these helpers, so what quarantine did is undone exactly
once and only that.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from gpu_remediation import decision_log as log_words
    from gpu_remediation.models import Outcome, Rung
    from workflows import metrics

from workflows.node_admission_handoff import AdmissionHandoff
from workflows.node_incident import failure_cause


class Compensation(AdmissionHandoff):
    """Undoes what the incident did to the node, in one place."""

    async def _note(self, rung: Rung | None, message: str, *, warning: bool = False) -> None:
        """Tell the story on the node (annotation + event) so kubectl shows it."""
        if self._dry_run:
            return
        try:
            await self._actions.record(rung, self._fault, message, warning=warning)
        except ActivityError as err:
            # The history has the step; a missing node event must not stop a
            # repair, so the failure is logged in the decision log instead.
            self._record.decide("record", "could not record on the node", failure_cause(err), rung)

    async def _close_in_service(self, outcome: Outcome, reason: str) -> None:
        """Return the node to service; if release fails, escalate instead."""
        self._record.decide("release", outcome.value, reason, self._rung)
        await self._admission_before_release()
        if await self._release(uncordon=True):
            self._outcome = outcome
            metrics.back_in_service(self._fault_value, outcome, self._started_at)
        else:
            self._skip_to = Rung.ESCALATE

    def _close_replaced(self) -> None:
        self._quarantine = None  # the node is gone: nothing to release
        self._outcome = Outcome.REPLACED
        metrics.back_in_service(self._fault_value, Outcome.REPLACED, self._started_at)
        self._record.decide(
            log_words.REPLACE_STAGE,
            log_words.REPLACED,
            f"new node {self._replaced_by or 'unknown'}",
        )

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
            self._record.decide("release", "failed; node stays quarantined", failure_cause(err))
            return False
        self._quarantine = None
        self._record.decide(
            "release",
            "released",
            f"untainted: {result.taint_removed}, uncordoned: {result.uncordoned}",
        )
        await self._note(None, "returned to service" if result.uncordoned else "quarantine lifted")
        return True
