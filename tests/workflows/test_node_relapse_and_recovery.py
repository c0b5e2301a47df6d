"""Cooldown relapses, recovery mid-ladder, unknown evidence and attempt limits."""

from datetime import timedelta

from temporalio.testing import WorkflowEnvironment

from gpu_remediation.ids import Activities as A
from gpu_remediation.ids import Updates
from gpu_remediation.models import FaultClass, Outcome, Rung
from gpu_remediation.workflow_models import NodeRemediationState, RungAttempt
from tests.conftest import assert_eventually
from tests.doubles import FakeFleet, failing_diag
from tests.workflows.node_support import (
    cluster,
    condition,
    manual,
    policy,
    with_fault_class,
    with_rung,
    xid,
)


async def test_a_fault_returning_within_cooldown_climbs_past_the_rung_that_seemed_to_work(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    pol = policy(cooldown=timedelta(hours=1))
    async with cluster(time_skipping_env, task_queue) as c:
        handle = await c.report("gpu-30", xid(48, gpu=1), pol=pol)
        await assert_eventually(lambda: c.state(handle), lambda s: s.stage == "cooldown")
        assert c.fleet.called(A.RESET_GPUS) == 1
        await c.signal(handle, "gpu-30", xid(48, gpu=1))
        result = await handle.result()
    assert result.outcome == Outcome.REPAIRED
    assert c.fleet.called(A.RESET_GPUS) == 1
    assert c.fleet.called(A.REBOOT_NODE) == 1
    assert c.fleet.called(A.QUARANTINE_NODE) == 2


async def test_a_quiet_cooldown_closes_the_incident_as_repaired(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    async with cluster(time_skipping_env, task_queue) as c:
        handle = await c.report("gpu-31", xid(48), pol=policy(cooldown=timedelta(hours=1)))
        result = await handle.result()
    assert result.outcome == Outcome.REPAIRED
    assert result.duration_s >= 3600


async def test_signals_clearing_mid_ladder_verify_and_release_the_node(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    pol = with_rung(policy(), Rung.REBOOT, requires_approval=True)
    pol = with_fault_class(pol, FaultClass.NODE_NOT_READY, grace=timedelta(0))
    async with cluster(time_skipping_env, task_queue) as c:
        handle = await c.report("gpu-32", condition("Ready", "Unknown"), pol=pol)
        await assert_eventually(
            lambda: c.state(handle), lambda s: s.waiting_for == "approval of reboot"
        )
        await c.signal(handle, "gpu-32", condition("Ready", "True", cleared=True))
        result = await handle.result()
        state = await c.state(handle)
    assert result.outcome == Outcome.RECOVERED
    assert c.fleet.called(A.REBOOT_NODE) == 0
    # A host fault is verified by the node being Ready, not by a GPU diagnostic.
    assert c.fleet.called(A.RUN_DIAGNOSTIC) == 0
    actions = [(d.stage, d.action) for d in state.decisions]
    assert actions.index(("verify", "node_ready pass")) < actions.index(("release", "released"))


async def test_unknown_evidence_diagnoses_and_never_replaces_on_its_own(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    # Diagnostics keep failing without naming a known fault.
    fleet = FakeFleet(diagnostics=[failing_diag(error_id=9999)] * 5)
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-33", xid(999))
        result = await handle.result()
    assert result.outcome == Outcome.ESCALATED
    assert result.rungs_tried[:2] == [Rung.STOP_GPU_WORK, Rung.DIAGNOSE]
    assert fleet.called(A.DELETE_NODE_CLAIM) == 0
    assert fleet.called(A.ESCALATE) == 1


async def test_unknown_evidence_with_a_clean_diagnostic_returns_the_node(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    async with cluster(time_skipping_env, task_queue) as c:
        handle = await c.report("gpu-34", xid(999))
        result = await handle.result()
    assert result.outcome == Outcome.NO_FAULT_FOUND
    assert c.fleet.called(A.RESET_GPUS) == 0
    assert c.fleet.called(A.RELEASE_NODE) == 1


async def test_a_rung_past_its_attempt_limit_is_passed_over(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    pol = with_rung(policy(), Rung.REBOOT, max_attempts=1, window=timedelta(days=1))
    async with cluster(time_skipping_env, task_queue) as c:
        earlier = (await time_skipping_env.get_current_time()) - timedelta(hours=3)
        reboot = RungAttempt(rung=Rung.REBOOT, started_at=earlier, ended_at=earlier, result="ok")
        handle = await c.report("gpu-35", xid(79), pol=pol, prior_attempts=[reboot])
        result = await handle.result()
        state = await c.state(handle)
    assert c.fleet.called(A.REBOOT_NODE) == 0
    assert result.outcome == Outcome.REPLACED
    assert any("attempt limit" in d.reason for d in state.decisions)


async def test_a_forced_manual_replace_bypasses_the_breaker_and_is_recorded(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = FakeFleet(pool_total=4, pool_unhealthy=3)
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-36", manual("replace", force=True, by="frank"))
        result = await handle.result()
        state = await c.state(handle)
    assert result.outcome == Outcome.REPLACED
    assert any(d.action == "bypassed" and "frank" in d.reason for d in state.decisions)


async def test_a_manual_replace_without_force_obeys_the_breaker(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = FakeFleet(pool_total=4, pool_unhealthy=3)
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-37", manual("replace"))
        await assert_eventually(lambda: c.state(handle), lambda s: s.stage == "held")
        await handle.execute_update(
            Updates.ABORT, {"reason": "done looking"}, result_type=NodeRemediationState
        )
        result = await handle.result()
    assert result.outcome == Outcome.ABORTED
    assert fleet.called(A.DELETE_NODE_CLAIM) == 0
