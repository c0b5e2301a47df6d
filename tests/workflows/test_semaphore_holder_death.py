"""A holder that dies without releasing gives its permit (or its place) back within seconds."""

from __future__ import annotations

from temporalio.client import Client

from tests.conftest import assert_eventually
from tests.workflows.semaphore_support import (
    holder_ids,
    holder_status,
    new_semaphore_id,
    semaphore_state,
    semaphore_worker,
    start_holder,
    waiter_ids,
)


async def test_terminated_holder_permit_goes_to_next_waiter(
    dev_client: Client, task_queue: str
) -> None:
    semaphore_id = new_semaphore_id()
    async with semaphore_worker(dev_client, task_queue):
        first = await start_holder(dev_client, task_queue, semaphore_id, "first")
        await assert_eventually(
            lambda: holder_status(first), lambda s: s.held, message="first holder granted"
        )
        second = await start_holder(dev_client, task_queue, semaphore_id, "second")
        await assert_eventually(
            lambda: semaphore_state(dev_client, semaphore_id),
            lambda s: waiter_ids(s) == ["second"],
            message="second holder queued",
        )

        # Terminate skips every finally block: only the guard child can release.
        await first.terminate("simulated crash")

        await assert_eventually(
            lambda: holder_status(second),
            lambda s: s.held,
            timeout=5,
            message="permit handed to the next waiter",
        )
        state = await semaphore_state(dev_client, semaphore_id)
        assert holder_ids(state) == ["second"]
        assert "first" in state.recently_released


async def test_terminated_waiter_request_is_withdrawn(dev_client: Client, task_queue: str) -> None:
    semaphore_id = new_semaphore_id()
    async with semaphore_worker(dev_client, task_queue):
        holder = await start_holder(dev_client, task_queue, semaphore_id, "holder")
        await assert_eventually(lambda: holder_status(holder), lambda s: s.held)
        waiter = await start_holder(dev_client, task_queue, semaphore_id, "waiter")
        await assert_eventually(
            lambda: semaphore_state(dev_client, semaphore_id),
            lambda s: waiter_ids(s) == ["waiter"],
        )

        await waiter.terminate("simulated crash while waiting")

        state = await assert_eventually(
            lambda: semaphore_state(dev_client, semaphore_id),
            lambda s: not s.waiters,
            timeout=5,
            message="dead waiter withdrawn",
        )
        assert holder_ids(state) == ["holder"]
        assert "waiter" in state.recently_released
        # The live holder keeps its permit and releases normally.
        await holder.signal("finish")
        report = await holder.result()
        assert report.acquired
        await assert_eventually(
            lambda: semaphore_state(dev_client, semaphore_id), lambda s: not s.holders
        )
