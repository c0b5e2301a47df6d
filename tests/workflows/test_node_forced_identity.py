"""A forced request names who forced it, and policy can require that they be authenticated."""

from datetime import UTC, datetime

from temporalio.testing import WorkflowEnvironment

from gpu_remediation.ids import Activities as A
from gpu_remediation.ids import Updates
from gpu_remediation.models import ManualEvidence, Outcome
from gpu_remediation.policy import Policy
from gpu_remediation.workflow_models import NodeRemediationState
from tests.conftest import assert_eventually
from tests.doubles import FakeFleet
from tests.workflows.node_support import cluster, policy


def forced_replace(authenticated_as: str | None) -> ManualEvidence:
    return ManualEvidence(
        observed_at=datetime.now(UTC),
        source="cli",
        runbook="replace",
        requested_by="frank",
        authenticated_as=authenticated_as,
        force=True,
        message="RMA confirmed",
    )


def requiring_authentication() -> Policy:
    pol = policy()
    operator = pol.operator.model_copy(update={"force_requires_authentication": True})
    return pol.model_copy(update={"operator": operator})


def breaker_open() -> FakeFleet:
    return FakeFleet(pool_total=4, pool_unhealthy=3)


async def test_an_authenticated_force_names_the_principal_in_the_log(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = breaker_open()
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report(
            "gpu-f1", forced_replace("mTLS CN=frank,O=ops"), pol=requiring_authentication()
        )
        result = await handle.result()
        state = await c.state(handle)
    assert result.outcome == Outcome.REPLACED
    bypassed = [d.reason for d in state.decisions if d.action == "bypassed"]
    assert bypassed == ["forced by frank (authenticated as mTLS CN=frank,O=ops)"]


async def test_an_unauthenticated_force_is_said_to_be_only_a_name(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = breaker_open()
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-f2", forced_replace(None))
        result = await handle.result()
        state = await c.state(handle)
    assert result.outcome == Outcome.REPLACED
    bypassed = [d.reason for d in state.decisions if d.action == "bypassed"]
    assert bypassed == ["forced by frank (name given by the requester, not authenticated)"]


async def test_policy_can_refuse_to_honour_an_unauthenticated_force(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = breaker_open()
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-f3", forced_replace(None), pol=requiring_authentication())
        state = await assert_eventually(lambda: c.state(handle), lambda s: s.stage == "held")
        await handle.execute_update(
            Updates.ABORT, {"reason": "done looking"}, result_type=NodeRemediationState
        )
        result = await handle.result()
    # The breaker holds the replacement, as for any request that is not forced.
    assert result.outcome == Outcome.ABORTED
    assert fleet.called(A.DELETE_NODE_CLAIM) == 0
    refused = [d for d in state.decisions if d.action == "force not honoured"]
    assert len(refused) == 1
    assert "not authenticated" in refused[0].reason
    assert not [d for d in state.decisions if d.action == "bypassed"]
