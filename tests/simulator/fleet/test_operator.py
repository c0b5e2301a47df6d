"""The human operator model: tickets (needs-human) answered after seeded delays."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from gpu_remediation.contracts import QUARANTINE_TAINT_KEY
from simulator.fleet import Fleet
from simulator.fleet.config import PoolSpec
from simulator.fleet.operator import NEEDS_HUMAN_LABEL
from simulator.fleet.operator_config import LogNormal, OperatorConfig
from simulator.kube_api import NODES
from tests.conftest import assert_eventually

QUICK = OperatorConfig(
    response=LogNormal(median=timedelta(minutes=10), sigma=0),
    repair=LogNormal(median=timedelta(minutes=20), sigma=0),
    staff=1,
)


def escalate(fleet: Fleet, name: str) -> None:
    """What the remediation does to a node it hands over after quarantine."""

    def change(node: dict[str, Any]) -> None:
        node["metadata"].setdefault("labels", {})[NEEDS_HUMAN_LABEL] = "true"
        node["spec"]["unschedulable"] = True
        node["spec"]["taints"] = [{"key": QUARANTINE_TAINT_KEY, "effect": "NoSchedule"}]

    fleet.store.mutate(NODES, name, None, change)


def node(fleet: Fleet, name: str) -> dict[str, Any]:
    return fleet.store.get(NODES, name)


async def test_a_resettable_fault_is_repaired_and_the_node_handed_back_after_the_delays(
    make_fleet: Callable[..., Fleet],
) -> None:
    fleet = make_fleet(operator=QUICK)
    fleet.inject("xid_reset", "h100-0000", gpu=1)
    escalate(fleet, "h100-0000")
    asked = fleet.clock.now()
    await assert_eventually(
        lambda: asyncio.to_thread(lambda: fleet.counters["operator.repaired"]),
        lambda n: n == 1,
    )
    assert fleet.clock.now() - asked >= 30 * 60  # response + repair, simulated
    assert fleet.active_faults("h100-0000") == []
    obj = node(fleet, "h100-0000")
    assert NEEDS_HUMAN_LABEL not in obj["metadata"]["labels"]
    assert not obj["spec"].get("unschedulable")
    assert not obj["spec"].get("taints")


async def test_a_fault_only_new_hardware_fixes_goes_for_rma(
    make_fleet: Callable[..., Fleet],
) -> None:
    fleet = make_fleet(operator=QUICK)
    fleet.inject("row_remap_failure", "p5-0001", gpu=0)
    escalate(fleet, "p5-0001")
    await assert_eventually(
        lambda: asyncio.to_thread(lambda: fleet.has_node("p5-0001")), lambda present: not present
    )
    assert fleet.counters["operator.rma"] == 1
    assert fleet.counters["operator.tickets"] == 1  # its later changes open no second ticket
    assert fleet.counters["operator.repaired"] == 0


async def test_one_person_works_tickets_one_after_the_other(
    make_fleet: Callable[..., Fleet],
) -> None:
    fleet = make_fleet(operator=QUICK)
    for name in ("h100-0001", "h100-0002"):
        fleet.inject("fallen_off_bus", name, gpu=0)
        escalate(fleet, name)
    start = fleet.clock.now()
    await assert_eventually(
        lambda: asyncio.to_thread(lambda: fleet.counters["operator.repaired"]),
        lambda n: n == 2,
    )
    # 10 min response, then 20 min each, back to back: at least 50 simulated minutes.
    assert fleet.clock.now() - start >= 50 * 60


async def test_a_ticket_waiting_for_its_response_does_not_hold_a_person(
    make_fleet: Callable[..., Fleet],
) -> None:
    # One person; the response times vary. A ticket whose page goes unanswered for
    # hours must not keep the only person from a ticket answered in minutes.
    fleet = make_fleet(
        operator=OperatorConfig(
            response=LogNormal(median=timedelta(minutes=30), sigma=1.0),
            repair=LogNormal(median=timedelta(minutes=20), sigma=0),
            staff=1,
        ),
        pools=[PoolSpec(name="h100", nodes=40)],
    )
    operator = fleet.operator
    assert operator is not None
    by_response = sorted(fleet.nodes, key=lambda n: operator.draws(n, 0)[0])
    fast, slow = by_response[0], by_response[-1]
    # The fast ticket is done (response + 20 min) well before the slow one is looked at.
    assert operator.draws(slow, 0)[0] - operator.draws(fast, 0)[0] > 2 * 3600
    for name in (slow, fast):
        fleet.inject("fallen_off_bus", name, gpu=0)
        escalate(fleet, name)
    await assert_eventually(
        lambda: asyncio.to_thread(lambda: fleet.active_faults(fast)), lambda faults: not faults
    )
    assert fleet.active_faults(slow)  # still waiting for its response


async def test_without_an_operator_nobody_answers(make_fleet: Callable[..., Fleet]) -> None:
    fleet = make_fleet()
    fleet.inject("xid_reset", "h100-0000", gpu=1)
    escalate(fleet, "h100-0000")
    await asyncio.sleep(0.5)  # 10 simulated minutes at the test fleet's speed
    assert fleet.active_faults("h100-0000")
    assert "operator.tickets" not in fleet.counters


def test_draws_are_positive_around_the_median_and_seeded() -> None:
    dist = LogNormal(median=timedelta(hours=1), sigma=0.7)
    draws = sorted(dist.draw(random.Random(f"1/n/{i}")) for i in range(2001))
    assert all(d > 0 for d in draws)
    assert 3000 < draws[1000] < 4200
    assert dist.draw(random.Random("1/n/0")) == dist.draw(random.Random("1/n/0"))
