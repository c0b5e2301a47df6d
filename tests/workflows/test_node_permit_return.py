"""A replaced node's incident gives its permit back by closing (ADR 007)."""

from temporalio.client import WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment

from gpu_remediation.ids import step_semaphore_id
from gpu_remediation.models import Outcome
from tests.conftest import assert_eventually
from tests.workflows.node_support import cluster, xid
from tests.workflows.semaphore_support import child_workflow_ids, semaphore_state
from workflows.permit_guard import RELEASED


async def test_a_replaced_nodes_permit_comes_back_through_its_guard(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    # On the dev server: the time-skipping server applies no parent close policy.
    async with cluster(dev_env, task_queue) as c:
        handle = await c.report("gpu-70", xid(79), prior_incidents=5)
        assert (await handle.result()).outcome == Outcome.REPLACED

        # The replacement's permit and the drain's (issue 35: held until the node
        # leaves service for good) both go back through their guards.
        guards = await child_workflow_ids(handle)
        assert len(guards) == 2
        assert sum(guard.endswith("/stop_gpu_work/1") for guard in guards) == 1
        for guard_id in guards:
            guard = c.client.get_workflow_handle(guard_id)
            assert await guard.result() == RELEASED
            assert (await guard.describe()).status == WorkflowExecutionStatus.COMPLETED
        for semaphore_id in (c.semaphore_id, step_semaphore_id(c.semaphore_id, "stop_gpu_work")):
            await assert_eventually(
                lambda s=semaphore_id: semaphore_state(c.client, s), lambda s: not s.holders
            )
