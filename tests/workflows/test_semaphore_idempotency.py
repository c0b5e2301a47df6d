"""Requests and releases are idempotent by request id; waiters are served FIFO."""

from __future__ import annotations

from temporalio.client import Client

from tests.conftest import assert_eventually
from tests.workflows.semaphore_support import (
    holder_ids,
    new_semaphore_id,
    recorded_grants,
    release_permit,
    request_permit,
    semaphore_state,
    semaphore_worker,
    start_recorder,
    start_semaphore,
    waiter_ids,
)


async def test_duplicate_request_takes_one_permit_and_resends_the_grant(
    dev_client: Client, task_queue: str
) -> None:
    semaphore_id = new_semaphore_id()
    async with semaphore_worker(dev_client, task_queue):
        await start_semaphore(dev_client, task_queue, semaphore_id, capacity=2)
        holder = await start_recorder(dev_client, task_queue, f"{semaphore_id}/holder")

        await request_permit(dev_client, semaphore_id, holder, "dup")
        await request_permit(dev_client, semaphore_id, holder, "dup")

        # The repeat re-sends the same grant (the holder may have missed it)...
        grants = await assert_eventually(
            lambda: recorded_grants(holder), lambda g: len(g) == 2, message="grant re-sent"
        )
        assert grants[0] == grants[1]
        # ...but takes no second permit.
        state = await semaphore_state(dev_client, semaphore_id)
        assert holder_ids(state) == ["dup"]
        assert not state.waiters


async def test_duplicate_waiting_request_queues_once_and_late_repeat_is_dropped(
    dev_client: Client, task_queue: str
) -> None:
    semaphore_id = new_semaphore_id()
    async with semaphore_worker(dev_client, task_queue):
        await start_semaphore(dev_client, task_queue, semaphore_id, capacity=1)
        holder = await start_recorder(dev_client, task_queue, f"{semaphore_id}/holder")
        others = [
            await start_recorder(dev_client, task_queue, f"{semaphore_id}/waiter-{i}")
            for i in range(3)
        ]
        await request_permit(dev_client, semaphore_id, holder, "holder")
        for i, other in enumerate(others):
            await request_permit(dev_client, semaphore_id, other, f"waiter-{i}")
        await request_permit(dev_client, semaphore_id, others[0], "waiter-0")

        state = await assert_eventually(
            lambda: semaphore_state(dev_client, semaphore_id), lambda s: len(s.waiters) == 3
        )
        assert holder_ids(state) == ["holder"]
        assert waiter_ids(state) == ["waiter-0", "waiter-1", "waiter-2"]

        # Releasing twice frees one permit: the first waiter, in FIFO order.
        await release_permit(dev_client, semaphore_id, "holder")
        await release_permit(dev_client, semaphore_id, "holder")
        state = await assert_eventually(
            lambda: semaphore_state(dev_client, semaphore_id),
            lambda s: holder_ids(s) == ["waiter-0"],
        )
        assert waiter_ids(state) == ["waiter-1", "waiter-2"]

        # A late repeat of the released request is dropped, not queued again.
        await request_permit(dev_client, semaphore_id, holder, "holder")
        await release_permit(dev_client, semaphore_id, "waiter-0")
        state = await assert_eventually(
            lambda: semaphore_state(dev_client, semaphore_id),
            lambda s: holder_ids(s) == ["waiter-1"],
        )
        assert waiter_ids(state) == ["waiter-2"]
        assert len(await recorded_grants(holder)) == 1


async def test_release_overtaking_its_request_drops_the_request(
    dev_client: Client, task_queue: str
) -> None:
    semaphore_id = new_semaphore_id()
    async with semaphore_worker(dev_client, task_queue):
        await start_semaphore(dev_client, task_queue, semaphore_id, capacity=1)
        holder = await start_recorder(dev_client, task_queue, f"{semaphore_id}/holder")

        # The guard and the holder send independently: the release may come first.
        await release_permit(dev_client, semaphore_id, "early")
        await request_permit(dev_client, semaphore_id, holder, "early")
        await request_permit(dev_client, semaphore_id, holder, "later")

        state = await assert_eventually(
            lambda: semaphore_state(dev_client, semaphore_id),
            lambda s: holder_ids(s) == ["later"],
        )
        assert not state.waiters
        assert "early" in state.recently_released
