"""The ladder's main paths, against the scripted fleet on the time-skipping server."""

from datetime import timedelta

from temporalio.testing import WorkflowEnvironment

from gpu_remediation.ids import Activities as A
from gpu_remediation.ids import Updates
from gpu_remediation.models import FaultClass, Outcome, Rung
from gpu_remediation.workflow_models import NodeRemediationState
from tests.conftest import assert_eventually
from tests.doubles import FakeFleet, failing_diag
from tests.workflows.node_support import (
    NodeHandle,
    cluster,
    condition,
    policy,
    with_fault_class,
    xid,
)


async def abort(handle: NodeHandle) -> None:
    await handle.execute_update(
        Updates.ABORT, {"reason": "seen enough"}, result_type=NodeRemediationState
    )


async def test_xid_79_goes_to_reboot_without_a_reset(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    async with cluster(time_skipping_env, task_queue) as c:
        handle = await c.report("gpu-1", xid(79, gpu=3))
        result = await handle.result()
    assert result.outcome == Outcome.REPAIRED
    assert c.fleet.called(A.RESET_GPUS) == 0
    assert c.fleet.called(A.REBOOT_NODE) == 1
    assert result.rungs_tried == [Rung.STOP_GPU_WORK, Rung.REBOOT]
    assert c.fleet.names().index(A.QUARANTINE_NODE) < c.fleet.names().index(A.REBOOT_NODE)
    assert c.fleet.called(A.RELEASE_NODE) == 1


async def test_xid_48_is_reset_verified_and_released(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    async with cluster(time_skipping_env, task_queue) as c:
        handle = await c.report("gpu-2", xid(48, gpu=5))
        result = await handle.result()
    assert result.outcome == Outcome.REPAIRED
    resets = [arg for name, arg in c.fleet.calls if name == A.RESET_GPUS]
    assert [r.gpu_indices for r in resets] == [[5]]  # type: ignore[attr-defined]
    assert c.fleet.called(A.REBOOT_NODE) == 0
    names = c.fleet.names()
    assert names.index(A.RESET_GPUS) < names.index(A.RUN_DIAGNOSTIC) < names.index(A.RELEASE_NODE)


async def test_unsupported_reset_climbs_to_reboot_then_failed_verify_to_replacement(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = FakeFleet(reset_status="not_supported", diagnostics=[failing_diag(error_id=4)])
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-3", xid(48, gpu=1))
        result = await handle.result()
    assert result.outcome == Outcome.REPLACED
    assert result.rungs_tried == [Rung.STOP_GPU_WORK, Rung.GPU_RESET, Rung.REBOOT, Rung.REPLACE]
    assert result.replaced_by == "gpu-3-new"
    assert fleet.called(A.DELETE_NODE_CLAIM) == 1
    # The node is gone: nothing to untaint.
    assert fleet.called(A.RELEASE_NODE) == 0


async def test_an_open_breaker_holds_the_quarantined_node_without_reboot_or_replacement(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = FakeFleet(pool_total=10, pool_unhealthy=6)
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-4", xid(79))
        state = await assert_eventually(
            lambda: c.state(handle),
            lambda s: s.stage == "held" and (s.waiting_for or "").startswith("the breaker"),
        )
        await abort(handle)
        result = await handle.result()
    assert result.outcome == Outcome.ABORTED
    assert fleet.called(A.REBOOT_NODE) == 0
    assert fleet.called(A.DELETE_NODE_CLAIM) == 0
    assert fleet.called(A.ESCALATE) == 0  # held, not handed over
    # Quarantined, then marked held (the mark keeps it from holding the breaker open alone).
    marks = [arg.held for name, arg in fleet.calls if name == A.QUARANTINE_NODE]  # type: ignore[attr-defined]
    assert marks[:2] == [False, True]
    assert any(d.stage == "breaker" and d.action == "open" for d in state.decisions)


async def test_a_held_node_is_released_when_its_signal_clears_and_nothing_is_left_cordoned(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    # A pool-wide outage: the node went NotReady with many others, then came back.
    fleet = FakeFleet(pool_total=10, pool_unhealthy=8)
    pol = with_fault_class(policy(), FaultClass.NODE_NOT_READY, grace=timedelta(0))
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-4b", condition("Ready", "Unknown"), pol=pol)
        await assert_eventually(lambda: c.state(handle), lambda s: s.stage == "held")
        await c.signal(handle, "gpu-4b", condition("Ready", "True", cleared=True))
        result = await handle.result()
    assert result.outcome == Outcome.RECOVERED
    assert fleet.side_effects().count(A.RELEASE_NODE) == 1
    for disruptive in (A.REBOOT_NODE, A.DELETE_NODE_CLAIM, A.DRAIN_GPU_PODS, A.ESCALATE):
        assert fleet.called(disruptive) == 0, disruptive


async def test_a_held_node_climbs_on_when_the_breaker_closes(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = FakeFleet(pool_total=10, pool_unhealthy=6)
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-4c", xid(79))
        await assert_eventually(lambda: c.state(handle), lambda s: s.stage == "held")
        fleet.pool_unhealthy = 1  # the pool healed; this node's fault is still there
        result = await handle.result()
        state = await c.state(handle)
    assert result.outcome == Outcome.REPAIRED
    assert fleet.called(A.REBOOT_NODE) == 1
    assert any(d.stage == "breaker" and d.action == "closed" for d in state.decisions)


async def test_a_host_fault_gone_when_the_breaker_closes_is_released_without_a_reboot(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    # The pool healed with this node before the watcher's clearing report came in.
    fleet = FakeFleet(pool_total=10, pool_unhealthy=8)  # the fake node reads Ready
    pol = with_fault_class(policy(), FaultClass.NODE_NOT_READY, grace=timedelta(0))
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-4e", condition("Ready", "Unknown"), pol=pol)
        await assert_eventually(lambda: c.state(handle), lambda s: s.stage == "held")
        fleet.pool_unhealthy = 1
        result = await handle.result()
    assert result.outcome == Outcome.RECOVERED
    assert fleet.called(A.REBOOT_NODE) == 0
    assert fleet.called(A.DRAIN_GPU_PODS) == 0


async def test_a_node_held_past_the_breakers_max_hold_is_handed_to_a_person(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = FakeFleet(pool_total=10, pool_unhealthy=6)
    pol = policy()
    pol = pol.model_copy(
        update={"breaker": pol.breaker.model_copy(update={"max_hold": timedelta(hours=2)})}
    )
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-4d", xid(79), pol=pol)
        result = await handle.result()
        state = await c.state(handle)
    assert result.outcome == Outcome.ESCALATED
    assert fleet.called(A.REBOOT_NODE) == 0
    assert any("a person must look" in d.reason for d in state.decisions)


async def test_application_xid_alone_never_touches_the_node(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    async with cluster(time_skipping_env, task_queue) as c:
        handle = await c.report("gpu-5", xid(13, gpu=0))
        result = await handle.result()
    assert result.outcome == Outcome.APPLICATION_FAULT
    assert c.fleet.side_effects() == [A.NOTIFY_WORKLOAD_OWNER]


async def test_repeat_offender_starts_at_replacement(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    async with cluster(time_skipping_env, task_queue) as c:
        handle = await c.report("gpu-6", xid(48), prior_incidents=2)
        result = await handle.result()
    assert result.outcome == Outcome.REPLACED
    assert c.fleet.called(A.RESET_GPUS) == 0
    assert c.fleet.called(A.REBOOT_NODE) == 0


async def test_a_node_that_vanished_closes_without_side_effects(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    async with cluster(time_skipping_env, task_queue, FakeFleet(node_exists=False)) as c:
        handle = await c.report("gpu-7", xid(79))
        result = await handle.result()
    assert result.outcome == Outcome.NODE_GONE
    assert c.fleet.side_effects() == []
