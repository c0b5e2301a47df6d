"""Issue 35: every disruptive step has a fleet-wide (and per-pool) cap.

A storm of signals quarantines every node it names but drains, resets and
reboots at most the budget at once; the others wait quarantined for a permit,
and go back to service if their signals clear while they wait.
"""

import asyncio
from datetime import timedelta

from temporalio.testing import WorkflowEnvironment

from gpu_remediation.ids import Activities as A
from gpu_remediation.ids import Updates
from gpu_remediation.models import FaultClass, Outcome, Rung
from gpu_remediation.policy import DisruptionPolicy, Policy, StepBudget
from gpu_remediation.workflow_models import NodeRemediationState, RetryStepInput
from tests.conftest import assert_eventually
from tests.doubles import FakeFleet
from tests.workflows.node_support import (
    cluster,
    condition,
    policy,
    with_fault_class,
    with_rung,
    xid,
)


def budgets(**steps: StepBudget) -> Policy:
    return policy(disruption=DisruptionPolicy(**steps))


async def test_a_storm_reboots_at_most_the_fleet_budget_at_once(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    gate = asyncio.Event()
    fleet = FakeFleet(reboot_gate=gate, pool_total=100)
    pol = budgets(reboot=StepBudget(fleet=1))
    async with cluster(dev_env, task_queue, fleet) as c:
        first = await c.report("gpu-s1", xid(79), pol=pol)
        await assert_eventually(lambda: c.state(first), lambda _: fleet.rebooting == 1)
        second = await c.report("gpu-s2", xid(79), pol=pol)
        await assert_eventually(
            lambda: c.state(second), lambda s: s.waiting_for == "a reboot permit"
        )
        assert fleet.reboots == 1
        gate.set()
        outcomes = [(await first.result()).outcome, (await second.result()).outcome]
    assert outcomes == [Outcome.REPAIRED, Outcome.REPAIRED]
    assert fleet.reboots == 2
    assert fleet.max_rebooting == 1


async def test_a_drain_permit_is_held_until_the_node_is_back_in_service(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    gate = asyncio.Event()
    fleet = FakeFleet(reboot_gate=gate, pool_total=100)
    pol = budgets(stop_gpu_work=StepBudget(fleet=1))
    async with cluster(dev_env, task_queue, fleet) as c:
        first = await c.report("gpu-d1", xid(79), pol=pol)
        await assert_eventually(lambda: c.state(first), lambda _: fleet.rebooting == 1)
        second = await c.report("gpu-d2", xid(79), pol=pol)
        await assert_eventually(
            lambda: c.state(second), lambda s: s.waiting_for == "a stop_gpu_work permit"
        )
        # The first node is drained and rebooting: the second is quarantined, not drained.
        assert fleet.called(A.DRAIN_GPU_PODS) == 1
        assert fleet.called(A.QUARANTINE_NODE) == 2
        gate.set()
        assert (await first.result()).outcome == Outcome.REPAIRED
        assert (await second.result()).outcome == Outcome.REPAIRED
    assert fleet.called(A.DRAIN_GPU_PODS) == 2


async def test_a_node_whose_signals_clear_while_it_waits_goes_back_to_service_undrained(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    gate = asyncio.Event()
    fleet = FakeFleet(reboot_gate=gate, pool_total=100)
    pol = with_fault_class(
        budgets(stop_gpu_work=StepBudget(fleet=1)), FaultClass.NODE_NOT_READY, grace=timedelta(0)
    )
    async with cluster(dev_env, task_queue, fleet) as c:
        first = await c.report("gpu-c1", xid(79), pol=pol)
        await assert_eventually(lambda: c.state(first), lambda _: fleet.rebooting == 1)
        # A host fault: its check needs no drain, so it is released as soon as it clears.
        second = await c.report("gpu-c2", condition("Ready", "False"), pol=pol)
        await assert_eventually(
            lambda: c.state(second),
            lambda s: s.waiting_for == "a stop_gpu_work permit",
            timeout=30,
        )
        await c.signal(second, "gpu-c2", condition("Ready", "True", cleared=True))
        assert (await second.result()).outcome == Outcome.RECOVERED
        gate.set()
        assert (await first.result()).outcome == Outcome.REPAIRED
    drained = [arg.node for name, arg in fleet.calls if name == A.DRAIN_GPU_PODS]  # type: ignore[attr-defined]
    assert drained == ["gpu-c1"]


async def test_a_handed_over_node_gives_its_drain_permit_back_and_takes_it_again_on_retry(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    # The reboot fails and replacement is off: the node is handed to a person,
    # who no longer counts against the drain budget, until they retry.
    gate = asyncio.Event()
    fleet = FakeFleet(reboot_gate=gate, pool_total=100, fail={A.REBOOT_NODE})
    pol = with_rung(budgets(stop_gpu_work=StepBudget(fleet=1)), Rung.REPLACE, enabled=False)
    async with cluster(dev_env, task_queue, fleet) as c:
        first = await c.report("gpu-h1", xid(79), pol=pol)
        await assert_eventually(
            lambda: c.state(first),
            lambda s: s.rung == Rung.ESCALATE and s.waiting_for is not None,
        )
        fleet.fail.clear()
        second = await c.report("gpu-h2", xid(79), pol=pol)
        await assert_eventually(lambda: c.state(second), lambda _: fleet.rebooting == 1)
        await first.execute_update(
            Updates.RETRY_STEP, RetryStepInput(), result_type=NodeRemediationState
        )
        await assert_eventually(
            lambda: c.state(first), lambda s: s.waiting_for == "a stop_gpu_work permit"
        )
        assert fleet.rebooting == 1
        gate.set()
        assert (await second.result()).outcome == Outcome.REPAIRED
        assert (await first.result()).outcome == Outcome.REPAIRED
    assert fleet.max_rebooting == 1
    assert fleet.called(A.DRAIN_GPU_PODS) == 2, "the first node's jobs were stopped once"
