"""Karpenter under the capacity model (issue 36): shortages, Capacity Blocks, overlap.

The fleets here run on a stepped clock moved by the test, as the clock-free comparison
moves it: every event runs at its own simulated time, so launch times, waits and
overlaps come out exact.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

from simulator.fleet import Fleet, SteppedClock
from simulator.fleet.capacity import (
    CapacityModel,
    CapacityReport,
    attempt_draws,
    launch_draws,
)
from simulator.kube_api import NODECLAIMS, NODES
from tests.conftest import assert_eventually
from tests.simulator.fleet.conftest import small_config

LAUNCH_S = 300.0
"""The default node launch (``Durations.node_launch``)."""
DRAIN_TIMEOUT_S = 900.0
"""The default drain timeout (``Durations.drain_timeout``): a PDB that never allows an
eviction keeps the old instance running this long."""


class Stepped:
    """A small fleet on a stepped clock, and the way to move it on."""

    def __init__(self, **overrides: Any) -> None:
        self.clock = SteppedClock()
        self.fleet = Fleet(small_config(**overrides), clock=self.clock).start()

    async def run_to(self, sim_t: float) -> None:
        """Let everything due up to ``sim_t`` run, and wait until it has."""
        self.clock.advance(sim_t)
        self.fleet.scheduler.wake()
        await assert_eventually(
            lambda: asyncio.to_thread(self.clock.now),
            lambda now: now >= sim_t,
            message=f"the fleet reached {sim_t} s",
        )
        # The clock stands at the step once its scheduler found nothing more due.
        await assert_eventually(
            lambda: asyncio.to_thread(self.fleet.scheduler.next_time),
            lambda due: due is None or due > sim_t,
            message="nothing left due",
        )

    def report(self) -> CapacityReport:
        """The fleet's capacity figures now."""
        return self.fleet.snapshot(nodes=False).capacity_report

    def has_node(self, name: str) -> bool:
        """Whether Node ``name`` is in the cluster."""
        return self.fleet.store.exists(NODES, name)


@pytest.fixture
def stepped() -> Iterator[Callable[..., Stepped]]:
    """Start stepped fleets (``small_config`` with overrides); all stop after the test."""
    made: list[Stepped] = []

    def make(**overrides: Any) -> Stepped:
        made.append(Stepped(**overrides))
        return made[-1]

    yield make
    for each in made:
        if not each.fleet.stopping.is_set():
            each.fleet.stop()


def _failed_attempts(model: CapacityModel, seed: int, pool: str, number: int) -> int:
    """Attempts of ``pool``'s ``number``-th NodeClaim that find no capacity before one does."""
    attempt = 1
    while not model.finds_capacity(attempt_draws(seed, pool, number, attempt)):
        attempt += 1
    return attempt - 1


def _provision(fleet: Fleet, pool: str) -> None:
    """New capacity in ``pool``, on the fleet's scheduler (as Karpenter's own work runs)."""

    def provision() -> None:
        fleet.karpenter.provision(fleet.pool(pool))

    fleet.scheduler.call_soon(provision)


def _hold_the_drain(fleet: Fleet, node: str) -> None:
    """A pod on ``node`` that a PodDisruptionBudget never lets Karpenter evict."""
    fleet.store.put_pod("ml", "held", node_name=node, labels={"app": "held"})
    fleet.store.put_pdb("ml", "held", match_labels={"app": "held"}, max_unavailable=0)


async def test_a_launch_that_finds_no_capacity_is_retried_until_one_does(
    stepped: Callable[..., Stepped],
) -> None:
    model = CapacityModel(insufficient_capacity_probability=0.5)
    # A seed whose first h100 NodeClaim meets a shortage (seed 3: three attempts fail).
    seed = next(s for s in range(100) if _failed_attempts(model, s, "h100", 1) >= 2)
    failed = _failed_attempts(model, seed, "h100", 1)
    sim = stepped(capacity=model, seed=seed)
    retry_s = model.capacity_retry.total_seconds()
    ready_at = failed * retry_s + LAUNCH_S

    _provision(sim.fleet, "h100")
    await sim.run_to(ready_at - 1)

    assert not sim.has_node("h100-0003")  # the NodeClaim waits, unlaunched
    assert sim.fleet.store.exists(NODECLAIMS, "h100-0003")
    waiting = sim.report()
    assert (waiting.insufficient_capacity, waiting.launches) == (failed, 0)

    await sim.run_to(ready_at + 1)

    assert sim.has_node("h100-0003")
    report = sim.report()
    assert (report.insufficient_capacity, report.launches) == (failed, 1)
    # Short for the retries, not for the launch time that follows them.
    assert report.node_hours_short == pytest.approx(failed * retry_s / 3600)
    assert report.overlap_instance_hours == 0.0  # new capacity: nothing replaced


