"""The semaphore keeps one expiry timer, and none while no one holds a permit."""

from __future__ import annotations

from datetime import timedelta

from temporalio.api.enums.v1 import EventType
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
)


async def timer_events(client: Client, semaphore_id: str) -> tuple[int, int, int]:
    """Timers started, cancelled and fired in the semaphore's history."""
    history = await client.get_workflow_handle(semaphore_id).fetch_history()
    types = [event.event_type for event in history.events]
    return (
        types.count(EventType.EVENT_TYPE_TIMER_STARTED),
        types.count(EventType.EVENT_TYPE_TIMER_CANCELED),
        types.count(EventType.EVENT_TYPE_TIMER_FIRED),
    )


async def holders_become(client: Client, semaphore_id: str, expected: list[str]) -> None:
    """Wait until exactly ``expected`` (in any order) hold permits."""
    await assert_eventually(
        lambda: semaphore_state(client, semaphore_id),
        lambda s: sorted(holder_ids(s)) == sorted(expected),
        message=f"holders {expected}",
    )


async def test_grants_that_expire_later_keep_the_running_timer(
    dev_client: Client, task_queue: str
) -> None:
    semaphore_id = new_semaphore_id()
    async with semaphore_worker(dev_client, task_queue):
        await start_semaphore(dev_client, task_queue, semaphore_id, capacity=2)
        recorder = await start_recorder(dev_client, task_queue, f"{semaphore_id}/recorder")
        await request_permit(dev_client, semaphore_id, recorder, "first")
        await holders_become(dev_client, semaphore_id, ["first"])
        for cycle in range(5):
            request_id = f"cycle-{cycle}"
            await request_permit(dev_client, semaphore_id, recorder, request_id)
            await holders_become(dev_client, semaphore_id, ["first", request_id])
            await release_permit(dev_client, semaphore_id, request_id)
            await holders_become(dev_client, semaphore_id, ["first"])

        # One timer, for "first"'s deadline; the five later leases never replaced it.
        assert await timer_events(dev_client, semaphore_id) == (1, 0, 0)
        await recorder.terminate("test over")


async def test_an_earlier_deadline_replaces_the_timer_and_an_idle_semaphore_has_none(
    dev_client: Client, task_queue: str
) -> None:
    semaphore_id = new_semaphore_id()
    async with semaphore_worker(dev_client, task_queue):
        await start_semaphore(dev_client, task_queue, semaphore_id, capacity=2)
        recorder = await start_recorder(dev_client, task_queue, f"{semaphore_id}/recorder")
        await request_permit(dev_client, semaphore_id, recorder, "long", lease=timedelta(hours=2))
        await holders_become(dev_client, semaphore_id, ["long"])
        await request_permit(dev_client, semaphore_id, recorder, "short", lease=timedelta(hours=1))
        await holders_become(dev_client, semaphore_id, ["long", "short"])
        await release_permit(dev_client, semaphore_id, "short")
        await release_permit(dev_client, semaphore_id, "long")
        await holders_become(dev_client, semaphore_id, [])

        # Armed for "long", replaced for the earlier "short", cancelled when idle.
        await assert_eventually(
            lambda: timer_events(dev_client, semaphore_id), lambda t: t == (2, 2, 0)
        )
        await recorder.terminate("test over")
