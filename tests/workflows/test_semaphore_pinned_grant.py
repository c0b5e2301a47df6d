"""Grants are pinned to the requesting run: a newer run of the same id never gets one."""

from __future__ import annotations

from temporalio.client import Client

from tests.conftest import assert_eventually
from tests.workflows.semaphore_holders import GrantRecorderWorkflow
from tests.workflows.semaphore_support import (
    holder_ids,
    new_semaphore_id,
    recorded_grants,
    request_permit,
    semaphore_state,
    semaphore_worker,
    start_recorder,
    start_semaphore,
)


async def test_grant_to_a_closed_run_is_reclaimed_not_given_to_the_new_run(
    dev_client: Client, task_queue: str
) -> None:
    semaphore_id = new_semaphore_id()
    node_workflow_id = f"{semaphore_id}/node-a"
    async with semaphore_worker(dev_client, task_queue):
        await start_semaphore(dev_client, task_queue, semaphore_id, capacity=1)
        old_run = await start_recorder(dev_client, task_queue, node_workflow_id)
        await old_run.signal(GrantRecorderWorkflow.finish)
        await old_run.result()
        # The node workflow id is reused by a newer run, as a new incident would.
        new_run = await start_recorder(dev_client, task_queue, node_workflow_id)
        other = await start_recorder(dev_client, task_queue, f"{semaphore_id}/node-b")

        # A request of the old run arrives late (e.g. a retried signal).
        await request_permit(dev_client, semaphore_id, old_run, "old-request")
        await request_permit(dev_client, semaphore_id, other, "other-request")

        state = await assert_eventually(
            lambda: semaphore_state(dev_client, semaphore_id),
            lambda s: holder_ids(s) == ["other-request"],
            message="undeliverable grant reclaimed and given to the next waiter",
        )
        assert "old-request" in state.recently_released
        await assert_eventually(
            lambda: recorded_grants(other),
            lambda grants: [g.request_id for g in grants] == ["other-request"],
        )
        # The old run's grant failed before the next waiter's was sent.
        assert await recorded_grants(new_run) == []
