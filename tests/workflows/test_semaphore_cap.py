"""Thirty holders competing for three permits never hold more than three at once."""

from __future__ import annotations

import asyncio

from temporalio.client import Client

from tests.workflows.semaphore_holders import SemaphoreHolderWorkflow
from tests.workflows.semaphore_support import (
    max_overlap,
    new_semaphore_id,
    semaphore_state,
    semaphore_worker,
    start_holder,
    start_semaphore,
)

HOLDERS = 30
CAPACITY = 3


async def test_never_more_than_capacity_holders(dev_client: Client, task_queue: str) -> None:
    semaphore_id = new_semaphore_id()
    async with semaphore_worker(dev_client, task_queue):
        await start_semaphore(dev_client, task_queue, semaphore_id, CAPACITY)
        handles = await asyncio.gather(
            *(
                start_holder(dev_client, task_queue, semaphore_id, f"request-{i}")
                for i in range(HOLDERS)
            )
        )
        by_request = {f"request-{i}": handle for i, handle in enumerate(handles)}
        results = asyncio.gather(*(handle.result() for handle in handles))

        # Sample the semaphore and tell every holder seen to finish: holders hold
        # until told (server timers have about one second of granularity, too
        # coarse to pace thirty holders).
        sampled: list[int] = []
        finished: set[str] = set()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while not results.done():
            assert loop.time() < deadline, f"holders still running; sampled {sampled}"
            state = await semaphore_state(dev_client, semaphore_id)
            sampled.append(len(state.holders))
            for lease in state.holders:
                if lease.request_id not in finished:
                    finished.add(lease.request_id)
                    await by_request[lease.request_id].signal(SemaphoreHolderWorkflow.finish)
            await asyncio.sleep(0.02)
        reports = await results
        final = await semaphore_state(dev_client, semaphore_id)

    assert all(report.acquired for report in reports)
    assert finished == set(by_request)
    assert max(sampled) <= CAPACITY, sampled
    # The permits were really used in parallel, not one at a time.
    assert max(sampled) == CAPACITY, sampled
    assert max_overlap(reports) <= CAPACITY
    assert not final.holders
    assert not final.waiters
