"""The guard child releases its holder's request however the guard is stopped."""

from __future__ import annotations

from datetime import timedelta

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.testing import WorkflowEnvironment

from gpu_remediation.ids import Signals, guard_workflow_id
from gpu_remediation.semaphore_models import PermitGuardInput
from tests.conftest import assert_eventually
from tests.workflows.holder_models import HolderInput
from tests.workflows.semaphore_holders import SemaphoreHolderWorkflow
from tests.workflows.semaphore_support import (
    end_semaphore_test,
    holder_ids,
    holder_status,
    new_semaphore_id,
    request_permit,
    semaphore_state,
    semaphore_worker,
    start_holder,
    start_recorder,
    start_semaphore,
    waiter_ids,
)
from workflows.permit_guard import DISMISSED, RELEASED, SEMAPHORE_GONE, PermitGuardWorkflow


def guard_input(semaphore_id: str, holder_id: str, request_id: str) -> PermitGuardInput:
    return PermitGuardInput(
        semaphore_workflow_id=semaphore_id,
        request_id=request_id,
        holder_workflow_id=holder_id,
        holder_run_id="run",
    )


async def test_cancelled_guard_signals_the_release(dev_client: Client, task_queue: str) -> None:
    semaphore_id = new_semaphore_id()
    async with semaphore_worker(dev_client, task_queue):
        await start_semaphore(dev_client, task_queue, semaphore_id, capacity=1)
        holder = await start_recorder(dev_client, task_queue, f"{semaphore_id}/holder")
        await request_permit(dev_client, semaphore_id, holder, "held")
        await assert_eventually(
            lambda: semaphore_state(dev_client, semaphore_id), lambda s: holder_ids(s) == ["held"]
        )
        guard = await dev_client.start_workflow(
            PermitGuardWorkflow.run,
            guard_input(semaphore_id, holder.id, "held"),
            id=f"{semaphore_id}/guard",
            task_queue=task_queue,
        )

        await guard.cancel()

        assert await guard.result() == RELEASED
        state = await assert_eventually(
            lambda: semaphore_state(dev_client, semaphore_id), lambda s: not s.holders
        )
        assert "held" in state.recently_released


async def test_guard_completes_when_the_semaphore_is_gone(
    dev_client: Client, task_queue: str
) -> None:
    semaphore_id = new_semaphore_id()
    async with semaphore_worker(dev_client, task_queue):
        guard = await dev_client.start_workflow(
            PermitGuardWorkflow.run,
            guard_input(semaphore_id, "holder", "r"),
            id=f"{semaphore_id}/guard",
            task_queue=task_queue,
        )
        await guard.cancel()
        assert await guard.result() == SEMAPHORE_GONE


async def test_holder_release_dismisses_its_guard(dev_client: Client, task_queue: str) -> None:
    semaphore_id = new_semaphore_id()
    async with semaphore_worker(dev_client, task_queue):
        holder = await start_holder(dev_client, task_queue, semaphore_id, "r")
        await assert_eventually(lambda: holder_status(holder), lambda s: s.held)
        guard = dev_client.get_workflow_handle(guard_workflow_id(holder.id, "r"))
        assert (await guard.describe()).status == WorkflowExecutionStatus.RUNNING

        await holder.signal(SemaphoreHolderWorkflow.finish)
        report = await holder.result()

        assert report.acquired
        # release() waited for the guard: it is done before the holder completes.
        assert (await guard.describe()).status == WorkflowExecutionStatus.COMPLETED
        assert await guard.result() == DISMISSED
        assert not (await semaphore_state(dev_client, semaphore_id)).holders


async def test_a_dismissed_guard_sends_no_second_release(
    dev_client: Client, task_queue: str
) -> None:
    semaphore_id = new_semaphore_id()
    async with semaphore_worker(dev_client, task_queue):
        holder = await start_holder(dev_client, task_queue, semaphore_id, "r")
        await assert_eventually(lambda: holder_status(holder), lambda s: s.held)
        await holder.signal(SemaphoreHolderWorkflow.finish)
        await holder.result()

        history = await dev_client.get_workflow_handle(semaphore_id).fetch_history()
        releases = [
            event
            for event in history.events
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
            and event.workflow_execution_signaled_event_attributes.signal_name
            == Signals.RELEASE_PERMIT
        ]
        assert len(releases) == 1


