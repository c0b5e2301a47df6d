"""Issue 39: a hand-over is told to the policy's webhook; a failed notice never blocks it."""

from datetime import timedelta

from temporalio.testing import WorkflowEnvironment

from gpu_remediation.ids import Activities as A
from gpu_remediation.models import FaultClass, Outcome, Rung
from gpu_remediation.policy import NotifyPolicy, Policy
from tests.doubles import FakeFleet
from tests.workflows.node_support import cluster, policy, with_fault_class, xid

NOTIFY = NotifyPolicy(url="https://hooks.example.com/gpu", attempts=2)


def escalating(notify: NotifyPolicy | None) -> Policy:
    """Xid 79 handed straight to people, with a short hold."""
    base = with_fault_class(policy(), FaultClass.GPU_FALLEN_OFF_BUS, start_rung=Rung.ESCALATE)
    operator = base.operator.model_copy(update={"escalation_hold": timedelta(minutes=30)})
    escalation = base.escalation.model_copy(update={"notify": notify})
    return base.model_copy(update={"operator": operator, "escalation": escalation})


async def test_the_webhook_is_told_once_with_the_incident_s_reason_and_reference(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = FakeFleet()
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-n1", xid(79), pol=escalating(NOTIFY))
        result = await handle.result()
        state = await c.state(handle)
    assert result.outcome == Outcome.ESCALATED
    [sent] = [arg for name, arg in fleet.calls if name == A.NOTIFY_HAND_OVER]
    assert sent.node == "gpu-n1"  # type: ignore[attr-defined]
    assert sent.cluster == c.name  # type: ignore[attr-defined]
    assert sent.reference.startswith("TICKET-")  # type: ignore[attr-defined]
    assert sent.notify == NOTIFY  # type: ignore[attr-defined]
    assert "gpu_fallen_off_bus, at escalate" in sent.summary  # type: ignore[attr-defined]
    assert any(d.action == "people notified" for d in state.decisions)


async def test_a_failed_notice_is_logged_and_the_hand_over_stands(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = FakeFleet(fail={A.NOTIFY_HAND_OVER})
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-n2", xid(79), pol=escalating(NOTIFY))
        result = await handle.result()
        state = await c.state(handle)
    assert result.outcome == Outcome.ESCALATED
    assert fleet.called(A.NOTIFY_HAND_OVER) >= 1
    [failed] = [d for d in state.decisions if d.action == "people not notified"]
    assert "failed (scripted)" in failed.reason


async def test_without_a_webhook_nothing_is_sent(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = FakeFleet()
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-n3", xid(79), pol=escalating(None))
        assert (await handle.result()).outcome == Outcome.ESCALATED
    assert fleet.called(A.NOTIFY_HAND_OVER) == 0
