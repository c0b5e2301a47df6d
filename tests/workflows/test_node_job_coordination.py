"""The job stage: a node's training jobs get their urgency's wait before disruption."""

from datetime import timedelta

from temporalio.testing import WorkflowEnvironment

from gpu_remediation.ids import Activities as A
from gpu_remediation.ids import Updates
from gpu_remediation.models import FaultClass, Outcome, Rung
from gpu_remediation.workflow_models import (
    AbortInput,
    ApproveInput,
    NodeRemediationState,
    SkipToInput,
)
from tests.conftest import assert_eventually
from tests.doubles import FakeFleet
from tests.workflows.job_support import (
    answer_json,
    job,
    on_node,
    relay_answer,
    relay_pod_ended,
    requested_incident,
)
from tests.workflows.node_support import (
    Cluster,
    NodeHandle,
    cluster,
    policy,
    with_fault_class,
    xid,
)


def decisions(state: NodeRemediationState) -> list[str]:
    return [f"{d.action}: {d.reason}" for d in state.decisions if d.stage == "jobs"]


async def asked(c: Cluster, handle: NodeHandle) -> NodeRemediationState:
    return await assert_eventually(
        lambda: c.state(handle),
        lambda s: s.waiting_for is not None and s.waiting_for.startswith("a job checkpoint"),
    )


