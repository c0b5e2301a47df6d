"""A pause holds wherever the incident is: in grace, and in line for a replacement permit."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio.testing import WorkflowEnvironment

from gpu_remediation.ids import Activities as A
from gpu_remediation.ids import Updates
from gpu_remediation.models import FaultClass, Outcome
from gpu_remediation.policy import ReplacementPolicy
from gpu_remediation.workflow_models import NodeRemediationState, OperatorRequest
from tests.conftest import assert_eventually
from tests.doubles import FakeFleet
from tests.workflows.node_support import cluster, policy, with_fault_class, xid


async def test_a_pause_during_grace_holds_before_the_node_is_quarantined(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    pol = with_fault_class(policy(), FaultClass.GPU_RESET_REQUIRED, grace=timedelta(minutes=5))
    async with cluster(time_skipping_env, task_queue) as c:
        handle = await c.report("gpu-p1", xid(48), pol=pol)
        await assert_eventually(lambda: c.state(handle), lambda s: s.stage == "grace")
        await handle.execute_update(
            Updates.PAUSE, OperatorRequest(by="dana"), result_type=NodeRemediationState
        )
        # Grace ends while paused: nothing may touch the node.
        await time_skipping_env.sleep(timedelta(minutes=6))
        state = await assert_eventually(
            lambda: c.state(handle),
            lambda s: s.waiting_for is not None and "resume" in s.waiting_for,
        )
        assert state.paused
        assert c.fleet.called(A.QUARANTINE_NODE) == 0
        await handle.execute_update(
            Updates.RESUME, OperatorRequest(), result_type=NodeRemediationState
        )
        result = await handle.result()
    assert result.outcome == Outcome.REPAIRED
    assert c.fleet.called(A.QUARANTINE_NODE) == 1


async def test_a_paused_incident_gives_up_its_place_in_line_and_queues_again_on_resume(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    gate = asyncio.Event()
    fleet = FakeFleet(replace_gate=gate, pool_total=100)
    pol = policy(replacement=ReplacementPolicy(max_concurrent=1))
    async with cluster(dev_env, task_queue, fleet) as c:
        holder, waiter = await c.holder_and_waiter("gpu-p2", "gpu-p3", pol)
        await waiter.execute_update(
            Updates.PAUSE, OperatorRequest(by="erin"), result_type=NodeRemediationState
        )
        await assert_eventually(
            lambda: c.state(waiter),
            lambda s: s.waiting_for is not None and "resume" in s.waiting_for,
        )
        gate.set()  # the permit frees up while the waiter is paused
        assert (await holder.result()).outcome == Outcome.REPLACED
        deleted = [arg.node for name, arg in fleet.calls if name == A.DELETE_NODE_CLAIM]  # type: ignore[attr-defined]
        assert deleted == ["gpu-p2"]
        await waiter.execute_update(
            Updates.RESUME, OperatorRequest(), result_type=NodeRemediationState
        )
        assert (await waiter.result()).outcome == Outcome.REPLACED
    deleted = [arg.node for name, arg in fleet.calls if name == A.DELETE_NODE_CLAIM]  # type: ignore[attr-defined]
    assert deleted == ["gpu-p2", "gpu-p3"]
