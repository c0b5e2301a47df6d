"""A lease is reclaimed at its deadline when neither the holder nor its guard releases."""

from __future__ import annotations

from datetime import timedelta

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from tests.conftest import assert_eventually
from tests.workflows.semaphore_support import (
    end_semaphore_test,
    holder_ids,
    holder_status,
    new_semaphore_id,
    semaphore_state,
    semaphore_worker,
    start_holder,
    waiter_ids,
)


async def test_expired_lease_is_reclaimed_and_granted_to_next_waiter(
    time_skipping_env: WorkflowEnvironment, ts_client: Client, task_queue: str
) -> None:
    semaphore_id = new_semaphore_id()
    async with semaphore_worker(ts_client, task_queue):
        # A holder that is alive but never releases (a hang): only expiry helps.
        stuck = await start_holder(
            ts_client,
            task_queue,
            semaphore_id,
            "stuck",
            lease=timedelta(hours=2),
            release=False,
        )
        await assert_eventually(lambda: holder_status(stuck), lambda s: s.held)
        waiter = await start_holder(
            ts_client,
            task_queue,
            semaphore_id,
            "waiter",
            acquire_timeout=timedelta(days=1),
        )
        state = await assert_eventually(
            lambda: semaphore_state(ts_client, semaphore_id),
            lambda s: waiter_ids(s) == ["waiter"],
        )
        lease = state.holders[0]
        assert lease.expires_at - lease.granted_at == timedelta(hours=2)

        await time_skipping_env.sleep(timedelta(hours=2, minutes=1))

        state = await assert_eventually(
            lambda: semaphore_state(ts_client, semaphore_id),
            lambda s: holder_ids(s) == ["waiter"],
            message="expired lease reclaimed and handed on",
        )
        assert "stuck" in state.recently_released
        assert (await holder_status(waiter)).held
        await end_semaphore_test(ts_client, semaphore_id, {"stuck": stuck, "waiter": waiter})
