"""A recovery that happens while the watcher is down still reaches the node's incident."""

from __future__ import annotations

from temporalio.testing import WorkflowEnvironment

from gpu_remediation.ids import node_workflow_id
from gpu_remediation.models import Outcome
from tests.conftest import assert_eventually
from tests.triggers.watcher_support import (
    GPU_LABELS,
    Emulator,
    cluster_watcher,
    conditions_of,
    emulator,
    evidence_reports,
    incident_stage,
    running,
    terminate_incidents,
)
from tests.workflows.node_support import Cluster, cluster
from workflows.node_remediation import NodeRemediationWorkflow


async def watch_it_fail(emu: Emulator, api: object, c: Cluster, task_queue: str, node: str) -> None:
    """A first watcher sees ``node`` turn NotReady and stops once its incident is in grace."""
    async with running(cluster_watcher(api, c, task_queue, Ready="1s")):
        emu.store.set_node_ready(node, False)
        await assert_eventually(
            lambda: incident_stage(c.client, c.name, node),
            lambda stage: stage == "grace",
            timeout=15,
        )


async def test_a_node_that_recovered_while_the_watcher_was_down_is_cleared_by_the_next_watcher(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    # The incident is in its own grace when the watcher stops; the node
    # recovers unseen. The next watcher finds the incident holding
    # Ready=False on a Ready node and sends the recovery, so the incident
    # closes as transient instead of quarantining the node.
    with emulator() as emu:
        emu.store.put_node("gpu-r", labels=GPU_LABELS)
        async with cluster(dev_env, task_queue) as c:
            with emu.api_client() as api:
                await watch_it_fail(emu, api, c, task_queue, "gpu-r")
                emu.store.set_node_ready("gpu-r", True)
                async with running(cluster_watcher(api, c, task_queue, Ready="1s")):
                    result = await c.client.get_workflow_handle_for(
                        NodeRemediationWorkflow.run, node_workflow_id(c.name, "gpu-r")
                    ).result()
            reports = await evidence_reports(c.client, c.name, "gpu-r")
    assert result.outcome == Outcome.TRANSIENT
    assert c.fleet.side_effects() == []
    assert [e.cleared for e in conditions_of(reports)] == [False, True]


async def test_a_node_still_failing_after_the_restart_gets_no_recovery(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    with emulator() as emu:
        emu.store.put_node("gpu-s", labels=GPU_LABELS)
        async with cluster(dev_env, task_queue) as c:
            with emu.api_client() as api:
                await watch_it_fail(emu, api, c, task_queue, "gpu-s")
                async with running(cluster_watcher(api, c, task_queue, Ready="1s")) as second:

                    async def lookups() -> int:
                        return second.unseen_recoveries.lookups_done

                    # Its listing has been checked against the open incident:
                    # the problem goes on as its own episode, nothing is cleared.
                    await assert_eventually(lookups, lambda n: n >= 1, timeout=15)
                    [episode] = second.tracker.episodes()
                    assert episode.problem
                    assert [r.kind for r in second.delivered if r.kind == "clear"] == []
            reports = await evidence_reports(c.client, c.name, "gpu-s")
            await terminate_incidents(c.client, c.name, "gpu-s")
    # The new watcher reports the same episode again (same report id, which
    # the incident drops), and clears nothing.
    assert len({r.report_id for r in reports}) == 1
    assert not any(e.cleared for e in conditions_of(reports))