async def test_a_pool_without_capacity_stays_short_and_keeps_trying(
    stepped: Callable[..., Stepped],
) -> None:
    sim = stepped(capacity=CapacityModel(insufficient_capacity_probability=1.0))
    _provision(sim.fleet, "p5")

    await sim.run_to(3600.5)

    report = sim.report()
    # Attempts at 0, 3, 6, ... 60 minutes: none found capacity; the wait is still open.
    assert (report.insufficient_capacity, report.launches) == (21, 0)
    assert report.node_hours_short == pytest.approx(3600.5 / 3600)
    assert not sim.has_node("p5-0003")


async def test_a_pools_nth_launch_is_the_same_whatever_launched_before(
    stepped: Callable[..., Stepped],
) -> None:
    model = CapacityModel(launch_sigma=0.6, insufficient_capacity_probability=0.3)
    retry_s = model.capacity_retry.total_seconds()
    expected = {
        f"h100-{2 + n:04d}": _failed_attempts(model, 7, "h100", n) * retry_s
        + model.launch_seconds(timedelta(seconds=LAUNCH_S), launch_draws(7, "h100", n))
        for n in (1, 2, 3)
    }
    # One fleet launches in h100 alone, the other in p5 first; one after the other, as
    # a comparison's policies run (moto's backends are shared within a process).
    for pools in (["h100"] * 3, ["p5", "p5", "h100", "h100", "h100"]):
        sim = stepped(capacity=model)
        for pool in pools:
            _provision(sim.fleet, pool)
        for name, at in sorted(expected.items(), key=lambda item: item[1]):
            await sim.run_to(at - 0.5)
            assert not sim.has_node(name)
            await sim.run_to(at + 0.5)
            assert sim.has_node(name), f"{name} registers at {at:.0f} s after {pools}"
        h100_shortages = sum(_failed_attempts(model, 7, "h100", n) for n in (1, 2, 3))
        p5_shortages = sum(
            _failed_attempts(model, 7, "p5", n) for n in range(1, pools.count("p5") + 1)
        )
        assert sim.report().insufficient_capacity >= h100_shortages
        assert sim.report().insufficient_capacity <= h100_shortages + p5_shortages
        sim.fleet.stop()


async def test_a_replacement_overlaps_the_old_instance_until_its_drain_ends(
    stepped: Callable[..., Stepped],
) -> None:
    sim = stepped()
    _hold_the_drain(sim.fleet, "h100-0001")

    sim.fleet.store.delete_object(NODECLAIMS, "h100-0001")
    await sim.run_to(DRAIN_TIMEOUT_S + 120.5)

    assert not sim.has_node("h100-0001")
    assert sim.has_node("h100-0003")
    report = sim.report()
    # The replacement found capacity at once; the old instance ran on through the drain.
    assert (report.launches, report.node_hours_short) == (1, 0.0)
    assert report.overlap_instance_hours == pytest.approx(DRAIN_TIMEOUT_S / 3600)


async def test_a_capacity_block_replacement_waits_for_the_old_instances_slot(
    stepped: Callable[..., Stepped],
) -> None:
    relaunch = timedelta(minutes=10)
    sim = stepped(capacity=CapacityModel(capacity_block_relaunch=relaunch))
    _hold_the_drain(sim.fleet, "h100-0001")
    waited_s = DRAIN_TIMEOUT_S + relaunch.total_seconds()

    sim.fleet.store.delete_object(NODECLAIMS, "h100-0001")
    await sim.run_to(waited_s + LAUNCH_S - 1)

    assert not sim.has_node("h100-0003")
    await sim.run_to(waited_s + LAUNCH_S + 1)

    assert sim.has_node("h100-0003")
    report = sim.report()
    assert (report.capacity_block_waits, report.insufficient_capacity) == (1, 0)
    assert report.node_hours_short == pytest.approx(waited_s / 3600)
    assert report.overlap_instance_hours == 0.0


async def test_a_pool_of_a_listed_instance_type_launches_at_its_own_median(
    stepped: Callable[..., Stepped],
) -> None:
    # small_config's pools are both p5.48xlarge: give that type 20 minutes.
    model = CapacityModel.model_validate(
        {"launch_by_instance_type": [{"instance_type": "p5.48xlarge", "median": "20m"}]}
    )
    sim = stepped(capacity=model)
    _provision(sim.fleet, "h100")
    await sim.run_to(LAUNCH_S + 1)
    assert not sim.has_node("h100-0003")  # not at node_launch's 5 minutes
    await sim.run_to(20 * 60 + 1)
    assert sim.has_node("h100-0003")
    assert model.launch_median("g6.xlarge", timedelta(minutes=5)) == timedelta(minutes=5)
