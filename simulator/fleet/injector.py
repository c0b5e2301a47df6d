"""Runs the fault sources: a scenario's scripted events and a fault mix's random ones."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterator
from datetime import timedelta

from simulator.fleet.faults import FAULTS, FaultMix, PlannedFault, Scenario, ScenarioEvent
from simulator.fleet.model import Phase
from simulator.fleet.ports import InjectorFleet

log = logging.getLogger(__name__)


class Slots:
    """Which node holds each of the fleet's slots: the places a mix's node ordinals name.

    A pool of N nodes has slots 0..N-1, in pool order across the fleet. The first
    nodes take them in name order; a node that arrives later (a replacement) takes
    its pool's lowest free slot, so it stands where the node it replaced stood. A
    node that finds none free (it came up before its predecessor was gone) waits in
    overflow and moves into the next slot that frees. A planned fault's ordinal so
    always names the same slot, whatever the policy did to the nodes before.
    """

    def __init__(self, pools: list[tuple[str, int]]) -> None:
        self._holders: dict[str, list[str | None]] = {name: [None] * n for name, n in pools}
        self._first: dict[str, list[str | None]] = {name: [None] * n for name, n in pools}
        self._overflow: dict[str, list[str]] = {name: [] for name, _ in pools}
        self._order = [(name, i) for name, n in pools for i in range(n)]

    def __len__(self) -> int:
        return len(self._order)

    def added(self, name: str, pool: str) -> None:
        """Node ``name`` of ``pool`` exists now."""
        holders = self._holders[pool]
        for i, holder in enumerate(holders):
            if holder is None:
                holders[i] = name
                if self._first[pool][i] is None:
                    self._first[pool][i] = name
                return
        self._overflow[pool].append(name)

    def removed(self, name: str, pool: str) -> None:
        """Node ``name`` of ``pool`` is gone."""
        holders, overflow = self._holders[pool], self._overflow[pool]
        if name in overflow:
            overflow.remove(name)
            return
        if name in holders:
            holders[holders.index(name)] = overflow.pop(0) if overflow else None

    def holder(self, ordinal: float) -> str | None:
        """The node in the slot that ``ordinal`` (in [0, 1)) names, if the slot has one."""
        if not self._order:
            return None
        pool, index = self._slot(ordinal)
        return self._holders[pool][index]

    def first_holder(self, ordinal: float) -> str | None:
        """The node that held the slot first: its host, until a replacement came."""
        if not self._order:
            return None
        pool, index = self._slot(ordinal)
        return self._first[pool][index]

    def _slot(self, ordinal: float) -> tuple[str, int]:
        return self._order[min(int(ordinal * len(self._order)), len(self._order) - 1)]


class FaultInjector:
    """Schedules the scenario's events and the mix's faults on the fleet.

    Args:
        fleet: The fleet to inject into.
        scenario: Scripted events (simulated times from the fleet's start).
        mix: Random faults; node and GPU drawn from a seeded generator.
        seed: Seed of the mix and of the scenario's random target choices.
    """

    def __init__(
        self,
        fleet: InjectorFleet,
        scenario: Scenario | None,
        mix: FaultMix | None,
        seed: int,
        *,
        slots: Slots | None = None,
    ) -> None:
        self._fleet = fleet
        self._scenario = scenario
        self._mix = mix
        self._rng = random.Random(seed + 1)
        self.slots = slots or Slots([(p.name, p.nodes) for p in fleet.config.pools])
        self._planned: Iterator[PlannedFault] | None = (
            mix.events(seed, fleet.config.total_nodes) if mix is not None else None
        )

    def start(self) -> None:
        """Schedule the scenario and the first fault of the mix."""
        if self._scenario is not None:
            for event in self._scenario.ordered():
                self._fleet.scheduler.call_at(event.at.total_seconds(), self._scripted_at(event))
        self._next_planned()

    def _scripted_at(self, event: ScenarioEvent) -> Callable[[], None]:
        return lambda: self._scripted(event)

    def _next_planned(self) -> None:
        if self._planned is None:
            return
        planned = next(self._planned)
        until = self._fleet.config.faults_until
        if until is not None and planned.at > until.total_seconds():
            self._planned = None  # the timeline ends here
            return
        self._fleet.scheduler.call_at(planned.at, lambda: self._random(planned))

    def _running(self, pool: str | None) -> list[str]:
        fleet = self._fleet
        with fleet.lock:
            return sorted(
                n.name
                for n in fleet.nodes.values()
                if n.phase is Phase.RUNNING and (pool is None or n.pool == pool)
            )

    def _healthy_first(self, pool: str | None, wanted: int) -> list[str]:
        """``wanted`` running nodes at random, fault-free and schedulable ones first.

        A scenario's "count nodes of a pool" means that many more sick nodes:
        landing on a node that already has a fault (or is being repaired)
        would show one incident where the scenario meant two.
        """
        fleet = self._fleet
        with fleet.lock:
            running = [
                n
                for n in fleet.nodes.values()
                if n.phase is Phase.RUNNING and (pool is None or n.pool == pool)
            ]
            healthy = sorted(n.name for n in running if not n.faults and n.k8s_schedulable)
            others = sorted(n.name for n in running if n.name not in set(healthy))
        chosen = self._rng.sample(healthy, min(wanted, len(healthy)))
        if len(chosen) < wanted:
            chosen += self._rng.sample(others, min(wanted - len(chosen), len(others)))
        return chosen

    def _random(self, planned: PlannedFault) -> None:
        """Inject a planned fault on the node in its slot; none there or not running: skipped.

        The target depends on the plan alone (not on which nodes run now), so
        every policy sees the same faults at the same places; a slot whose node
        is rebooting or being replaced cannot fault and the skip is counted.
        """
        try:
            fleet = self._fleet
            with fleet.lock:
                name = self.slots.holder(planned.ordinal)
                node = fleet.nodes.get(name) if name is not None else None
                running = node is not None and node.phase is Phase.RUNNING
                fresh = planned.lemon and name != self.slots.first_holder(planned.ordinal)
            if fresh:
                fleet.count("mix.lemon_replaced")  # a fresh host is not the lemon
                return
            if name is None or not running:
                fleet.count("mix.skipped")
                return
            gpu = None
            if FAULTS[planned.kind].scope == "gpu":
                gpus = fleet.node_gpus(name)
                gpu = min(int(planned.gpu_draw * gpus), gpus - 1)
            lasts = timedelta(seconds=planned.lasts) if planned.lasts is not None else None
            fleet.inject(planned.kind, name, gpu=gpu, source="mix", clears_after=lasts)
        finally:
            self._next_planned()

    def _scripted(self, event: ScenarioEvent) -> None:
        fleet = self._fleet
        if event.node is not None:
            targets = [event.node]
        else:
            candidates = self._running(event.pool)
            if event.count is not None:
                wanted = event.count
            elif event.fraction is not None:
                wanted = max(1, round(event.fraction * len(candidates)))
            else:
                wanted = 1
            if wanted > len(candidates):
                log.warning(
                    "scenario at %s: %d node(s) wanted, %d running",
                    event.at,
                    wanted,
                    len(candidates),
                )
            targets = self._healthy_first(event.pool, wanted)
        for name in targets:
            gpu = event.gpu
            if gpu is None and FAULTS[event.fault].scope == "gpu":
                gpu = self._rng.randrange(fleet.node_gpus(name)) if fleet.has_node(name) else 0
            try:
                fleet.inject(
                    event.fault,
                    name,
                    gpu=gpu,
                    xid=event.xid,
                    clears_after=event.clears_after,
                    source="scenario",
                )
            except ValueError as err:
                # A node named by the scenario may be gone by then (replaced).
                log.warning("scenario event at %s skipped: %s", event.at, err)
                fleet.count("scenario.skipped")
