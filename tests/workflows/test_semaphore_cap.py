"""Thirty holders competing for three permits never hold more than three at once."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio.client import Client

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
                start_holder(
                    dev_client,
                    task_queue,
                    semaphore_id,
                    f"request-{i}",
                    capacity=CAPACITY,
                    hold=timedelta(milliseconds=200),
                )
                for i in range(HOLDERS)
            )
        )

        sampled: list[int] = []
        done = asyncio.Event()

        async def sample() -> None:
            while not done.is_set():
                state = await semaphore_state(dev_client, semaphore_id)
                sampled.append(len(state.holders))
                await asyncio.sleep(0.02)

        sampler = asyncio.create_task(sample())
        try:
            reports = await asyncio.wait_for(
                asyncio.gather(*(handle.result() for handle in handles)), timeout=40
            )
        finally:
            done.set()
            await sampler
        final = await semaphore_state(dev_client, semaphore_id)

    assert all(report.acquired for report in reports)
    assert max(sampled) <= CAPACITY, sampled
    # The permits were really used in parallel, not one at a time.
    assert max(sampled) == CAPACITY, sampled
    assert max_overlap(reports) <= CAPACITY
    assert not final.holders
    assert not final.waiters
