"""Guard child that gives a holder's permit back when the holder closes.

A holder that is terminated, times out or fails never runs its ``finally``
blocks, so it cannot release its permit itself. Each holder therefore starts
this guard as a child with ``ParentClosePolicy.REQUEST_CANCEL`` before asking
for a permit: whatever way the holder closes, the server cancels the guard,
and the guard signals ``release_permit`` (which also withdraws a request that
is still waiting).

A holder that releases its permit itself dismisses the guard with the
``dismiss_guard`` signal: the guard then ends without a release of its own,
which saves the semaphore a duplicate message and the guard a workflow task
per permit (ADR 006).
"""

from __future__ import annotations

import asyncio

from temporalio import workflow
from temporalio.exceptions import FailureError

with workflow.unsafe.imports_passed_through():
    from gpu_remediation.ids import PERMIT_GUARD_WORKFLOW_TYPE, Signals
    from gpu_remediation.semaphore_models import PermitGuardInput

RELEASED = "released"
DISMISSED = "dismissed"
SEMAPHORE_GONE = "semaphore not running"


# Outside the sandbox, like the semaphore (ADR 008): a guard runs two tasks per
# permit, and the sandbox's per-payload cost dominates them. The tests run it
# inside the sandbox (tests/workflows/semaphore_support.semaphore_worker).
@workflow.defn(name=PERMIT_GUARD_WORKFLOW_TYPE, sandboxed=False)
class PermitGuardWorkflow:
    """Waits until dismissed (ends) or cancelled (releases its holder's permit)."""

    @workflow.init
    def __init__(self, input: PermitGuardInput) -> None:
        self._dismissed = False

    @workflow.run
    async def run(self, input: PermitGuardInput) -> str:
        """Wait for dismissal or cancellation; on cancellation signal the release.

        Args:
            input: The semaphore and the holder's request to release.

        Returns:
            ``"dismissed"`` when the holder released the permit itself,
            ``"released"`` when the guard released it, or
            ``"semaphore not running"`` when there was nothing to release.
        """
        # No timer: a guard costs no history until its holder releases or closes.
        try:
            await workflow.wait_condition(lambda: self._dismissed)
        except asyncio.CancelledError:
            # Delivered once, so the release signal below still goes out.
            pass
        else:
            return DISMISSED
        return await self._release(input)

    @workflow.signal(
        name=Signals.DISMISS_GUARD,
        description="The holder released its permit itself: end without releasing.",
    )
    def dismiss(self) -> None:
        """Mark the guard dismissed; it ends in the same workflow task."""
        self._dismissed = True

    async def _release(self, input: PermitGuardInput) -> str:
        release = input.release()
        try:
            await workflow.get_external_workflow_handle(input.semaphore_workflow_id).signal(
                Signals.RELEASE_PERMIT, release
            )
        except FailureError as err:
            # With no semaphore running there is no permit to give back; a new
            # semaphore starts empty.
            workflow.logger.warning(
                "Could not release %s: semaphore %s unreachable: %s",
                input.request_id,
                input.semaphore_workflow_id,
                err,
            )
            return SEMAPHORE_GONE
        return RELEASED
