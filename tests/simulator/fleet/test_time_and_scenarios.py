"""Simulated time: scenarios inject on time, the fault mix repeats, the factor scales delays."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import timedelta

import pytest

from simulator.fleet import FaultMix, Fleet, Scenario, ScenarioEvent, SimClock
from simulator.kube_api import NODES
from tests.conftest import assert_eventually
from tests.simulator.fleet.conftest import condition_status


def test_the_clock_scales_simulated_time() -> None:
    clock = SimClock(time_factor=120)
    assert clock.now() == 0.0
    assert clock.to_real(240) == 2.0
    clock.start()
    time.sleep(0.05)
    assert clock.now() == pytest.approx(6.0, abs=4.0)
    with pytest.raises(ValueError, match="positive"):
        SimClock(time_factor=0)


async def test_a_scenario_injects_at_its_scaled_time(make_fleet: Callable[..., Fleet]) -> None:
    scenario = Scenario(
        events=[
            ScenarioEvent(
                at=timedelta(seconds=90), fault="fallen_off_bus", node="h100-0002", gpu=4
            ),
            ScenarioEvent(at=timedelta(seconds=90), fault="false_positive", pool="p5", count=2),
        ]
    )
    started = time.monotonic()
    fleet = make_fleet(time_factor=120, scenario=scenario)  # 90 s simulated = 0.75 s real
    assert fleet.node("h100-0002").faults == []
    log = await assert_eventually(
        lambda: asyncio.to_thread(fleet.fault_log), lambda found: len(found) == 3, timeout=5
    )
    assert time.monotonic() - started >= 0.75
    assert all(entry.at >= 90 for entry in log)
    assert fleet.node("h100-0002").faults == ["fallen_off_bus on GPU 4 (Xid 79)"]
    spurious = sorted(e.node for e in log if e.kind == "false_positive")
    assert len(spurious) == 2
    assert all(n.startswith("p5-") for n in spurious)


async def test_the_fault_mix_injects_the_same_faults_for_a_seed(
    make_fleet: Callable[..., Fleet],
) -> None:
    # About two faults per simulated hour on six nodes; 3 hours simulated per real second.
    mix = FaultMix.llama3(multiplier=2000)
    runs = []
    for _ in range(2):
        fleet = make_fleet(time_factor=10_800, fault_mix=mix, seed=11)
        log = await assert_eventually(
            lambda fleet=fleet: asyncio.to_thread(fleet.fault_log),
            lambda found: len(found) >= 4,
            timeout=10,
        )
        runs.append([(e.node, e.kind, e.gpu) for e in log[:4]])
        fleet.stop()
    assert runs[0] == runs[1]


async def test_the_time_factor_scales_the_reboot(make_fleet: Callable[..., Fleet]) -> None:
    # A reboot takes 4 simulated minutes: 1 s at factor 240.
    fleet = make_fleet(time_factor=240)
    ec2 = fleet.cloud.client("ec2")
    before = fleet.boot_id("h100-0000")
    started = time.monotonic()
    await asyncio.to_thread(
        ec2.reboot_instances, InstanceIds=[fleet.nodes["h100-0000"].instance_id]
    )
    await assert_eventually(
        lambda: asyncio.to_thread(condition_status, fleet, "h100-0000", "Ready"),
        lambda status: status == "False",
    )
    await assert_eventually(
        lambda: asyncio.to_thread(condition_status, fleet, "h100-0000", "Ready"),
        lambda status: status == "True",
        timeout=10,
    )
    elapsed = time.monotonic() - started
    assert 0.95 <= elapsed < 6.0
    assert fleet.store.get(NODES, "h100-0000")["status"]["nodeInfo"]["bootID"] != before
