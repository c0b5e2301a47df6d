"""Operator updates: capacity changes (validated, never revoking) and forced releases."""

from __future__ import annotations

from functools import partial

import pytest
from temporalio.client import Client, WorkflowUpdateFailedError

from gpu_remediation.ids import Updates
from gpu_remediation.semaphore_models import (
    MAX_CAPACITY,
    ForceReleaseInput,
    SemaphoreState,
    SetCapacityInput,
)
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
from workflows.replacement_semaphore import ReplacementSemaphoreWorkflow


async def test_set_capacity_rejects_zero_and_raising_it_grants_waiters(
    dev_client: Client, task_queue: str
) -> None:
    semaphore_id = new_semaphore_id()
    async with semaphore_worker(dev_client, task_queue):
        handle = await start_semaphore(dev_client, task_queue, semaphore_id, capacity=1)
        recorders = [
            await start_recorder(dev_client, task_queue, f"{semaphore_id}/node-{i}")
            for i in range(3)
        ]
        for i, recorder in enumerate(recorders):
            await request_permit(dev_client, semaphore_id, recorder, f"r{i}")
        await assert_eventually(
            lambda: semaphore_state(dev_client, semaphore_id), lambda s: len(s.waiters) == 2
        )

        for bad in (0, MAX_CAPACITY + 1):
            with pytest.raises(WorkflowUpdateFailedError) as rejected:
                await handle.execute_update(
                    ReplacementSemaphoreWorkflow.set_capacity, SetCapacityInput(capacity=bad)
                )
            assert f"capacity must be between 1 and {MAX_CAPACITY}, got {bad}" in str(
                rejected.value.cause
            )
        # Raw JSON, as the UI or CLI sends it, gets the same clear answer.
        with pytest.raises(WorkflowUpdateFailedError) as rejected:
            await handle.execute_update(
                Updates.SET_CAPACITY, {"capacity": 0}, result_type=SemaphoreState
            )
        assert "capacity must be between 1" in str(rejected.value.cause)
        assert (await semaphore_state(dev_client, semaphore_id)).capacity == 1

        state = await handle.execute_update(
            ReplacementSemaphoreWorkflow.set_capacity, SetCapacityInput(capacity=3)
        )
        # The returned state already includes the waiters granted by the change.
        assert state.capacity == 3
        assert holder_ids(state) == ["r0", "r1", "r2"]
        assert not state.waiters
        for i, recorder in enumerate(recorders):
            grants = await assert_eventually(
                partial(recorded_grants, recorder), lambda grants: bool(grants)
            )
            assert [grant.request_id for grant in grants] == [f"r{i}"]


async def test_lowering_capacity_revokes_no_lease(dev_client: Client, task_queue: str) -> None:
    semaphore_id = new_semaphore_id()
    async with semaphore_worker(dev_client, task_queue):
        handle = await start_semaphore(dev_client, task_queue, semaphore_id, capacity=2)
        recorder = await start_recorder(dev_client, task_queue, f"{semaphore_id}/node")
        for request_id in ("a", "b", "c"):
            await request_permit(dev_client, semaphore_id, recorder, request_id)
        await assert_eventually(
            lambda: semaphore_state(dev_client, semaphore_id), lambda s: waiter_ids(s) == ["c"]
        )

        state = await handle.execute_update(
            ReplacementSemaphoreWorkflow.set_capacity, SetCapacityInput(capacity=1)
        )
        assert state.capacity == 1
        assert holder_ids(state) == ["a", "b"]
        assert waiter_ids(state) == ["c"]

        # One release brings holders down to the capacity: still no new grant.
        await release_permit(dev_client, semaphore_id, "a")
        state = await assert_eventually(
            lambda: semaphore_state(dev_client, semaphore_id), lambda s: holder_ids(s) == ["b"]
        )
        assert waiter_ids(state) == ["c"]
        await release_permit(dev_client, semaphore_id, "b")
        await assert_eventually(
            lambda: semaphore_state(dev_client, semaphore_id),
            lambda s: holder_ids(s) == ["c"] and not s.waiters,
        )


async def test_force_release_frees_a_permit_and_rejects_unknown_ids(
    dev_client: Client, task_queue: str
) -> None:
    semaphore_id = new_semaphore_id()
    async with semaphore_worker(dev_client, task_queue):
        handle = await start_semaphore(dev_client, task_queue, semaphore_id, capacity=1)
        stuck = await start_recorder(dev_client, task_queue, f"{semaphore_id}/stuck")
        waiting = await start_recorder(dev_client, task_queue, f"{semaphore_id}/waiting")
        await request_permit(dev_client, semaphore_id, stuck, "stuck")
        await request_permit(dev_client, semaphore_id, waiting, "waiting")
        await assert_eventually(
            lambda: semaphore_state(dev_client, semaphore_id),
            lambda s: waiter_ids(s) == ["waiting"],
        )

        with pytest.raises(WorkflowUpdateFailedError) as rejected:
            await handle.execute_update(
                ReplacementSemaphoreWorkflow.force_release,
                ForceReleaseInput(request_id="nobody", reason="typo"),
            )
        assert "no holder or waiter with request id 'nobody'" in str(rejected.value.cause)

        state = await handle.execute_update(
            ReplacementSemaphoreWorkflow.force_release,
            ForceReleaseInput(request_id="stuck", reason="node workflow hung"),
        )
        assert holder_ids(state) == ["waiting"]
        assert "stuck" in state.recently_released
        await assert_eventually(
            lambda: recorded_grants(waiting),
            lambda grants: [g.request_id for g in grants] == ["waiting"],
        )
