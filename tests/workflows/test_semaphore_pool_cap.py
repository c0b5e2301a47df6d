"""Issue 35: a semaphore's per-pool cap holds a pool back and serves the next waiter."""

from __future__ import annotations

from temporalio.client import Client

from tests.conftest import assert_eventually
from tests.workflows.semaphore_support import (
    holder_ids,
    new_semaphore_id,
    release_permit,
    request_permit,
    semaphore_state,
    semaphore_worker,
    start_recorder,
    start_semaphore,
    waiter_ids,
)


async def test_a_pool_at_its_cap_waits_while_another_pool_is_served(
    dev_client: Client, task_queue: str
) -> None:
    semaphore_id = new_semaphore_id()
    async with semaphore_worker(dev_client, task_queue):
        await start_semaphore(dev_client, task_queue, semaphore_id, capacity=3, pool_capacity=1)
        holder = await start_recorder(dev_client, task_queue, f"{semaphore_id}/holder")
        await request_permit(dev_client, semaphore_id, holder, "a1", pool="a")
        await request_permit(dev_client, semaphore_id, holder, "a2", pool="a")
        await request_permit(dev_client, semaphore_id, holder, "b1", pool="b")

        state = await assert_eventually(
            lambda: semaphore_state(dev_client, semaphore_id),
            lambda s: len(s.holders) == 2,
            message="one holder per pool",
        )
        # a2 came before b1 but its pool is full: b1 is served, a2 keeps its place.
        assert holder_ids(state) == ["a1", "b1"]
        assert waiter_ids(state) == ["a2"]

        await release_permit(dev_client, semaphore_id, "a1")
        state = await assert_eventually(
            lambda: semaphore_state(dev_client, semaphore_id),
            lambda s: "a2" in holder_ids(s),
            message="a2 granted once a1 is released",
        )
        assert sorted(holder_ids(state)) == ["a2", "b1"]
        assert state.pool_capacity == 1


async def test_without_a_pool_cap_waiters_are_served_in_order_whatever_their_pool(
    dev_client: Client, task_queue: str
) -> None:
    semaphore_id = new_semaphore_id()
    async with semaphore_worker(dev_client, task_queue):
        await start_semaphore(dev_client, task_queue, semaphore_id, capacity=2)
        holder = await start_recorder(dev_client, task_queue, f"{semaphore_id}/holder")
        for request in ("a1", "a2", "b1"):
            await request_permit(dev_client, semaphore_id, holder, request, pool=request[0])
        state = await assert_eventually(
            lambda: semaphore_state(dev_client, semaphore_id),
            lambda s: len(s.holders) == 2 and len(s.waiters) == 1,
        )
        assert holder_ids(state) == ["a1", "a2"]
        assert waiter_ids(state) == ["b1"]
