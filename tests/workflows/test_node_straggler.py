"""Issue 37: a job's straggler report is evidence, never a verdict: an idle node is diagnosed."""

from temporalio.testing import WorkflowEnvironment

from gpu_remediation.ids import Activities as A
from gpu_remediation.models import FaultClass, Outcome, Rung
from gpu_remediation.policy import DisruptionPolicy, StepBudget
from gpu_remediation.workflow_models import NodeRemediationState
from tests.conftest import assert_eventually
from tests.doubles import FakeFleet, failing_diag
from tests.gpu_remediation.evidence_factories import straggler
from tests.workflows.job_support import job, on_node, relay_pod_ended, requested_incident
from tests.workflows.node_support import Cluster, NodeHandle, cluster, policy, xid

DISRUPTIVE = (A.DRAIN_GPU_PODS, A.RESET_GPUS, A.REBOOT_NODE, A.DELETE_NODE_CLAIM)


async def waiting_for_idle(c: Cluster, handle: NodeHandle) -> NodeRemediationState:
    return await assert_eventually(
        lambda: c.state(handle),
        lambda s: s.waiting_for is not None and s.waiting_for.startswith("jobs to end"),
    )


async def test_an_idle_node_is_diagnosed_at_level_3_and_released_when_it_passes(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = FakeFleet()
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-s1", straggler())
        result = await handle.result()
    assert (result.fault_class, result.outcome) == (FaultClass.STRAGGLER, Outcome.NO_FAULT_FOUND)
    levels = [arg.level for name, arg in fleet.calls if name == A.RUN_DIAGNOSTIC]  # type: ignore[attr-defined]
    assert levels == [3]
    assert not any(fleet.called(name) for name in (A.RESET_GPUS, A.REBOOT_NODE))


async def test_the_job_is_not_asked_to_checkpoint_and_keeps_the_node_until_it_ends(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = FakeFleet(node_jobs=[on_node(job())])
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-s2", straggler())
        await waiting_for_idle(c, handle)
        assert fleet.called(A.QUARANTINE_NODE) == 1
        [request] = [arg for name, arg in fleet.calls if name == A.REQUEST_CHECKPOINT]
        assert request.urgency == "idle_only"  # type: ignore[attr-defined]
        assert fleet.called(A.RUN_DIAGNOSTIC) == 0
        fleet.node_jobs = [on_node()]  # the job finished
        await relay_pod_ended(handle, requested_incident(fleet))
        result = await handle.result()
    assert result.outcome == Outcome.NO_FAULT_FOUND
    assert fleet.called(A.RUN_DIAGNOSTIC) == 1


async def test_a_node_that_never_goes_idle_is_given_back_untouched(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = FakeFleet(node_jobs=[on_node(job(supported=False))])
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-s3", straggler())
        result = await handle.result()
        state = await c.state(handle)
    assert (result.fault_class, result.outcome) == (FaultClass.STRAGGLER, Outcome.NO_ACTION)
    assert not any(fleet.called(name) for name in (*DISRUPTIVE, A.RUN_DIAGNOSTIC))
    assert fleet.called(A.RELEASE_NODE) == 1
    max_defer = policy().jobs.max_defer
    assert any(
        d.stage == "release" and d.reason.endswith(f"did not end within {max_defer}")
        for d in state.decisions
    )


async def test_a_report_that_clears_before_the_node_is_idle_gives_it_back_recovered(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    # The slowdown went away (the job's step times back within the margin) while the
    # job still ran: nothing is left to diagnose, and nothing may be done.
    fleet = FakeFleet(node_jobs=[on_node(job())])
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-s4", straggler())
        await waiting_for_idle(c, handle)
        await c.signal(handle, "gpu-s4", straggler(cleared=True))
        result = await handle.result()
        state = await c.state(handle)
    assert (result.fault_class, result.outcome) == (FaultClass.STRAGGLER, Outcome.RECOVERED)
    assert not any(fleet.called(name) for name in (*DISRUPTIVE, A.RUN_DIAGNOSTIC))
    assert fleet.called(A.RELEASE_NODE) == 1
    assert any(
        d.reason.endswith("every report cleared before the node went idle") for d in state.decisions
    )


async def test_what_the_diagnostic_finds_names_the_fault_and_the_ladder_climbs_on(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = FakeFleet(diagnostics=[failing_diag(error_id=4)])
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-s4", straggler())
        result = await handle.result()
    assert result.fault_class == FaultClass.GPU_RESET_REQUIRED
    assert result.outcome == Outcome.REPAIRED
    assert result.rungs_tried[-2:] == [Rung.DIAGNOSE, Rung.GPU_RESET]


async def test_beside_a_real_fault_the_fault_names_the_incident(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = FakeFleet()
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-s5", straggler(), xid(48))
        result = await handle.result()
    assert (result.fault_class, result.outcome) == (FaultClass.GPU_RESET_REQUIRED, Outcome.REPAIRED)


async def test_the_quarantine_does_not_count_for_the_breaker_until_a_fault_is_named(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = FakeFleet(diagnostics=[failing_diag(error_id=4)])
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-s6", straggler())
        await handle.result()
    marks = [arg.held for name, arg in fleet.calls if name == A.QUARANTINE_NODE]  # type: ignore[attr-defined]
    assert marks == [True, False]  # held on the tenant's word; counted once Xid 48-like DBE named


async def test_without_the_job_stage_nothing_can_tell_the_node_idle_so_nothing_is_done(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = FakeFleet(node_jobs=[on_node(job())])
    pol = policy()
    off = pol.model_copy(update={"jobs": pol.jobs.model_copy(update={"enabled": False})})
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-s7", straggler(), pol=off)
        result = await handle.result()
    assert result.outcome == Outcome.NO_ACTION
    assert not any(fleet.called(name) for name in (*DISRUPTIVE, A.RUN_DIAGNOSTIC))


async def test_a_job_listing_that_fails_gives_the_node_back_untouched(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = FakeFleet(fail={A.FIND_NODE_JOBS})
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-s8", straggler())
        result = await handle.result()
    assert result.outcome == Outcome.NO_ACTION
    assert not any(fleet.called(name) for name in (*DISRUPTIVE, A.RUN_DIAGNOSTIC))


async def test_a_fault_reported_during_the_wait_ends_it_and_its_own_urgency_applies(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    # The job still runs (hung, say); an Xid 79 arrives: the fault's class is immediate.
    fleet = FakeFleet(node_jobs=[on_node(job(supported=False))])
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-s9", straggler())
        await waiting_for_idle(c, handle)
        assert (
            fleet.called(
                A.STEP_PERMIT_REQUEST if hasattr(A, "STEP_PERMIT_REQUEST") else A.DRAIN_GPU_PODS
            )
            == 0
        )
        await c.signal(handle, "gpu-s9", xid(79))
        result = await handle.result()
    assert result.fault_class == FaultClass.GPU_FALLEN_OFF_BUS
    assert result.outcome == Outcome.REPAIRED
    assert fleet.called(A.DRAIN_GPU_PODS) == 1
    assert fleet.called(A.REBOOT_NODE) == 1


async def test_a_node_waiting_to_be_idle_holds_no_drain_permit(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    # One drain at a time: a straggler report's day-long wait must not take it.
    fleet = FakeFleet(node_jobs=[on_node(job(supported=False))], pool_total=100)
    pol = policy(disruption=DisruptionPolicy(stop_gpu_work=StepBudget(fleet=1)))
    async with cluster(dev_env, task_queue, fleet) as c:
        waiting = await c.report("gpu-s10", straggler(), pol=pol)
        await waiting_for_idle(c, waiting)
        fleet.node_jobs = [on_node()]  # the faulty node below runs nothing: drained at once
        faulty = await c.report("gpu-s11", xid(48), pol=pol)
        assert (await faulty.result()).outcome == Outcome.REPAIRED
        await waiting.terminate()
    drained = [arg.node for name, arg in fleet.calls if name == A.DRAIN_GPU_PODS]  # type: ignore[attr-defined]
    assert drained == ["gpu-s11"]
