"""What the Temporal UI shows: search attributes and current details."""

from temporalio.testing import WorkflowEnvironment

from gpu_remediation.search_attributes import (
    SA_FAULT_CLASS,
    SA_NODE,
    SA_NODE_POOL,
    SA_OUTCOME,
    SA_RUNG,
)
from tests.conftest import assert_eventually
from tests.workflows.node_support import cluster, xid


async def test_incidents_are_searchable_by_node_pool_fault_rung_and_outcome(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    async with cluster(dev_env, task_queue) as c:
        handle = await c.report("gpu-70", xid(79, gpu=2))
        await handle.result()
        query = (
            f"GpuCluster = '{c.name}' AND GpuNode = 'gpu-70' AND RemediationOutcome = 'repaired'"
        )

        async def listed() -> list[str]:
            return [w.id async for w in dev_env.client.list_workflows(query)]

        await assert_eventually(listed, lambda ids: ids == [handle.id])
        described = await handle.describe()
    attrs = described.typed_search_attributes
    assert attrs.get(SA_NODE) == "gpu-70"
    assert attrs.get(SA_NODE_POOL) == "gpu-pool"
    assert attrs.get(SA_FAULT_CLASS) == "gpu_fallen_off_bus"
    assert attrs.get(SA_RUNG) == "reboot"
    assert attrs.get(SA_OUTCOME) == "repaired"


async def test_current_details_tell_the_story(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    async with cluster(dev_env, task_queue) as c:
        handle = await c.report("gpu-71", xid(48, gpu=1))
        await handle.result()
        metadata = await handle.query("__temporal_workflow_metadata")
    details = metadata.current_details
    assert "gpu-71" in details
    assert "outcome **repaired**" in details
    assert "gpu_reset" in details
