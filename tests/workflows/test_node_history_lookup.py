"""The node workflow looks up the node's earlier incidents when the starter did not.

Runs on the dev server: the time-skipping server has no visibility queries.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.testing import WorkflowEnvironment

from gpu_remediation.ids import Activities as A
from gpu_remediation.ids import node_workflow_id
from gpu_remediation.models import Outcome, Rung
from gpu_remediation.policy import Policy
from tests.conftest import assert_eventually
from tests.workflows.node_support import Cluster, cluster, policy, xid


async def _closed_runs(c: Cluster, node: str) -> int:
    query = f"WorkflowId = '{node_workflow_id(c.name, node)}' AND ExecutionStatus != 'Running'"
    return len([e async for e in c.client.list_workflows(query)])


async def _incident(c: Cluster, node: str, code: int, pol: Policy | None = None) -> Outcome:
    before = await _closed_runs(c, node)
    handle = await c.report(
        node, xid(code), pol=pol or policy(), prior_incidents=None, prior_attempts=None
    )
    result = await handle.result()
    # Visibility lags the close by a moment; the next incident must see this one.
    await assert_eventually(lambda: _closed_runs(c, node), lambda n: n == before + 1)
    return result.outcome


async def test_the_third_incident_within_the_window_starts_at_replacement(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    async with cluster(dev_env, task_queue) as c:
        assert await _incident(c, "gpu-h1", 48) == Outcome.REPAIRED
        assert await _incident(c, "gpu-h1", 48) == Outcome.REPAIRED
        resets_before = c.fleet.called(A.RESET_GPUS)
        handle = await c.report(
            "gpu-h1", xid(48), pol=policy(), prior_incidents=None, prior_attempts=None
        )
        result = await handle.result()
        state = await c.state(handle)
    assert result.outcome == Outcome.REPLACED
    assert c.fleet.called(A.RESET_GPUS) == resets_before
    assert any("repeat offender" in d.reason for d in state.decisions)
    assert any("2 earlier incident(s)" in d.reason for d in state.decisions)


async def test_runs_that_never_touched_the_node_are_not_incidents(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    async with cluster(dev_env, task_queue) as c:
        for _ in range(3):
            assert await _incident(c, "gpu-h2", 13) == Outcome.APPLICATION_FAULT
        handle = await c.report(
            "gpu-h2", xid(48), pol=policy(), prior_incidents=None, prior_attempts=None
        )
        result = await handle.result()
        state = await c.state(handle)
    assert result.outcome == Outcome.REPAIRED
    assert Rung.GPU_RESET in result.rungs_tried
    assert Rung.REPLACE not in result.rungs_tried
    assert any("0 earlier incident(s)" in d.reason for d in state.decisions)


async def test_earlier_attempts_count_against_the_rung_budget(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    # Two repaired resets use up the default budget (2 resets per node per 24h), so the
    # next incident climbs past the reset even though the repeat rule is off.
    pol = policy(repeat_offender=policy().repeat_offender.model_copy(update={"enabled": False}))
    async with cluster(dev_env, task_queue) as c:
        for _ in range(2):
            assert await _incident(c, "gpu-h3", 48, pol) == Outcome.REPAIRED
        resets_before = c.fleet.called(A.RESET_GPUS)
        handle = await c.report(
            "gpu-h3", xid(48), pol=pol, prior_incidents=None, prior_attempts=None
        )
        result = await handle.result()
    assert c.fleet.called(A.RESET_GPUS) == resets_before
    assert Rung.REBOOT in result.rungs_tried


async def test_an_incident_that_continued_as_new_counts_once(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    pol = policy(cooldown=timedelta(seconds=3))
    async with cluster(dev_env, task_queue) as c:
        c.history_limit = 100
        node = "gpu-h5"
        first = await c.report(node, xid(48), pol=pol, prior_incidents=None, prior_attempts=None)
        await assert_eventually(lambda: c.state(first), lambda s: s.stage == "cooldown")
        for _ in range(40):  # signals the incident ignores fill its history all the same
            await c.signal(first, node, xid(48).model_copy(update={"cleared": True}))
        assert (await first.result()).outcome == Outcome.REPAIRED
        await assert_eventually(lambda: _closed_runs(c, node), lambda n: n >= 2)
        handle = await c.report(node, xid(48), pol=pol, prior_incidents=None, prior_attempts=None)
        state = await assert_eventually(
            lambda: c.state(handle), lambda s: any(d.action == "history read" for d in s.decisions)
        )
        await handle.result()
    assert any("1 earlier incident(s)" in d.reason for d in state.decisions)
