"""Issue 34: a waiting incident flooded with signals continues as new, state and all.

Every signal is history, even one the incident ignores; Temporal ends a run
at 51,200 events. An incident waits for days in a hand-over's hold or a
cooldown, so there it starts a fresh history once its own grows past
``history_limit`` (10,000 by default; 100 here), carrying its whole state, and
goes on with the same wait: the node stays where it was, nothing is done twice.
"""

from datetime import timedelta

from temporalio.testing import WorkflowEnvironment

from gpu_remediation.ids import Activities as A
from gpu_remediation.ids import Updates
from gpu_remediation.models import FaultClass, Outcome, Rung
from gpu_remediation.workflow_models import AbortInput, NodeRemediationState
from tests.conftest import assert_eventually
from tests.doubles import FakeFleet
from tests.workflows.node_support import (
    Cluster,
    NodeHandle,
    cluster,
    policy,
    with_fault_class,
    xid,
)

FLOOD = 40
"""Signals sent: at about four events each, past the limit of 100 more than once."""


async def _flood(c: Cluster, handle: NodeHandle, node: str) -> None:
    for _ in range(FLOOD):
        await c.signal(handle, node, xid(79))


def _continued(state: NodeRemediationState) -> int:
    return sum(d.action == "continued as new" for d in state.decisions)


async def test_a_flooded_hand_over_continues_as_new_and_still_answers_its_operator(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    pol = with_fault_class(policy(), FaultClass.GPU_FALLEN_OFF_BUS, start_rung=Rung.ESCALATE)
    fleet = FakeFleet()
    async with cluster(dev_env, task_queue, fleet) as c:
        c.history_limit = 100
        first = await c.report("gpu-can1", xid(79), pol=pol)
        await assert_eventually(
            lambda: c.state(first), lambda s: s.rung == Rung.ESCALATE and s.waiting_for is not None
        )
        first_run = (await first.describe()).run_id
        await _flood(c, first, "gpu-can1")
        latest = c.client.get_workflow_handle(first.id)
        state = await assert_eventually(
            lambda: c.state(latest),  # type: ignore[arg-type]
            lambda s: _continued(s) >= 1 and s.waiting_for is not None,
        )
        assert (await latest.describe()).run_id != first_run
        assert state.rung == Rung.ESCALATE
        assert state.waiting_for == "an operator: retry, skip or abort"
        await latest.execute_update(
            Updates.ABORT, AbortInput(reason="sent for RMA"), result_type=NodeRemediationState
        )
        result = await first.result()
    assert result.outcome == Outcome.ABORTED
    # Handed over once, quarantined once, released once: the new runs did nothing twice.
    assert (fleet.called(A.ESCALATE), fleet.called(A.QUARANTINE_NODE)) == (1, 1)
    assert fleet.called(A.RELEASE_NODE) == 1


async def test_a_flooded_cooldown_continues_as_new_and_a_relapse_still_climbs(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = FakeFleet()
    pol = policy(cooldown=timedelta(hours=1))
    async with cluster(dev_env, task_queue, fleet) as c:
        c.history_limit = 100
        first = await c.report("gpu-can2", xid(48, gpu=2), pol=pol)
        await assert_eventually(lambda: c.state(first), lambda s: s.stage == "cooldown")
        # Repeats of a cleared report: ignored by the incident, recorded by Temporal.
        for _ in range(FLOOD):
            await c.signal(first, "gpu-can2", xid(48, gpu=2).model_copy(update={"cleared": True}))
        latest = c.client.get_workflow_handle(first.id)
        await assert_eventually(
            lambda: c.state(latest),  # type: ignore[arg-type]
            lambda s: _continued(s) >= 1 and s.stage == "cooldown" and s.waiting_for is not None,
        )
        assert fleet.reboots == 0
        await c.signal(latest, "gpu-can2", xid(48, gpu=2))  # type: ignore[arg-type]
        state = await assert_eventually(
            lambda: c.state(latest),  # type: ignore[arg-type]
            lambda s: s.stage == "cooldown" and s.waiting_for is not None and fleet.reboots == 1,
        )
        # The relapse climbed past the reset the first run had done: its attempts carried.
        assert ("cooldown", "fault returned") in [(d.stage, d.action) for d in state.decisions]
        assert [a.rung for a in state.attempts] == [
            Rung.STOP_GPU_WORK,
            Rung.GPU_RESET,
            Rung.STOP_GPU_WORK,
            Rung.REBOOT,
        ]
        assert fleet.called(A.RESET_GPUS) == 1
        await latest.execute_update(
            Updates.ABORT, AbortInput(reason="end of test"), result_type=NodeRemediationState
        )
        await first.result()


async def test_a_flooded_breaker_hold_continues_as_new_and_climbs_when_the_breaker_closes(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = FakeFleet(pool_total=4, pool_unhealthy=3)
    base = policy()
    pol = policy(breaker=base.breaker.model_copy(update={"recheck_interval": timedelta(seconds=1)}))
    async with cluster(dev_env, task_queue, fleet) as c:
        c.history_limit = 100
        first = await c.report("gpu-can3", xid(79), pol=pol)
        await assert_eventually(lambda: c.state(first), lambda s: s.stage == "held")
        await _flood(c, first, "gpu-can3")
        latest = c.client.get_workflow_handle(first.id)
        await assert_eventually(
            lambda: c.state(latest),  # type: ignore[arg-type]
            lambda s: _continued(s) >= 1 and s.stage == "held" and s.waiting_for is not None,
        )
        assert fleet.reboots == 0, "still held by the breaker"
        fleet.pool_unhealthy = 1
        result = await first.result()
        state = await c.state(latest)  # type: ignore[arg-type]
    assert result.outcome == Outcome.REPAIRED
    assert fleet.reboots == 1
    assert ("breaker", "closed") in [(d.stage, d.action) for d in state.decisions]
