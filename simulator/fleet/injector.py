"""Runs the fault sources: a scenario's scripted events and a fault mix's random ones."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterator

from simulator.fleet.faults import FAULTS, FaultMix, PlannedFault, Scenario, ScenarioEvent
from simulator.fleet.model import Phase
from simulator.fleet.ports import InjectorFleet

log = logging.getLogger(__name__)


class FaultInjector:
    """Schedules the scenario's events and the mix's faults on the fleet.

    Args:
        fleet: The fleet to inject into.
        scenario: Scripted events (simulated times from the fleet's start).
        mix: Random faults; node and GPU drawn from a seeded generator.
        seed: Seed of the mix and of the scenario's random target choices.
    """

    def __init__(
        self, fleet: InjectorFleet, scenario: Scenario | None, mix: FaultMix | None, seed: int
    ) -> None:
        self._fleet = fleet
        self._scenario = scenario
        self._mix = mix
        self._rng = random.Random(seed + 1)
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
        try:
            candidates = self._running(None)
            if candidates:
                name = candidates[min(int(planned.ordinal * len(candidates)), len(candidates) - 1)]
                gpu = None
                if FAULTS[planned.kind].scope == "gpu":
                    gpus = self._fleet.node_gpus(name)
                    gpu = min(int(planned.gpu_draw * gpus), gpus - 1)
                self._fleet.inject(planned.kind, name, gpu=gpu, source="mix")
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
