"""Scenario targets land on healthy nodes; simulated time can wait for the clients."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta

import pytest

from simulator.fleet import Fleet, PoolSpec, Scenario, ScenarioEvent
from tests.conftest import assert_eventually
from tests.simulator.fleet.conftest import small_config


@pytest.fixture
def paused_fleet() -> Iterator[Fleet]:
    scenario = Scenario(
        events=[
            ScenarioEvent(at=timedelta(seconds=30), fault="row_remap_failure", pool="h100", count=3)
        ]
    )
    pools = [PoolSpec(name="h100", nodes=8), PoolSpec(name="p5", nodes=2)]
    fleet = Fleet(small_config(pools=pools, scenario=scenario, time_factor=600))
    fleet.start(run_clock=False)
    yield fleet
    fleet.stop()


async def test_pool_targets_are_nodes_without_a_fault(paused_fleet: Fleet) -> None:
    fleet = paused_fleet
    for index in (0, 2, 3, 5, 7):
        fleet.inject("application", f"h100-{index:04d}", gpu=index)
    fleet.start_clock()
    log = await assert_eventually(
        lambda: asyncio.to_thread(fleet.fault_log),
        lambda found: len([e for e in found if e.source == "scenario"]) == 3,
        timeout=5,
    )
    scripted = sorted(e.node for e in log if e.source == "scenario")
    assert scripted == ["h100-0001", "h100-0004", "h100-0006"]  # the healthy ones


async def test_simulated_time_waits_for_start_clock(paused_fleet: Fleet) -> None:
    fleet = paused_fleet
    await asyncio.sleep(0.2)  # 2 simulated minutes if the clock ran: past the event
    assert fleet.snapshot().sim_seconds == 0
    assert fleet.fault_log() == []
    fleet.start_clock()
    await assert_eventually(
        lambda: asyncio.to_thread(fleet.fault_log), lambda found: len(found) == 3, timeout=5
    )


async def test_work_scheduled_before_the_clock_starts_waits_its_simulated_delay(
    paused_fleet: Fleet,
) -> None:
    fleet = paused_fleet
    fleet.inject("application", "p5-0000", gpu=0, clears_after=timedelta(minutes=5))
    fleet.start_clock()  # 5 simulated minutes = 0.5 s from now at 600x
    await asyncio.sleep(0.2)
    assert fleet.node("p5-0000").faults != []
    await assert_eventually(
        lambda: asyncio.to_thread(lambda: fleet.node("p5-0000").faults), lambda f: f == []
    )
