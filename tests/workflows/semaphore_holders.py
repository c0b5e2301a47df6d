"""Tiny holder workflows that exercise the semaphore as a node workflow would."""

from __future__ import annotations

import contextlib

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from gpu_remediation.ids import Signals
    from gpu_remediation.semaphore_models import PermitGrant
    from tests.workflows.holder_models import (
        HolderInput,
        HolderReport,
        HolderStatus,
        RecordedGrants,
    )
    from workflows.permit import ReplacementPermit


@workflow.defn
class SemaphoreHolderWorkflow:
    """Acquires a permit, holds it (for a while or until told), releases it."""

    @workflow.init
    def __init__(self, input: HolderInput) -> None:
        self._permit = ReplacementPermit(semaphore_workflow_id=input.semaphore_workflow_id)
        self._finish = False

    @workflow.run
    async def run(self, input: HolderInput) -> HolderReport:
        acquired = await self._permit.acquire(
            input.request_id, input.lease, input.acquire_timeout, input.capacity
        )
        if not acquired:
            return HolderReport(acquired=False)
        granted_at = workflow.now()
        if not input.release:
            # Only termination (or cancellation) ends this holder.
            await workflow.wait_condition(lambda: False)
        try:
            with contextlib.suppress(TimeoutError):
                await workflow.wait_condition(lambda: self._finish, timeout=input.hold)
            released_at = workflow.now()
        finally:
            # In ``finally``, as the node workflow's replacement stage releases:
            # this path also runs when the worker evicts the workflow.
            if not input.leave_to_guard:
                await self._permit.release("holder done")
        if input.leave_to_guard:
            self._permit.leave_to_guard()
        return HolderReport(acquired=True, granted_at=granted_at, released_at=released_at)

    @workflow.signal(name=Signals.PERMIT_GRANTED)
    def permit_granted(self, grant: PermitGrant) -> None:
        self._permit.on_grant(grant)

    @workflow.signal
    def finish(self) -> None:
        self._finish = True

    @workflow.query
    def status(self) -> HolderStatus:
        return HolderStatus(requested=self._permit.request_id is not None, held=self._permit.held)


@workflow.defn
class GrantRecorderWorkflow:
    """Records every grant signalled to this run, until told to finish."""

    def __init__(self) -> None:
        self._grants: list[PermitGrant] = []
        self._finish = False

    @workflow.run
    async def run(self) -> RecordedGrants:
        await workflow.wait_condition(lambda: self._finish)
        return RecordedGrants(grants=self._grants)

    @workflow.signal(name=Signals.PERMIT_GRANTED)
    def permit_granted(self, grant: PermitGrant) -> None:
        self._grants.append(grant)

    @workflow.signal
    def finish(self) -> None:
        self._finish = True

    @workflow.query
    def grants(self) -> RecordedGrants:
        return RecordedGrants(grants=self._grants)
