"""The semaphore continues as new with its state intact (absolute lease deadlines)."""

from __future__ import annotations

import asyncio
from functools import partial

from temporalio.client import Client, WorkflowExecutionDescription, WorkflowExecutionStatus

from gpu_remediation.semaphore_models import MIN_CONTINUE_AS_NEW_AFTER_EVENTS
from tests.conftest import assert_eventually
from tests.workflows.semaphore_holders import SemaphoreHolderWorkflow
from tests.workflows.semaphore_support import (
    holder_ids,
    new_semaphore_id,
    recorded_grants,
    release_permit,
    request_permit,
    semaphore_state,
    semaphore_worker,
    start_holder,
    start_recorder,
    start_semaphore,
    waiter_ids,
)


async def test_state_survives_continue_as_new(dev_client: Client, task_queue: str) -> None:
    semaphore_id = new_semaphore_id()
    async with semaphore_worker(dev_client, task_queue):
        first = await start_semaphore(
            dev_client,
            task_queue,
            semaphore_id,
            capacity=2,
            continue_as_new_after_events=MIN_CONTINUE_AS_NEW_AFTER_EVENTS,
        )
        recorders = {
            name: await start_recorder(dev_client, task_queue, f"{semaphore_id}/{name}")
            for name in ("a", "b", "c", "d")
        }
        for name, recorder in recorders.items():
            await request_permit(dev_client, semaphore_id, recorder, name)

        first_run = dev_client.get_workflow_handle(semaphore_id, run_id=first.result_run_id)

        async def nudge_and_describe() -> WorkflowExecutionDescription:
            # The length is checked when the semaphore wakes; the task that
            # crosses the threshold may be its last for a while, so wake it with
            # a harmless release of an unknown request.
            await release_permit(dev_client, semaphore_id, "nudge")
            return await first_run.describe()

        await assert_eventually(
            nudge_and_describe,
            lambda d: d.status == WorkflowExecutionStatus.CONTINUED_AS_NEW,
            interval=0.2,
            message="semaphore continued as new",
        )
        state = await assert_eventually(
            lambda: semaphore_state(dev_client, semaphore_id),
            lambda s: len(s.holders) == 2 and len(s.waiters) == 2,
        )
        assert state.capacity == 2
        assert holder_ids(state) == ["a", "b"]
        assert waiter_ids(state) == ["c", "d"]
        # Deadlines are carried as they were granted, not restarted.
        for lease in state.holders:
            (grant,) = await assert_eventually(
                partial(recorded_grants, recorders[lease.request_id]),
                lambda grants: len(grants) == 1,
            )
            assert lease.expires_at == grant.expires_at

        # The new run serves the carried waiters.
        await release_permit(dev_client, semaphore_id, "a")
        state = await assert_eventually(
            lambda: semaphore_state(dev_client, semaphore_id),
            lambda s: holder_ids(s) == ["b", "c"],
        )
        assert waiter_ids(state) == ["d"]
        assert "a" in state.recently_released


async def test_holders_are_served_across_many_continue_as_new(
    dev_client: Client, task_queue: str
) -> None:
    semaphore_id = new_semaphore_id()
    async with semaphore_worker(dev_client, task_queue):
        first = await start_semaphore(
            dev_client,
            task_queue,
            semaphore_id,
            capacity=2,
            # A few continue-as-new under load; each costs the server's minimum
            # interval between runs (about a second on the dev server).
            continue_as_new_after_events=40,
        )
        handles = {
            f"r{i}": await start_holder(dev_client, task_queue, semaphore_id, f"r{i}")
            for i in range(6)
        }
        results = asyncio.gather(*(handle.result() for handle in handles.values()))
        finished: set[str] = set()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        while not results.done():
            assert loop.time() < deadline, "holders still running"
            state = await semaphore_state(dev_client, semaphore_id)
            assert len(state.holders) <= 2
            for lease in state.holders:
                if lease.request_id not in finished:
                    finished.add(lease.request_id)
                    await handles[lease.request_id].signal(SemaphoreHolderWorkflow.finish)
            await asyncio.sleep(0.02)
        reports = await results
        last = await dev_client.get_workflow_handle(semaphore_id).describe()

    assert all(report.acquired for report in reports)
    assert finished == set(handles)
    assert last.run_id != first.result_run_id
