"""The job stage with several jobs: each asked job's answer is waited for."""

import asyncio
from datetime import timedelta

from temporalio.testing import WorkflowEnvironment

from gpu_remediation.ids import Activities as A
from gpu_remediation.models import Outcome, Rung
from gpu_remediation.workflow_models import NodeRemediationState
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
from tests.workflows.node_support import Cluster, NodeHandle, cluster, policy, xid

LLM, EVAL = "ml/llm", "ml/eval"


def decisions(state: NodeRemediationState) -> list[str]:
    return [f"{d.action}: {d.reason}" for d in state.decisions if d.stage == "jobs"]


def two_jobs() -> FakeFleet:
    return FakeFleet(node_jobs=[on_node(job("llm"), job("eval", nodes=2))])


async def checkpoint_is(c: Cluster, handle: NodeHandle, value: str) -> NodeRemediationState:
    return await assert_eventually(lambda: c.state(handle), lambda s: s.checkpoint == value)


async def test_with_two_opted_in_jobs_the_node_is_drained_only_after_both_answered(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = two_jobs()
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-je1", xid(48))
        await checkpoint_is(c, handle, "asked")
        incident = requested_incident(fleet)
        await relay_answer(handle, incident, answer_json(incident), job=LLM)
        state = await checkpoint_is(c, handle, "ml/llm: saved at step 1200; ml/eval: asked")
        assert (state.waiting_for or "").startswith("a job checkpoint")
        # Every rank of the job may answer, and a job may answer each later save.
        await relay_answer(handle, incident, answer_json(incident, step=1300), job=LLM)
        await relay_answer(handle, incident, answer_json(incident), job=LLM, pod="ml/llm-1")
        assert fleet.called(A.DRAIN_GPU_PODS) == 0
        refusal = answer_json(incident, step=None, saved_at=None, refused="mid-epoch")
        await relay_answer(handle, incident, refusal, job=EVAL, pod="ml/eval-0")
        result = await handle.result()
        state = await c.state(handle)
    assert result.outcome == Outcome.REPAIRED
    assert fleet.called(A.DRAIN_GPU_PODS) == 1
    assert state.checkpoint == "ml/llm: saved at step 1200; ml/eval: refused by ml/eval-0"
    lines = decisions(state)
    assert "wait over: ml/llm: saved at step 1200; ml/eval: refused by ml/eval-0" in lines
    assert not [line for line in lines if line.startswith("answer ignored")]
    names = fleet.names()
    assert names.index(A.WITHDRAW_CHECKPOINT) < names.index(A.DRAIN_GPU_PODS)


async def test_an_answer_counts_for_the_job_its_pod_was_asked_as_not_the_one_it_claims(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    # A pod of ml/llm whose (owner-editable) request annotation names ml/eval:
    # its answer is ml/llm's, and ml/eval is still waited for.
    fleet = two_jobs()
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-je2", xid(48))
        await checkpoint_is(c, handle, "asked")
        incident = requested_incident(fleet)
        await relay_answer(handle, incident, answer_json(incident), job=EVAL, pod="ml/llm-0")
        await checkpoint_is(c, handle, "ml/llm: saved at step 1200; ml/eval: asked")
        await relay_answer(handle, incident, answer_json(incident, step=9), job=EVAL)
        result = await handle.result()
    assert result.outcome == Outcome.REPAIRED


async def test_a_forged_answer_from_a_pod_that_was_not_asked_is_ignored(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    # Another tenant's pod copies the request, names the victim job and answers:
    # its uid is not one the incident wrote its request on.
    fleet = FakeFleet(node_jobs=[on_node(job("llm"))])
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-je6", xid(48))
        await checkpoint_is(c, handle, "asked")
        incident = requested_incident(fleet)
        await relay_answer(
            handle, incident, answer_json(incident), job=LLM, pod="mallory/x-0", pod_uid="u-x"
        )
        state = await assert_eventually(
            lambda: c.state(handle),
            lambda s: (
                "answer ignored: mallory/x-0: this pod was not asked to checkpoint" in decisions(s)
            ),
        )
        assert state.checkpoint == "asked"
        assert fleet.called(A.DRAIN_GPU_PODS) == 0
        await relay_answer(handle, incident, answer_json(incident), job=LLM)
        result = await handle.result()
    assert result.outcome == Outcome.REPAIRED


async def test_an_answer_of_a_job_that_was_not_asked_is_ignored(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = two_jobs()
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-je3", xid(48))
        await checkpoint_is(c, handle, "asked")
        incident = requested_incident(fleet)
        await relay_answer(handle, incident, answer_json(incident), job="ml/other")
        state = await assert_eventually(
            lambda: c.state(handle),
            lambda s: (
                "answer ignored: ml/other-0: this pod was not asked to checkpoint" in decisions(s)
            ),
        )
        assert state.checkpoint == "asked"
        for name in (LLM, EVAL):
            await relay_answer(handle, incident, answer_json(incident), job=name)
        assert (await handle.result()).outcome == Outcome.REPAIRED


async def test_at_the_deadline_the_node_is_drained_with_the_answers_it_has(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = two_jobs()
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-je4", xid(48))
        await checkpoint_is(c, handle, "asked")
        incident = requested_incident(fleet)
        await relay_answer(handle, incident, answer_json(incident), job=EVAL)
        await checkpoint_is(c, handle, "ml/llm: asked; ml/eval: saved at step 1200")
        result = await handle.result()
        state = await c.state(handle)
    assert result.outcome == Outcome.REPAIRED
    assert state.checkpoint == "ml/llm: deadline passed; ml/eval: saved at step 1200"
    assert "wait over: deadline passed" in decisions(state)


async def test_the_wait_ends_when_the_jobs_still_on_the_node_have_answered(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = two_jobs()
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-je5", xid(48))
        await checkpoint_is(c, handle, "asked")
        incident = requested_incident(fleet)
        await relay_answer(handle, incident, answer_json(incident), job=LLM)
        fleet.node_jobs = [on_node(job("llm"))]  # the eval job finished
        await relay_pod_ended(handle, incident)
        result = await handle.result()
        state = await c.state(handle)
    assert result.outcome == Outcome.REPAIRED
    assert "wait over: every asked job still on the node answered" in decisions(state)
    assert state.checkpoint == "ml/llm: saved at step 1200; ml/eval: left the node"


async def test_a_when_idle_wait_sees_the_job_end_without_word_from_the_relay(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    # The relay restarted while the job's pod was deleted: no signal ever comes.
    still = on_node(job(supported=False))
    fleet = FakeFleet(node_jobs=[still, still, on_node()])
    pol = policy()
    pol = pol.model_copy(
        update={"jobs": pol.jobs.model_copy(update={"recheck_interval": timedelta(minutes=10)})}
    )
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-je6", xid(63), pol=pol)  # when_idle: up to 24 h
        result = await handle.result()
        state = await c.state(handle)
    assert result.outcome == Outcome.REPAIRED
    assert "wait over: no GPU work left on the node" in decisions(state)
    [drain] = [a for a in state.attempts if a.rung == Rung.STOP_GPU_WORK]
    assert drain.started_at - state.started_at < timedelta(minutes=30)
    # A look that finds the same jobs says nothing: a day of them would fill the log.
    assert len([d for d in decisions(state) if d.startswith("on the node")]) == 2


async def test_a_new_worker_keeps_waiting_for_the_job_that_has_not_answered(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = two_jobs()
    async with cluster(dev_env, task_queue, fleet) as c:
        handle = await c.report("gpu-je7", xid(48))
        await checkpoint_is(c, handle, "asked")
        incident = requested_incident(fleet)
        await relay_answer(handle, incident, answer_json(incident), job=LLM)
        await checkpoint_is(c, handle, "ml/llm: saved at step 1200; ml/eval: asked")
    # The first worker is gone; the new one rebuilds the wait, answers and all, from history.
    async with cluster(dev_env, task_queue, fleet) as c:
        await checkpoint_is(c, handle, "ml/llm: saved at step 1200; ml/eval: asked")
        await relay_answer(handle, incident, answer_json(incident, step=5), job=LLM)
        await relay_answer(handle, incident, answer_json(incident, step=9), job=EVAL)
        result = await handle.result()
        state = await c.state(handle)
    assert result.outcome == Outcome.REPAIRED
    assert state.checkpoint == "ml/llm: saved at step 1200; ml/eval: saved at step 9"
    assert fleet.called(A.REQUEST_CHECKPOINT) == 1


async def test_an_answer_that_comes_while_the_request_is_written_is_judged_after_it(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    gate = asyncio.Event()
    fleet = FakeFleet(node_jobs=[on_node(job("llm"))], request_gate=gate)
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-je7", xid(48))
        await assert_eventually(
            lambda: asyncio.sleep(0, fleet.called(A.REQUEST_CHECKPOINT)), lambda n: n == 1
        )
        incident = requested_incident(fleet)
        await relay_answer(handle, incident, answer_json(incident), job=LLM)
        gate.set()
        result = await handle.result()
        state = await c.state(handle)
    assert result.outcome == Outcome.REPAIRED
    assert state.checkpoint == "saved at step 1200"
    assert not [line for line in decisions(state) if line.startswith("answer ignored")]
