"""ensure_semaphore starts the semaphore by its type name, which the worker must know."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import timedelta

from temporalio.client import Client
from temporalio.testing import ActivityEnvironment
from temporalio.worker import Worker

from activities.temporal import TemporalActivities
from gpu_remediation.contracts import EnsureSemaphoreInput
from gpu_remediation.ids import SEMAPHORE_WORKFLOW_TYPE, Queries
from gpu_remediation.semaphore_models import SemaphoreState
from workflows.replacement_semaphore import ReplacementSemaphoreWorkflow


async def test_ensure_semaphore_starts_a_semaphore_the_worker_runs(
    dev_client: Client, task_queue: str
) -> None:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, task_queue=task_queue)
    semaphore_id = f"test-semaphore/{uuid.uuid4()}"
    ensure = TemporalActivities(dev_client).ensure_semaphore
    async with Worker(dev_client, task_queue=task_queue, workflows=[ReplacementSemaphoreWorkflow]):
        await env.run(ensure, EnsureSemaphoreInput(capacity=3, workflow_id=semaphore_id))
        # Idempotent: the running semaphore keeps its capacity.
        await env.run(ensure, EnsureSemaphoreInput(capacity=5, workflow_id=semaphore_id))
        handle = dev_client.get_workflow_handle(semaphore_id)
        # A query is answered only by a worker that registered the started type.
        state = await handle.query(
            Queries.STATE, result_type=SemaphoreState, rpc_timeout=timedelta(seconds=10)
        )
        description = await handle.describe()
        await handle.terminate(reason="test over")
    assert state.capacity == 3
    assert description.workflow_type == SEMAPHORE_WORKFLOW_TYPE
