"""The semaphore benchmark's requester: acquire, do ``hold_activities`` no-op
activities while holding (none by default), then close and leave the permit
to the guard, as a replaced node's incident does.

Grant and hand-over times are the holder's workflow time (the server's clock
at the workflow task that saw the grant, and at the one that closed), so the
intervals of all holders can be checked for overlap. Kept free of side
effects: the sandbox re-imports this module.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from bench.baseline_workflow import NOOP_ACTIVITY
    from bench.models import BenchHolderInput
    from gpu_remediation.ids import Signals
    from gpu_remediation.semaphore_models import PermitGrant
    from tests.workflows.holder_models import HolderReport
    from workflows.permit import ReplacementPermit


@workflow.defn(name="BenchHolder")
class BenchHolderWorkflow:
    """One requester of the replacement semaphore."""

    @workflow.init
    def __init__(self, input: BenchHolderInput) -> None:
        self._permit = ReplacementPermit(semaphore_workflow_id=input.semaphore_workflow_id)

    @workflow.run
    async def run(self, input: BenchHolderInput) -> HolderReport:
        """Acquire, hold, hand over; report when the permit was held."""
        acquired = await self._permit.acquire(
            input.request_id, input.lease, input.acquire_timeout, input.capacity
        )
        if not acquired:
            return HolderReport(acquired=False)
        granted_at = workflow.now()
        for step in range(input.hold_activities):
            await workflow.execute_activity(
                NOOP_ACTIVITY, step, start_to_close_timeout=timedelta(seconds=60)
            )
        released_at = workflow.now()
        # As a replaced node's incident does: it closes now, and closing hands
        # the permit back through the guard.
        self._permit.leave_to_guard()
        return HolderReport(acquired=True, granted_at=granted_at, released_at=released_at)

    @workflow.signal(name=Signals.PERMIT_GRANTED)
    def permit_granted(self, grant: PermitGrant) -> None:
        """Route the semaphore's grant to the permit helper."""
        self._permit.on_grant(grant)