async def test_a_job_that_answers_is_drained_only_after_its_answer(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = FakeFleet(node_jobs=[on_node(job())])
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-j1", xid(48))  # gpu_reset_required: checkpoint_first
        state = await asked(c, handle)
        assert [j.display for j in state.jobs] == ["ml/llm"]
        assert state.checkpoint == "asked"
        assert fleet.called(A.DRAIN_GPU_PODS) == 0
        await relay_answer(
            handle, requested_incident(fleet), answer_json(requested_incident(fleet))
        )
        result = await handle.result()
        state = await c.state(handle)
    assert result.outcome == Outcome.REPAIRED
    names = fleet.names()
    assert names.index(A.REQUEST_CHECKPOINT) < names.index(A.WITHDRAW_CHECKPOINT)
    assert names.index(A.WITHDRAW_CHECKPOINT) < names.index(A.DRAIN_GPU_PODS)
    assert state.checkpoint == "saved at step 1200"
    assert any(
        line.startswith("checkpoint answered: ml/llm-0: step 1200") for line in decisions(state)
    )
    assert any("llm (4 nodes, checkpoints)" in line for line in decisions(state))


async def test_a_silent_job_is_drained_at_the_deadline(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = FakeFleet(node_jobs=[on_node(job())])
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-j2", xid(48))
        started = await time_skipping_env.get_current_time()
        result = await handle.result()
        state = await c.state(handle)
    assert result.outcome == Outcome.REPAIRED
    assert fleet.called(A.DRAIN_GPU_PODS) == 1
    assert "wait over: deadline passed" in decisions(state)
    [request] = [arg for name, arg in fleet.calls if name == A.REQUEST_CHECKPOINT]
    wait = request.deadline - started  # type: ignore[attr-defined]
    # ADR 029: 7 minutes after the fault was named, not checkpoint_timeout's 10 after
    # the request: a job the fault hung never answers, and its collective timeout
    # (10 minutes from the hang) would fail it before a later drain.
    assert abs(wait.total_seconds() - policy().jobs.hung_job_deadline.total_seconds()) < 60
    assert any("the wait ends 0:07:00 after the fault was named" in d for d in decisions(state))


async def test_checkpoint_timeout_ends_the_wait_when_it_comes_before_the_hung_job_deadline(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = FakeFleet(node_jobs=[on_node(job())])
    jobs = policy().jobs.model_copy(
        update={"checkpoint_timeout": timedelta(minutes=3), "hung_job_deadline": timedelta(hours=1)}
    )
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-j2b", xid(48), pol=policy(jobs=jobs))
        started = await time_skipping_env.get_current_time()
        await handle.result()
        state = await c.state(handle)
    [request] = [arg for name, arg in fleet.calls if name == A.REQUEST_CHECKPOINT]
    wait = request.deadline - started  # type: ignore[attr-defined]
    assert abs(wait.total_seconds() - 180) < 60
    assert not any("after the fault was named" in d for d in decisions(state))


async def test_a_fault_named_past_the_hung_job_deadline_drains_without_asking(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    # The class's grace took longer than the deadline: a job hung since the first
    # report is about to be failed by its timeout; asking it would only delay the drain.
    fleet = FakeFleet(node_jobs=[on_node(job())])
    jobs = policy().jobs.model_copy(update={"hung_job_deadline": timedelta(minutes=1)})
    pol = with_fault_class(
        policy(jobs=jobs), FaultClass.GPU_RESET_REQUIRED, grace=timedelta(minutes=2)
    )
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-j2c", xid(48), pol=pol)
        result = await handle.result()
        state = await c.state(handle)
    assert result.outcome == Outcome.REPAIRED
    assert fleet.called(A.REQUEST_CHECKPOINT) == 0
    assert fleet.called(A.DRAIN_GPU_PODS) == 1
    assert any(
        d.startswith("no wait: ") and "after the fault was named" in d for d in decisions(state)
    )


async def test_an_immediate_fault_does_not_wait(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = FakeFleet(node_jobs=[on_node(job())])
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-j3", xid(79))  # fallen off the bus: immediate
        result = await handle.result()
        state = await c.state(handle)
    assert result.outcome == Outcome.REPAIRED
    assert fleet.called(A.REQUEST_CHECKPOINT) == 0
    assert "no wait: urgency immediate for gpu_fallen_off_bus" in decisions(state)


async def test_a_job_that_did_not_opt_in_is_not_waited_for(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = FakeFleet(node_jobs=[on_node(job(supported=False))])
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-j4", xid(48))
        result = await handle.result()
        state = await c.state(handle)
    assert result.outcome == Outcome.REPAIRED
    assert fleet.called(A.REQUEST_CHECKPOINT) == 0
    assert "no wait: no job on the node opted in to checkpoints" in decisions(state)


async def test_a_when_idle_fault_waits_for_the_job_to_end_then_resets(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    # Xid 63 (row remap pending): quarantined, the job keeps running until it ends.
    fleet = FakeFleet(node_jobs=[on_node(job(supported=False)), on_node(job(supported=False))])
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-j5", xid(63))
        await assert_eventually(
            lambda: c.state(handle),
            lambda s: s.waiting_for is not None and s.waiting_for.startswith("jobs to end"),
        )
        assert fleet.called(A.QUARANTINE_NODE) == 1
        assert fleet.called(A.RESET_GPUS) == 0
        fleet.node_jobs = [on_node()]  # the job finished
        await relay_pod_ended(handle, requested_incident(fleet))
        result = await handle.result()
        state = await c.state(handle)
    assert result.outcome == Outcome.REPAIRED
    assert fleet.called(A.RESET_GPUS) == 1
    assert "wait over: no GPU work left on the node" in decisions(state)


async def test_a_pod_ending_while_the_job_still_runs_keeps_the_wait(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = FakeFleet(node_jobs=[on_node(job())])
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-j6", xid(48))
        await asked(c, handle)
        await relay_pod_ended(handle, requested_incident(fleet))
        await assert_eventually(
            lambda: c.state(handle), lambda s: fleet.called(A.FIND_NODE_JOBS) == 2
        )
        state = await asked(c, handle)
        assert fleet.called(A.DRAIN_GPU_PODS) == 0
        await relay_answer(
            handle, requested_incident(fleet), answer_json(requested_incident(fleet))
        )
        assert (await handle.result()).outcome == Outcome.REPAIRED
    assert state.checkpoint == "asked"


async def test_garbage_oversized_and_wrong_incident_answers_are_ignored(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = FakeFleet(node_jobs=[on_node(job())])
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-j7", xid(48))
        await asked(c, handle)
        incident = requested_incident(fleet)
        await relay_answer(handle, incident, "{not json")
        await relay_answer(handle, incident, answer_json(incident, step=-3))
        await relay_answer(handle, incident, answer_json(incident, note="x" * 1100))
        await relay_answer(handle, incident, "y" * 2048, truncated=True)
        await relay_answer(handle, incident, answer_json("gpu-remediation/other/gpu-x/run"))
        state = await assert_eventually(
            lambda: c.state(handle),
            lambda s: len([d for d in decisions(s) if d.startswith("answer ignored")]) == 5,
        )
        assert state.checkpoint == "asked"
        assert fleet.called(A.DRAIN_GPU_PODS) == 0
        await relay_answer(handle, incident, answer_json(incident, step=7))
        assert (await handle.result()).outcome == Outcome.REPAIRED
    ignored = [d for d in decisions(state) if d.startswith("answer ignored")]
    assert "malformed answer" in ignored[0]
    assert "malformed answer (step:" in ignored[1]
    assert "oversized answer" in ignored[2]
    assert "oversized answer" in ignored[3]
    assert "answer for another incident (gpu-remediation/other/gpu-x/run)" in ignored[4]


async def test_approve_cuts_the_wait(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = FakeFleet(node_jobs=[on_node(job())])
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-j8", xid(48))
        state = await asked(c, handle)
        assert state.awaiting_approval == Rung.STOP_GPU_WORK
        await handle.execute_update(
            Updates.APPROVE, ApproveInput(rung=Rung.STOP_GPU_WORK), result_type=NodeRemediationState
        )
        result = await handle.result()
        state = await c.state(handle)
    assert result.outcome == Outcome.REPAIRED
    assert "wait over: cut short by an operator" in decisions(state)


async def test_skip_during_the_wait_goes_to_the_chosen_rung(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = FakeFleet(node_jobs=[on_node(job())])
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-j9", xid(48))
        await asked(c, handle)
        await handle.execute_update(
            Updates.SKIP_TO, SkipToInput(rung=Rung.REBOOT), result_type=NodeRemediationState
        )
        result = await handle.result()
    assert result.outcome == Outcome.REPAIRED
    assert fleet.called(A.RESET_GPUS) == 0
    assert fleet.reboots == 1
    assert fleet.called(A.REQUEST_CHECKPOINT) == 1  # the skip does not ask again
    assert fleet.called(A.WITHDRAW_CHECKPOINT) == 1


async def test_abort_during_the_wait_withdraws_the_request_and_drains_nothing(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = FakeFleet(node_jobs=[on_node(job())])
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-j10", xid(48))
        await asked(c, handle)
        await handle.execute_update(
            Updates.ABORT, AbortInput(reason="not now"), result_type=NodeRemediationState
        )
        result = await handle.result()
    assert result.outcome == Outcome.ABORTED
    assert fleet.called(A.WITHDRAW_CHECKPOINT) == 1
    assert fleet.called(A.DRAIN_GPU_PODS) == 0
    assert fleet.called(A.RELEASE_NODE) == 1


async def test_dry_run_only_says_what_it_would_ask(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = FakeFleet(node_jobs=[on_node(job())])
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-j11", xid(48), pol=policy(dry_run=True))
        result = await handle.result()
        state = await c.state(handle)
    assert result.outcome == Outcome.DRY_RUN
    assert fleet.called(A.REQUEST_CHECKPOINT) == 0
    assert any(d.startswith("would ask for a checkpoint") for d in decisions(state))


async def test_the_worker_killed_during_the_wait_neither_asks_twice_nor_loses_the_wait(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = FakeFleet(node_jobs=[on_node(job())])
    async with cluster(dev_env, task_queue, fleet) as c:
        handle = await c.report("gpu-j12", xid(48))
        await asked(c, handle)
    # The first worker is gone; a new one resumes the wait from history.
    async with cluster(dev_env, task_queue, fleet) as c:
        state = await asked(c, handle)
        assert state.checkpoint == "asked"
        incident = requested_incident(fleet)
        await relay_answer(handle, incident, answer_json(incident))
        result = await handle.result()
    assert result.outcome == Outcome.REPAIRED
    assert fleet.called(A.REQUEST_CHECKPOINT) == 1


async def test_a_relapse_asks_the_jobs_again_with_a_deadline_of_its_own(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    # The fault returned long after it was first named: a hang it caused began at the
    # relapse, so the new wait runs hung_job_deadline from then, not from the first.
    fleet = FakeFleet(node_jobs=[on_node(job())])
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-j30", xid(48), pol=policy(cooldown=timedelta(hours=2)))
        await asked(c, handle)
        first = requested_incident(fleet)
        await relay_answer(handle, first, answer_json(first))
        await assert_eventually(lambda: c.state(handle), lambda s: s.stage == "cooldown")
        await time_skipping_env.sleep(timedelta(minutes=30))
        relapse_at = await time_skipping_env.get_current_time()
        await c.signal(handle, "gpu-j30", xid(48))

        async def requests_made() -> int:
            return fleet.called(A.REQUEST_CHECKPOINT)

        await assert_eventually(requests_made, lambda n: n == 2)
        *_, second = [arg for name, arg in fleet.calls if name == A.REQUEST_CHECKPOINT]
        again = str(second.request_incident)  # type: ignore[attr-defined]
        await relay_answer(handle, again, answer_json(again, step=1300))
        result = await handle.result()
    assert result.outcome == Outcome.REPAIRED
    requests = [arg for name, arg in fleet.calls if name == A.REQUEST_CHECKPOINT]
    wait = requests[1].deadline - relapse_at  # type: ignore[attr-defined]
    assert abs(wait.total_seconds() - policy().jobs.hung_job_deadline.total_seconds()) < 60


async def test_a_second_fault_class_keeps_the_clock_of_the_first(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    # A hang began with the first fault: a report that names another class later (here
    # an Xid 74, nvlink_error, 3 minutes into a 5-minute grace) must not restart it.
    fleet = FakeFleet(node_jobs=[on_node(job())])
    pol = with_fault_class(policy(), FaultClass.GPU_RESET_REQUIRED, grace=timedelta(minutes=5))
    pol = with_fault_class(pol, FaultClass.NVLINK_ERROR, grace=timedelta(minutes=5))
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-j31", xid(48), pol=pol)
        named_at = await time_skipping_env.get_current_time()
        await time_skipping_env.sleep(timedelta(minutes=3))
        await c.signal(handle, "gpu-j31", xid(74))
        await handle.result()
        state = await c.state(handle)
    assert any(d.action == "classified nvlink_error" for d in state.decisions)
    [request] = [arg for name, arg in fleet.calls if name == A.REQUEST_CHECKPOINT]
    wait = request.deadline - named_at  # type: ignore[attr-defined]
    assert abs(wait.total_seconds() - policy().jobs.hung_job_deadline.total_seconds()) < 60
