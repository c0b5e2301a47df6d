"""Guard child that gives a holder's permit back when the holder closes.

A holder that is terminated, times out or fails never runs its ``finally``
blocks, so it cannot release its permit itself. Each holder therefore starts
this guard as a child with ``ParentClosePolicy.REQUEST_CANCEL`` before asking
for a permit: whatever way the holder closes, the server cancels the guard,
and the guard signals ``release_permit`` (which also withdraws a request that
is still waiting). The holder's own ``release`` cancels the guard too; the
repeated release is idempotent at the semaphore.
"""

from __future__ import annotations

import asyncio
import contextlib

from temporalio import workflow
from temporalio.exceptions import FailureError

with workflow.unsafe.imports_passed_through():
    from gpu_remediation.ids import Signals
    from gpu_remediation.semaphore_models import PermitGuardInput, PermitRelease

RELEASED = "released"
SEMAPHORE_GONE = "semaphore not running"


@workflow.defn
class PermitGuardWorkflow:
    """Waits until cancelled, then releases its holder's permit."""

    @workflow.run
    async def run(self, input: PermitGuardInput) -> str:
        """Wait for cancellation, then signal the release.

        Args:
            input: The semaphore and the holder's request to release.

        Returns:
            ``"released"``, or ``"semaphore not running"`` when there was
            nothing to release.
        """
        # Cancellation is the only way out of this wait (no timer: a guard costs
        # no history until its holder closes). It is delivered once, so the
        # release signal below still goes out.
        with contextlib.suppress(asyncio.CancelledError):
            await workflow.wait_condition(lambda: False)
        release = PermitRelease(
            request_id=input.request_id,
            reason=f"guard: holder {input.holder_workflow_id}/{input.holder_run_id} closed",
        )
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
