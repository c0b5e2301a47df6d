"""The UI's list shows an incident's outcome while it cools down, and withdraws it on relapse."""

from __future__ import annotations

from datetime import timedelta

from temporalio.testing import WorkflowEnvironment

from gpu_remediation.search_attributes import SA_OUTCOME
from tests.conftest import assert_eventually
from tests.workflows.node_support import NodeHandle, cluster, policy, xid


async def _outcome(handle: NodeHandle) -> str | None:
    return (await handle.describe()).typed_search_attributes.get(SA_OUTCOME)


async def test_a_repaired_node_shows_repaired_during_cooldown_and_none_after_a_relapse(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    async with cluster(dev_env, task_queue) as c:
        handle = await c.report("gpu-75", xid(48, gpu=2), pol=policy(cooldown=timedelta(hours=1)))
        await assert_eventually(lambda: c.state(handle), lambda s: s.stage == "cooldown")
        await assert_eventually(lambda: _outcome(handle), lambda o: o == "repaired")
        metadata = await handle.query("__temporal_workflow_metadata")
        assert metadata.current_details.startswith(
            "### gpu-75 (pool gpu-pool): gpu_reset_required, repaired after gpu_reset\n"
        )

        await c.signal(handle, "gpu-75", xid(48, gpu=2))  # the fault comes back
        state = await assert_eventually(
            lambda: c.state(handle), lambda s: s.stage != "cooldown" and s.outcome is None
        )
        assert state.outcome is None
        await assert_eventually(lambda: _outcome(handle), lambda o: o is None)
