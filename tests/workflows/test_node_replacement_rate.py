"""Issue 35: a pool's replacements are budgeted per window, not only capped at once.

A burn-in check that wrongly fails every new node would otherwise replace new
nodes endlessly, two at a time, and the breaker would never trip (replaced
nodes leave). Past ``replacement.rate``'s budget a person decides.
"""

from datetime import timedelta

from temporalio.testing import WorkflowEnvironment

from gpu_remediation.contracts import CountReplacementsInput
from gpu_remediation.ids import Activities as A
from gpu_remediation.models import FaultClass, Outcome, Rung
from gpu_remediation.policy import Policy, ReplacementRatePolicy
from gpu_remediation.policy_loader import parse_policy
from tests.conftest import assert_eventually
from tests.doubles import FakeFleet
from tests.workflows.node_support import cluster, policy, with_fault_class, xid


def replace_first() -> Policy:
    return with_fault_class(policy(), FaultClass.GPU_FALLEN_OFF_BUS, start_rung=Rung.REPLACE)


async def test_a_pool_past_its_replacement_budget_hands_the_node_to_a_person(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    # 10 nodes: the budget is min_count, 3, per 24 h; three were replaced already.
    fleet = FakeFleet(pool_total=10, replaced_in_pool=3)
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-r1", xid(79), pol=replace_first())
        result = await handle.result()
        state = await c.state(handle)
    assert result.outcome == Outcome.ESCALATED
    assert fleet.called(A.DELETE_NODE_CLAIM) == 0
    spent = [d for d in state.decisions if d.action == "rate budget spent"]
    assert spent
    assert "3 node(s) of pool gpu-pool replaced within 1 day" in spent[0].reason
    (asked,) = [arg for name, arg in fleet.calls if name == A.COUNT_REPLACEMENTS]
    assert isinstance(asked, CountReplacementsInput)
    assert asked.node_pool == "gpu-pool"


async def test_a_pool_within_its_budget_replaces(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    fleet = FakeFleet(pool_total=10, replaced_in_pool=2)
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-r2", xid(79), pol=replace_first())
        result = await handle.result()
    assert result.outcome == Outcome.REPLACED
    assert fleet.called(A.DELETE_NODE_CLAIM) == 1


def test_the_budget_is_a_share_of_the_pool_with_a_floor_for_small_pools() -> None:
    rate = ReplacementRatePolicy()
    assert rate.budget(10) == 3
    assert rate.budget(500) == 50
    assert ReplacementRatePolicy(max_fraction=0.02, min_count=1).budget(120) == 2


def test_a_pool_may_have_its_own_budget_and_older_policies_get_the_default() -> None:
    pol = parse_policy("pools: {p5: {replacement: {rate: {min_count: 8, window: 12h}}}}")
    p5 = pol.for_pool("p5").replacement.rate
    assert (p5.min_count, p5.window) == (8, timedelta(hours=12))
    assert pol.replacement.rate == ReplacementRatePolicy()


async def test_a_breaker_that_opens_under_the_permit_holds_and_spends_no_attempt(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    # Issue 35: it used to hand the node to a person. The breaker checks, in order:
    # before the step (closed), the rate budget's pool size, under the permit (open).
    fleet = FakeFleet(pool_total=10, pool_unhealthy=6, pool_unhealthy_then=[1, 1])
    async with cluster(time_skipping_env, task_queue, fleet) as c:
        handle = await c.report("gpu-r3", xid(79), pol=replace_first())
        await assert_eventually(lambda: c.state(handle), lambda s: s.stage == "held")
        assert fleet.called(A.DELETE_NODE_CLAIM) == 0
        fleet.pool_unhealthy = 1  # the pool healed
        result = await handle.result()
        state = await c.state(handle)
    assert result.outcome == Outcome.REPLACED  # the one replace attempt a week was not spent
    assert fleet.called(A.DELETE_NODE_CLAIM) == 1
    assert fleet.called(A.ESCALATE) == 0
    held = [a for a in state.attempts if a.rung == Rung.REPLACE and not a.ran]
    assert [a.result for a in held] == ["breaker opened under the permit: held"]
