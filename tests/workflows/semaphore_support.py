"""Helpers shared by the semaphore tests: worker, starters and probes."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from activities.temporal import TemporalActivities
from gpu_remediation.ids import Signals, guard_workflow_id
from gpu_remediation.semaphore_models import (
    PermitGrant,
    PermitRelease,
    PermitRequest,
    SemaphoreInput,
    SemaphoreState,
)
from tests.workflows.holder_models import HolderInput, HolderReport, HolderStatus, RecordedGrants
from tests.workflows.semaphore_holders import GrantRecorderWorkflow, SemaphoreHolderWorkflow
from workflows.permit_guard import PermitGuardWorkflow
from workflows.replacement_semaphore import ReplacementSemaphoreWorkflow


def semaphore_worker(client: Client, task_queue: str, **options: Any) -> Worker:
    """A worker registering everything a holder needs, as production workers must.

    The semaphore and the guard are declared ``sandboxed=False`` for speed (ADR
    008); here they run inside the sandbox anyway, so every semaphore test also
    checks that their code still passes its restrictions (no clock, randomness
    or I/O of their own, no module state). ``options`` go to the ``Worker``.
    """
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[
            ReplacementSemaphoreWorkflow,
            PermitGuardWorkflow,
            SemaphoreHolderWorkflow,
            GrantRecorderWorkflow,
        ],
        activities=[TemporalActivities(client).ensure_semaphore],
        # Thirty holders start at once; the default slots would serialise them.
        max_concurrent_workflow_tasks=100,
        unsandboxed_workflow_runner=SandboxedWorkflowRunner(),
        **options,
    )


def new_semaphore_id() -> str:
    """A semaphore id of its own per test: tests share servers."""
    return f"test-semaphore/{uuid.uuid4()}"


async def start_semaphore(
    client: Client,
    task_queue: str,
    semaphore_id: str,
    capacity: int,
    continue_as_new_after_events: int | None = None,
    pool_capacity: int | None = None,
) -> WorkflowHandle[ReplacementSemaphoreWorkflow, None]:
    """Start the semaphore directly (holders' ensure_semaphore then finds it)."""
    extra = (
        {}
        if continue_as_new_after_events is None
        else {"continue_as_new_after_events": continue_as_new_after_events}
    )
    return await client.start_workflow(
        ReplacementSemaphoreWorkflow.run,
        SemaphoreInput(capacity=capacity, pool_capacity=pool_capacity, **extra),
        id=semaphore_id,
        task_queue=task_queue,
    )


async def semaphore_state(client: Client, semaphore_id: str) -> SemaphoreState:
    """Query the semaphore's current run."""
    handle = client.get_workflow_handle_for(ReplacementSemaphoreWorkflow.run, semaphore_id)
    return await handle.query(ReplacementSemaphoreWorkflow.state)


def holder_ids(state: SemaphoreState) -> list[str]:
    """Request ids holding a permit."""
    return [lease.request_id for lease in state.holders]


def waiter_ids(state: SemaphoreState) -> list[str]:
    """Request ids waiting, in FIFO order."""
    return [waiter.request_id for waiter in state.waiters]


async def start_holder(
    client: Client,
    task_queue: str,
    semaphore_id: str,
    request_id: str,
    *,
    workflow_id: str | None = None,
    capacity: int = 1,
    lease: timedelta = timedelta(hours=1),
    hold: timedelta | None = None,
    release: bool = True,
    leave_to_guard: bool = False,
    acquire_timeout: timedelta = timedelta(minutes=10),
) -> WorkflowHandle[SemaphoreHolderWorkflow, HolderReport]:
    """Start a test holder workflow (its id defaults to one derived from the request)."""
    return await client.start_workflow(
        SemaphoreHolderWorkflow.run,
        HolderInput(
            semaphore_workflow_id=semaphore_id,
            request_id=request_id,
            capacity=capacity,
            lease=lease,
            hold=hold,
            release=release,
            leave_to_guard=leave_to_guard,
            acquire_timeout=acquire_timeout,
        ),
        id=workflow_id or f"holder/{semaphore_id}/{request_id}",
        task_queue=task_queue,
    )


async def holder_status(
    handle: WorkflowHandle[SemaphoreHolderWorkflow, HolderReport],
) -> HolderStatus:
    """Whether the holder has requested, and whether it holds."""
    return await handle.query(SemaphoreHolderWorkflow.status)


def max_overlap(reports: Sequence[HolderReport]) -> int:
    """Most permits held at once according to the holders' own grant/release times.

    A holder sees its grant after the semaphore granted and releases before the
    semaphore frees the permit, so these intervals lie inside the semaphore's.
    At equal times releases count first.
    """
    events: list[tuple[float, int]] = []
    for report in reports:
        assert report.granted_at is not None
        assert report.released_at is not None
        events.append((report.granted_at.timestamp(), +1))
        events.append((report.released_at.timestamp(), -1))
    held = peak = 0
    for _, delta in sorted(events):
        held += delta
        peak = max(peak, held)
    return peak


async def start_recorder(
    client: Client, task_queue: str, workflow_id: str
) -> WorkflowHandle[GrantRecorderWorkflow, RecordedGrants]:
    """Start a workflow that only records the grants it receives."""
    return await client.start_workflow(
        GrantRecorderWorkflow.run, id=workflow_id, task_queue=task_queue
    )


async def recorded_grants(
    handle: WorkflowHandle[GrantRecorderWorkflow, RecordedGrants],
) -> list[PermitGrant]:
    """Grants the recorder run received so far."""
    return (await handle.query(GrantRecorderWorkflow.grants)).grants


async def request_permit(
    client: Client,
    semaphore_id: str,
    holder: WorkflowHandle[Any, Any],
    request_id: str,
    lease: timedelta = timedelta(hours=1),
    pool: str | None = None,
) -> None:
    """Send request_permit for ``holder``'s run directly, as a holder would."""
    assert holder.result_run_id is not None
    await client.get_workflow_handle(semaphore_id).signal(
        Signals.REQUEST_PERMIT,
        PermitRequest(
            holder_workflow_id=holder.id,
            holder_run_id=holder.result_run_id,
            request_id=request_id,
            lease=lease,
            pool=pool,
        ),
    )


async def release_permit(client: Client, semaphore_id: str, request_id: str) -> None:
    """Send release_permit directly."""
    await client.get_workflow_handle(semaphore_id).signal(
        Signals.RELEASE_PERMIT, PermitRelease(request_id=request_id, reason="test")
    )


async def end_semaphore_test(
    client: Client, semaphore_id: str, holders: dict[str, WorkflowHandle[Any, Any]]
) -> None:
    """Terminate what a time-skipping test leaves running: holders, guards, semaphore.

    The time-skipping server does not apply parent close policies, so guards of
    terminated holders stay open, and a semaphore still holding a lease keeps its
    expiry timer. A later test's time skip would fire that timer and leave a
    workflow task nobody polls, which stops the shared server's clock.

    Args:
        client: Client of the server the test used.
        semaphore_id: The test's semaphore.
        holders: Holder handles by the request id each one used.
    """
    ids = [semaphore_id]
    for request_id, holder in holders.items():
        ids += [holder.id, guard_workflow_id(holder.id, request_id)]
    for workflow_id in ids:
        await terminate_if_running(client, workflow_id)


async def terminate_if_running(client: Client, workflow_id: str) -> None:
    """Terminate a workflow a test left running; one never started is fine."""
    handle = client.get_workflow_handle(workflow_id)
    try:
        status = (await handle.describe()).status
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return
        raise
    if status != WorkflowExecutionStatus.RUNNING:
        return
    try:
        await handle.terminate("test over")
    except RPCError as err:
        # It ended between the describe and the terminate (a guard releasing).
        if err.status != RPCStatusCode.NOT_FOUND:
            raise


async def child_workflow_ids(handle: WorkflowHandle[Any, Any]) -> list[str]:
    """Ids of the children a workflow started (a holder's permit guards)."""
    return [
        event.start_child_workflow_execution_initiated_event_attributes.workflow_id
        for event in (await handle.fetch_history()).events
        if event.HasField("start_child_workflow_execution_initiated_event_attributes")
    ]
