"""Grace periods, signal-with-start deduplication and dry-run."""

import asyncio
from datetime import timedelta

from temporalio.testing import WorkflowEnvironment

from gpu_remediation.ids import Activities as A
from gpu_remediation.models import FaultClass, Outcome
from tests.conftest import assert_eventually
from tests.workflows.node_support import cluster, condition, policy, with_fault_class, xid


async def test_transient_evidence_that_clears_during_grace_closes_without_touching_the_node(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    pol = with_fault_class(policy(), FaultClass.NODE_NOT_READY, grace=timedelta(minutes=10))
    async with cluster(time_skipping_env, task_queue) as c:
        handle = await c.report("gpu-10", condition("Ready", "False"), pol=pol)
        await assert_eventually(lambda: c.state(handle), lambda s: s.stage == "grace")
        await c.signal(handle, "gpu-10", condition("Ready", "True", cleared=True))
        result = await handle.result()
    assert result.outcome == Outcome.TRANSIENT
    assert c.fleet.side_effects() == []


async def test_evidence_still_present_after_grace_starts_the_ladder(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    pol = with_fault_class(policy(), FaultClass.NODE_NOT_READY, grace=timedelta(minutes=10))
    async with cluster(time_skipping_env, task_queue) as c:
        handle = await c.report("gpu-11", condition("Ready", "False"), pol=pol)
        result = await handle.result()
    assert result.outcome == Outcome.REPAIRED
    assert result.duration_s >= 600
    assert c.fleet.called(A.REBOOT_NODE) == 1


async def test_fifty_duplicate_alerts_make_one_run(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    pol = with_fault_class(policy(), FaultClass.GPU_RESET_REQUIRED, grace=timedelta(minutes=5))
    async with cluster(time_skipping_env, task_queue) as c:
        (evidence,) = await c.stamped([xid(48, gpu=2)])
        handles = await asyncio.gather(
            *(
                c.report("gpu-12", evidence, pol=pol, report_id=f"alert-{i % 5}", stamp=False)
                for i in range(50)
            )
        )
        run_ids = {h.result_run_id for h in handles}
        state = await c.state(handles[0])
        result = await handles[0].result()
    assert len(run_ids) == 1
    assert len(state.evidence) == 1
    assert result.outcome == Outcome.REPAIRED
    assert c.fleet.called(A.RESET_GPUS) == 1


async def test_dry_run_records_decisions_and_runs_no_side_effects(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    async with cluster(time_skipping_env, task_queue) as c:
        handle = await c.report("gpu-13", xid(79), pol=policy(dry_run=True))
        result = await handle.result()
        state = await c.state(handle)
    assert result.outcome == Outcome.DRY_RUN
    assert c.fleet.side_effects() == []
    actions = [d.action for d in state.decisions]
    assert "would cordon and taint" in actions
    assert "would run reboot" in actions
    plan = next(d for d in state.decisions if d.action == "would run reboot")
    assert "replace" in plan.reason
    assert "escalate" in plan.reason