async def test_a_holder_that_closes_leaves_its_permit_to_the_guard(
    dev_client: Client, task_queue: str
) -> None:
    semaphore_id = new_semaphore_id()
    async with semaphore_worker(dev_client, task_queue):
        holder = await start_holder(dev_client, task_queue, semaphore_id, "r", leave_to_guard=True)
        # "next" asks only once "r" holds: the order of two first requests is a race.
        await assert_eventually(lambda: holder_status(holder), lambda s: s.held)
        next_in_line = await start_holder(dev_client, task_queue, semaphore_id, "next")
        await assert_eventually(
            lambda: semaphore_state(dev_client, semaphore_id), lambda s: "next" in waiter_ids(s)
        )
        await holder.signal(SemaphoreHolderWorkflow.finish)
        assert (await holder.result()).acquired

        guard = dev_client.get_workflow_handle(guard_workflow_id(holder.id, "r"))
        # The holder's close cancelled the guard, and the guard released.
        assert await guard.result() == RELEASED
        await assert_eventually(lambda: holder_status(next_in_line), lambda s: s.held)
        history = await dev_client.get_workflow_handle(semaphore_id).fetch_history()
        senders = [
            event.workflow_execution_signaled_event_attributes.external_workflow_execution.workflow_id
            for event in history.events
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
            and event.workflow_execution_signaled_event_attributes.signal_name
            == Signals.RELEASE_PERMIT
        ]
        assert senders == [guard.id]  # one release, from the guard, none from the holder
        await next_in_line.signal(SemaphoreHolderWorkflow.finish)
        await next_in_line.result()


async def test_timed_out_holder_releases_through_its_guard(
    dev_client: Client, task_queue: str
) -> None:
    semaphore_id = new_semaphore_id()
    async with semaphore_worker(dev_client, task_queue):
        # A run timeout closes the holder without running any of its code.
        holder = await dev_client.start_workflow(
            SemaphoreHolderWorkflow.run,
            HolderInput(semaphore_workflow_id=semaphore_id, request_id="r"),
            id=f"{semaphore_id}/timing-out-holder",
            task_queue=task_queue,
            run_timeout=timedelta(seconds=2),
        )
        await assert_eventually(lambda: holder_status(holder), lambda s: s.held)
        state = await assert_eventually(
            lambda: semaphore_state(dev_client, semaphore_id),
            lambda s: not s.holders,
            timeout=8,
            message="timed-out holder's permit released",
        )
        assert "r" in state.recently_released
        with pytest.raises(WorkflowFailureError):
            await holder.result()


async def test_acquire_timeout_withdraws_the_request(
    own_time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    time_skipping_env = own_time_skipping_env
    ts_client = time_skipping_env.client
    semaphore_id = new_semaphore_id()
    async with semaphore_worker(ts_client, task_queue):
        # Skipping time while waiting for the result may run past the timeout:
        # the lease outlasts any skip this test makes.
        holder = await start_holder(
            ts_client, task_queue, semaphore_id, "holder", lease=timedelta(days=365)
        )
        await assert_eventually(lambda: holder_status(holder), lambda s: s.held)
        impatient = await start_holder(
            ts_client,
            task_queue,
            semaphore_id,
            "impatient",
            acquire_timeout=timedelta(minutes=5),
        )
        await assert_eventually(
            lambda: semaphore_state(ts_client, semaphore_id),
            lambda s: waiter_ids(s) == ["impatient"],
        )

        # Skip just past the timeout, then wait in real time for the holder to
        # finish withdrawing. Waiting on the result would let the server skip
        # on to the next timer (the holder's lease expiry) meanwhile.
        await time_skipping_env.sleep(timedelta(minutes=6))
        await assert_eventually(
            impatient.describe, lambda d: d.status == WorkflowExecutionStatus.COMPLETED
        )
        # Check the semaphore before asking for results: on this server a
        # result call skips time again, even for a closed workflow.
        state = await semaphore_state(ts_client, semaphore_id)
        assert not state.waiters
        assert holder_ids(state) == ["holder"]
        report = await impatient.result()
        assert not report.acquired
        guard = ts_client.get_workflow_handle(guard_workflow_id(impatient.id, "impatient"))
        # The holder withdrew the request itself and dismissed its guard.
        assert await guard.result() == DISMISSED
        await end_semaphore_test(
            ts_client, semaphore_id, {"holder": holder, "impatient": impatient}
        )
