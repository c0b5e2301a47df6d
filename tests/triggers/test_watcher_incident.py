"""The watcher driving a real incident: the node workflow on the dev server with the test fleet."""

from __future__ import annotations

from temporalio.testing import WorkflowEnvironment

from gpu_remediation.ids import node_workflow_id
from gpu_remediation.models import Outcome
from tests.conftest import assert_eventually
from tests.triggers.watcher_support import (
    GPU_LABELS,
    cluster_watcher,
    emulator,
    incident_stage,
    running,
)
from tests.workflows.node_support import cluster
from workflows.node_remediation import NodeRemediationWorkflow


async def test_a_not_ready_node_that_recovers_during_the_incidents_grace_closes_as_transient(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    # The watcher's 1s grace passes; the node_not_ready class then waits its own
    # 5 minutes from the same start, and the recovery ends the incident untouched.
    with emulator() as emu:
        emu.store.put_node("gpu-t", labels=GPU_LABELS)
        async with cluster(dev_env, task_queue) as c:
            with emu.api_client() as api:
                async with running(cluster_watcher(api, c, task_queue, Ready="1s")):
                    emu.store.set_node_ready("gpu-t", False)
                    await assert_eventually(
                        lambda: incident_stage(c.client, c.name, "gpu-t"),
                        lambda stage: stage == "grace",
                        timeout=15,
                    )
                    emu.store.set_node_ready("gpu-t", True)
                    result = await c.client.get_workflow_handle_for(
                        NodeRemediationWorkflow.run, node_workflow_id(c.name, "gpu-t")
                    ).result()
    assert result.outcome == Outcome.TRANSIENT
    assert c.fleet.side_effects() == []
