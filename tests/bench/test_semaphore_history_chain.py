"""The benchmarks' history reader follows the semaphore across continue-as-new."""

from __future__ import annotations

from temporalio.client import Client, WorkflowExecutionDescription, WorkflowExecutionStatus

from bench.semaphore_history import grant_problems, overtaken, read_semaphore_history
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
)


async def test_requests_grants_and_carried_waiters_are_read_from_every_run(
    dev_client: Client, task_queue: str
) -> None:
    semaphore_id = new_semaphore_id()
    async with semaphore_worker(dev_client, task_queue):
        semaphore = await start_semaphore(
            dev_client,
            task_queue,
            semaphore_id,
            capacity=1,
            # Above the ~26 events the four requests and a's grant make, so the
            # first continue-as-new comes from the nudges below, after all four.
            continue_as_new_after_events=40,
        )
        assert semaphore.result_run_id is not None
        first_run = dev_client.get_workflow_handle(semaphore_id, run_id=semaphore.result_run_id)
        # Awaited one by one, so the semaphore receives them in this order.
        for name in ("a", "b", "c", "d"):
            recorder = await start_recorder(dev_client, task_queue, f"{semaphore_id}/{name}")
            await request_permit(dev_client, semaphore_id, recorder, name)

        async def nudge_and_describe() -> WorkflowExecutionDescription:
            # The length is checked when the semaphore wakes: wake it with a
            # release of an unknown request.
            await release_permit(dev_client, semaphore_id, "nudge")
            return await first_run.describe()

        await assert_eventually(
            nudge_and_describe,
            lambda d: d.status == WorkflowExecutionStatus.CONTINUED_AS_NEW,
            interval=0.2,
            message="semaphore continued as new",
        )
        await release_permit(dev_client, semaphore_id, "a")
        await assert_eventually(
            lambda: semaphore_state(dev_client, semaphore_id),
            lambda s: holder_ids(s) == ["b"],
        )
        await release_permit(dev_client, semaphore_id, "b")
        await assert_eventually(
            lambda: semaphore_state(dev_client, semaphore_id),
            lambda s: holder_ids(s) == ["c"],
        )

        history = await read_semaphore_history(dev_client, semaphore_id, semaphore.result_run_id)

    assert history.runs >= 2
    assert history.runs == len(history.continued) + 1 == len(history.run_events)
    assert history.requests == ["a", "b", "c", "d"]
    assert history.grants == ["a", "b", "c"]
    assert overtaken(history.requests, history.grants) == []
    assert grant_problems(["a", "b", "c"], history.grants).none
    # The first continue-as-new happened while a held and b, c, d waited.
    assert history.continued[0].waiters_carried == 3
    assert history.continued[0].holders_carried == 1
    assert history.continued[0].input_bytes > 0
    assert history.max_waiters_carried == 3
    assert history.max_holders == 1
