"""The workers benchmark reads identities from real histories."""

from __future__ import annotations

from temporalio.client import Client
from temporalio.worker import Worker

from bench.baseline_workflow import BaselineWorkflow, noop_activity
from bench.workers_history import trace


async def test_the_worker_that_ran_the_tasks_and_closed_the_workflow_is_named(
    dev_client: Client, task_queue: str
) -> None:
    async with Worker(
        dev_client,
        task_queue=task_queue,
        workflows=[BaselineWorkflow],
        activities=[noop_activity],
        identity="bench-worker-a",
    ):
        handle = await dev_client.start_workflow(
            BaselineWorkflow.run, 3, id=f"trace-{task_queue}", task_queue=task_queue
        )
        assert await handle.result() == 3
    history = await handle.fetch_history()

    found = trace(handle.id, history)

    assert found.closed_by == "bench-worker-a"
    assert found.activities == {"bench-worker-a": 3}
    assert set(found.workflow_tasks) == {"bench-worker-a"}
    assert found.workflow_tasks["bench-worker-a"] >= 4
    assert found.workflow_task_timeouts == 0
    assert found.activities_retried == 0


async def test_a_workflow_nothing_ran_yet_is_closed_by_nobody(
    dev_client: Client, task_queue: str
) -> None:
    # Started on a queue no worker polls: its first workflow task waits.
    handle = await dev_client.start_workflow(
        BaselineWorkflow.run, 1, id=f"open-{task_queue}", task_queue=task_queue
    )
    try:
        history = await handle.fetch_history()
    finally:
        await handle.terminate("test over")

    found = trace(handle.id, history)

    assert found.closed_by is None
    assert found.workflow_tasks == {}
    assert found.activities == {}
