"""The job stage and pause: a paused incident does not drain when its job wait ends."""

from datetime import timedelta

from temporalio.testing import WorkflowEnvironment

from gpu_remediation.ids import Activities as A
from gpu_remediation.ids import Updates
from gpu_remediation.models import Outcome, Rung
from gpu_remediation.workflow_models import (
    AbortInput,
    NodeRemediationState,
    OperatorRequest,
    SkipToInput,
)
from tests.conftest import assert_eventually
from tests.doubles import FakeFleet
from tests.workflows.job_support import (
    answer_json,
    job,
    on_node,
    relay_answer,
    requested_incident,
)
from tests.workflows.node_support import Cluster, NodeHandle, cluster, xid

HELD = "resume (paused by an operator)"


def decisions(state: NodeRemediationState) -> list[str]:
    return [f"{d.action}: {d.reason}" for d in state.decisions if d.stage == "jobs"]


async def waiting_for(c: Cluster, handle: NodeHandle, what: str) -> NodeRemediationState:
    return await assert_eventually(
        lambda: c.state(handle),
        lambda s: s.waiting_for is not None and s.waiting_for.startswith(what),
    )


async def pause(handle: NodeHandle) -> None:
    await handle.execute_update(
        Updates.PAUSE, OperatorRequest(by="op"), result_type=NodeRemediationState
    )


async def test_a_pause_during_a_when_idle_wait_holds_the_drain_past_the_deadline_until_resume(
    own_time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    # A server of its own: the test leaps its clock by a day.
    env = own_time_skipping_env
    fleet = FakeFleet(node_jobs=[on_node(job(supported=False))])
    async with cluster(env, task_queue, fleet) as c:
        handle = await c.report("gpu-jp1", xid(63))  # row remap pending: when_idle, 24 h
        await waiting_for(c, handle, "jobs to end")
        await pause(handle)
        # The pause does not end the wait: the job keeps its node until the deadline.
        state = await waiting_for(c, handle, "jobs to end")
        assert state.paused
        await env.sleep(timedelta(hours=25))
        state = await waiting_for(c, handle, HELD)
        assert "wait over: deadline passed" in decisions(state)
        assert fleet.called(A.DRAIN_GPU_PODS) == 0
        assert fleet.called(A.RESET_GPUS) == 0
        await handle.execute_update(
            Updates.RESUME, OperatorRequest(by="op"), result_type=NodeRemediationState
        )
        result = await handle.result()
    assert result.outcome == Outcome.REPAIRED
    assert fleet.called(A.DRAIN_GPU_PODS) == 1


async def test_a_pause_during_a_checkpoint_wait_holds_the_drain_after_the_answer(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = FakeFleet(node_jobs=[on_node(job())])
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-jp2", xid(48))
        await waiting_for(c, handle, "a job checkpoint")
        await pause(handle)
        incident = requested_incident(fleet)
        await relay_answer(handle, incident, answer_json(incident))
        state = await waiting_for(c, handle, HELD)
        assert "wait over: saved at step 1200" in decisions(state)
        assert fleet.called(A.DRAIN_GPU_PODS) == 0
        await handle.execute_update(
            Updates.ABORT, AbortInput(reason="not this node"), result_type=NodeRemediationState
        )
        result = await handle.result()
    # Aborted while paused after the wait: nothing was evicted, the node is released.
    assert result.outcome == Outcome.ABORTED
    assert fleet.called(A.DRAIN_GPU_PODS) == 0
    assert fleet.called(A.RELEASE_NODE) == 1


async def test_a_skip_while_the_drain_is_held_applies_after_resume(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = FakeFleet(node_jobs=[on_node(job())])
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-jp3", xid(48))
        await waiting_for(c, handle, "a job checkpoint")
        await pause(handle)
        incident = requested_incident(fleet)
        await relay_answer(handle, incident, answer_json(incident))
        await waiting_for(c, handle, HELD)
        await handle.execute_update(
            Updates.SKIP_TO, SkipToInput(rung=Rung.REBOOT), result_type=NodeRemediationState
        )
        state = await waiting_for(c, handle, HELD)  # still paused: the skip waits too
        assert fleet.called(A.DRAIN_GPU_PODS) == 0
        await handle.execute_update(
            Updates.RESUME, OperatorRequest(by="op"), result_type=NodeRemediationState
        )
        result = await handle.result()
    assert result.outcome == Outcome.REPAIRED
    assert fleet.called(A.DRAIN_GPU_PODS) == 1
    assert fleet.called(A.RESET_GPUS) == 0
    assert fleet.reboots == 1
    assert fleet.called(A.REQUEST_CHECKPOINT) == 1
    assert state.paused
