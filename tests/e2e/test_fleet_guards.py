"""End to end, many faults at once: the replacement cap and the pool breaker hold."""

from __future__ import annotations

from datetime import datetime, timedelta

from demo.incidents import Incident
from demo.summary import max_overlap, replacement_windows
from gpu_remediation.ids import Queries, step_semaphore_id
from gpu_remediation.semaphore_models import SemaphoreState
from simulator.fleet import PoolSpec, Scenario, ScenarioEvent
from tests.e2e.conftest import MakeStack, attempts, decisions, settled_incidents


async def test_a_burst_of_faults_needing_replacement_never_exceeds_the_cap(
    make_stack: MakeStack,
) -> None:
    # One node in each of four pools: the breaker never opens for a single node
    # (min_unhealthy_nodes), so only the cap (2, the default) holds them back.
    pools = [PoolSpec(name=f"pool{i}", nodes=3) for i in range(4)]
    burst = Scenario(
        events=[
            ScenarioEvent(at=timedelta(seconds=30), fault="row_remap_failure", pool=p.name, count=1)
            for p in pools
        ]
    )
    # 1 real second = 2 simulated minutes: a replacement (~6 min) lasts ~3 s, long
    # enough that all four ask for a permit while the first two hold theirs.
    stack = await make_stack(pools, scenario=burst, time_factor=120)

    incidents = await settled_incidents(stack, 4, timeout=60)

    assert [i.result for i in incidents] == ["replaced"] * 4
    windows = replacement_windows(incidents, incidents[0].started_at)
    assert len(windows) == 4
    # At the cap, never above it: by the incidents' own records and by the fleet's.
    assert max_overlap(windows) == 2
    snapshot = stack.fleet.snapshot()
    assert snapshot.counters["karpenter.terminations"] == 4
    assert 1 <= snapshot.max_replacements_in_flight <= 2
    semaphore = await stack.client.get_workflow_handle(stack.options.semaphore_workflow_id).query(
        Queries.STATE, result_type=SemaphoreState
    )
    assert semaphore.capacity == 2
    assert semaphore.holders == []


async def test_a_false_positive_storm_over_half_a_pool_is_held_and_leaves_nothing_cordoned(
    make_stack: MakeStack,
) -> None:
    # Half of the pool suddenly reports Xid 54 (auxiliary power, which starts at
    # replacement), but the hardware is fine: a shared cause. (Xid 64 resets
    # first since issue 18, so it no longer starts at replacement.) The breaker
    # holds the incidents instead of handing them over; when the reports clear,
    # each node is verified and released.
    storm = Scenario(
        events=[
            ScenarioEvent(
                at=timedelta(seconds=30),
                fault="false_positive",
                pool="h100",
                fraction=0.5,
                xid=54,
                clears_after=timedelta(hours=1),
            )
        ]
    )
    stack = await make_stack([PoolSpec(name="h100", nodes=8)], scenario=storm)

    incidents = await settled_incidents(stack, 4)

    assert len(incidents) == 4
    for incident in incidents:
        assert incident.fault_class == "hardware_failure"
        assert ("breaker", "open") in decisions(incident)
        assert "replace" not in attempts(incident)
        assert incident.result == "recovered"
    snapshot = stack.fleet.snapshot()
    assert snapshot.counters.get("karpenter.terminations", 0) == 0
    assert snapshot.counters.get("reboots", 0) == 0
    assert snapshot.nodes == 8
    unschedulable = [n.name for n in (stack.fleet.node(f"h100-{i:04d}") for i in range(8))]
    unschedulable = [name for name in unschedulable if not stack.fleet.node(name).schedulable]
    assert unschedulable == [], "nothing is left cordoned or tainted"


async def test_a_pool_wide_outage_that_heals_leaves_nothing_rebooted_replaced_or_cordoned(
    make_stack: MakeStack,
) -> None:
    # Most of the pool loses the API server at once (a network or control-plane
    # outage: Ready turns Unknown, the hardware is fine), then it heals by itself.
    outage = Scenario(
        events=[
            ScenarioEvent(
                at=timedelta(seconds=30),
                fault="network_outage",
                pool="h100",
                fraction=0.75,
                clears_after=timedelta(minutes=40),
            )
        ]
    )
    stack = await make_stack([PoolSpec(name="h100", nodes=8)], scenario=outage)

    incidents = await settled_incidents(stack, 6)

    assert len(incidents) == 6
    for incident in incidents:
        assert incident.fault_class == "node_not_ready"
        assert incident.result in ("recovered", "transient"), decisions(incident)
        assert not {"reboot", "replace"} & set(attempts(incident))
    assert any(("breaker", "open") in decisions(i) for i in incidents)
    snapshot = stack.fleet.snapshot()
    assert snapshot.counters.get("reboots", 0) == 0
    assert snapshot.counters.get("karpenter.terminations", 0) == 0
    assert snapshot.nodes == 8
    names = [f"h100-{i:04d}" for i in range(8)]
    unschedulable = [name for name in names if not stack.fleet.node(name).schedulable]
    assert unschedulable == [], "nothing is left cordoned or tainted"


def _drain_windows(incidents: list[Incident]) -> dict[str, list[tuple[datetime, datetime]]]:
    """Pool -> when each incident's jobs were stopped: the drain until the incident's end.

    The drain permit is taken before the drain begins and given back only after
    the node is back in service, so these windows lie inside the permits'.
    """
    windows: dict[str, list[tuple[datetime, datetime]]] = {}
    for incident in incidents:
        assert incident.state is not None
        starts = [a.started_at for a in incident.state.attempts if a.rung.value == "stop_gpu_work"]
        if starts:
            end = incident.state.decisions[-1].at
            windows.setdefault(incident.state.node_pool or "", []).append((starts[0], end))
    return windows


async def test_a_false_report_storm_across_pools_drains_at_most_the_budget_at_once(
    make_stack: MakeStack,
) -> None:
    # Two false reports in each of three pools: one sixth of each pool, under the
    # breaker's fraction, so only the drain budget (2 fleet-wide, 1 per pool)
    # stands between the storm and every job in it.
    pools = [PoolSpec(name=f"pool{i}", nodes=12) for i in range(3)]
    storm = Scenario(
        events=[
            ScenarioEvent(
                at=timedelta(seconds=30),
                fault="false_positive",
                pool=p.name,
                count=2,
                clears_after=timedelta(minutes=30),
            )
            for p in pools
        ]
    )
    policy = "disruption:\n  stop_gpu_work: {fleet: 2, per_pool: 1}\n"
    stack = await make_stack(pools, scenario=storm, policy=policy)

    incidents = await settled_incidents(stack, 6, timeout=60)

    assert len(incidents) == 6
    assert all(("breaker", "open") not in decisions(i) for i in incidents)
    windows = _drain_windows(incidents)
    assert sum(len(w) for w in windows.values()) == 6, "every incident drained its node"
    assert max_overlap([w for pool in windows.values() for w in pool]) == 2
    assert {pool: max_overlap(w) for pool, w in windows.items()} == {p.name: 1 for p in pools}
    drains = step_semaphore_id(stack.options.semaphore_workflow_id, "stop_gpu_work")
    semaphore = await stack.client.get_workflow_handle(drains).query(
        Queries.STATE, result_type=SemaphoreState
    )
    assert (semaphore.capacity, semaphore.holders) == (2, [])
