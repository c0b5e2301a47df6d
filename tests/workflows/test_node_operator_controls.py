"""Operator controls: approval, pause/resume, abort, skip and retry."""

from temporalio.testing import WorkflowEnvironment

from gpu_remediation.ids import Activities as A
from gpu_remediation.ids import Updates
from gpu_remediation.models import FaultClass, Outcome, Rung
from gpu_remediation.workflow_models import (
    AbortInput,
    ApproveInput,
    NodeRemediationState,
    OperatorRequest,
    RetryStepInput,
    SkipToInput,
)
from tests.conftest import assert_eventually
from tests.doubles import FakeFleet, failing_diag
from tests.workflows.node_support import (
    cluster,
    policy,
    refusal,
    with_fault_class,
    with_rung,
    xid,
)


async def test_replacement_needing_approval_waits_then_continues_on_approve(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    pol = with_rung(policy(), Rung.REPLACE, requires_approval=True)
    fleet = FakeFleet(diagnostics=[failing_diag(80)])
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-20", xid(79), pol=pol)
        state = await assert_eventually(
            lambda: c.state(handle), lambda s: s.waiting_for == "approval of replace"
        )
        assert state.awaiting_approval == Rung.REPLACE
        assert fleet.called(A.DELETE_NODE_CLAIM) == 0
        assert "reboot is not waiting" in await refusal(
            handle, Updates.APPROVE, ApproveInput(rung=Rung.REBOOT)
        )
        await handle.execute_update(
            Updates.APPROVE,
            ApproveInput(rung=Rung.REPLACE, by="bob", reason="RMA"),
            result_type=NodeRemediationState,
        )
        result = await handle.result()
    assert result.outcome == Outcome.REPLACED
    assert fleet.called(A.DELETE_NODE_CLAIM) == 1


async def test_approve_is_rejected_when_nothing_waits_for_approval(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    async with cluster(time_skipping_env, task_queue) as c:
        handle = await c.report("gpu-21", xid(48), pol=policy())
        await handle.execute_update(
            Updates.PAUSE, OperatorRequest(), result_type=NodeRemediationState
        )
        assert "no step is waiting for approval" in await refusal(
            handle, Updates.APPROVE, ApproveInput(rung=Rung.GPU_RESET)
        )
        await handle.execute_update(
            Updates.ABORT, AbortInput(reason="test"), result_type=NodeRemediationState
        )
        result = await handle.result()
    assert result.outcome == Outcome.ABORTED


async def test_paused_incident_takes_no_step_until_resumed(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    async with cluster(time_skipping_env, task_queue) as c:
        handle = await c.report("gpu-22", xid(48))
        await handle.execute_update(
            Updates.PAUSE, OperatorRequest(by="carol"), result_type=NodeRemediationState
        )
        state = await assert_eventually(
            lambda: c.state(handle),
            lambda s: s.waiting_for is not None and "resume" in s.waiting_for,
        )
        assert state.paused
        assert c.fleet.called(A.RESET_GPUS) == 0
        assert "already paused" in await refusal(handle, Updates.PAUSE, OperatorRequest())
        await handle.execute_update(
            Updates.RESUME, OperatorRequest(), result_type=NodeRemediationState
        )
        result = await handle.result()
    assert result.outcome == Outcome.REPAIRED
    assert c.fleet.called(A.RESET_GPUS) == 1


async def test_abort_cleans_up_untaints_and_uncordons(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    pol = with_rung(policy(), Rung.REBOOT, requires_approval=True)
    async with cluster(time_skipping_env, task_queue) as c:
        handle = await c.report("gpu-23", xid(79), pol=pol)
        await assert_eventually(
            lambda: c.state(handle), lambda s: s.waiting_for == "approval of reboot"
        )
        await handle.execute_update(
            Updates.ABORT,
            AbortInput(by="dave", reason="false alarm"),
            result_type=NodeRemediationState,
        )
        result = await handle.result()
    assert result.outcome == Outcome.ABORTED
    releases = [arg for name, arg in c.fleet.calls if name == A.RELEASE_NODE]
    assert len(releases) == 1
    assert releases[0].uncordon  # type: ignore[attr-defined]
    assert c.fleet.called(A.REBOOT_NODE) == 0


async def test_abort_can_leave_the_node_cordoned(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    pol = with_rung(policy(), Rung.REBOOT, requires_approval=True)
    async with cluster(time_skipping_env, task_queue) as c:
        handle = await c.report("gpu-24", xid(79), pol=pol)
        await assert_eventually(
            lambda: c.state(handle), lambda s: s.waiting_for == "approval of reboot"
        )
        await handle.execute_update(
            Updates.ABORT,
            AbortInput(uncordon=False, reason="keep for RMA"),
            result_type=NodeRemediationState,
        )
        await handle.result()
    releases = [arg for name, arg in c.fleet.calls if name == A.RELEASE_NODE]
    assert [r.uncordon for r in releases] == [False]  # type: ignore[attr-defined]


async def test_escalated_incident_can_be_retried_and_skipped_by_an_operator(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    # A policy that hands this fault straight to a person (an open breaker holds instead).
    pol = with_fault_class(policy(), FaultClass.GPU_FALLEN_OFF_BUS, start_rung=Rung.ESCALATE)
    fleet = FakeFleet()
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-25", xid(79), pol=pol)
        await assert_eventually(
            lambda: c.state(handle), lambda s: s.rung == Rung.ESCALATE and s.waiting_for is not None
        )
        assert fleet.called(A.ESCALATE) == 1
        assert "no step has run yet" in await refusal(handle, Updates.RETRY_STEP, RetryStepInput())
        await handle.execute_update(
            Updates.SKIP_TO,
            SkipToInput(rung=Rung.REBOOT, by="erin"),
            result_type=NodeRemediationState,
        )
        result = await handle.result()
    assert result.outcome == Outcome.REPAIRED
    assert fleet.called(A.REBOOT_NODE) == 1
