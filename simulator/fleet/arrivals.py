"""Nodes that come up faulty: new capacity from Karpenter and hosts back from a reboot.

A node that arrives broken (dead on arrival) is what the admission gate is
for: without it the node takes the next gang job and fails it. Which arrivals
are faulty is drawn from the seed (or listed by launch number in the
configuration, for scenarios that must show one); the fault is injected like any
other, so the node agent, DCGM and the EFA checks report it.

Each arrival draws from a generator of its own, seeded with the fleet's seed and
the arrival's place (the fleet's Nth launch; a node's Nth reboot), not from the
fleet's shared generator: what else a policy did before (how many boot ids it
drew) cannot change whether the Nth launch is faulty, so a comparison's policies
meet the same bad capacity for the same launches. A policy that launches or
reboots more meets more of it, which is the trade-off the gate is measured on.
"""

from __future__ import annotations

import logging
import random
from collections import Counter

from simulator.fleet.config import AdmissionSimConfig
from simulator.fleet.faults import FaultKind
from simulator.fleet.ports import ArrivalsFleet

log = logging.getLogger(__name__)


class Arrivals:
    """Gives some new and rebooted nodes a fault as they come up.

    Args:
        fleet: The fleet the nodes belong to.
        config: Probabilities, the launches that are faulty, the fault kinds.
    """

    def __init__(self, fleet: ArrivalsFleet, config: AdmissionSimConfig) -> None:
        self._fleet = fleet
        self._config = config
        self._kinds = [FaultKind(kind) for kind in config.faults]
        self._launches = 0
        self._reboots: Counter[str] = Counter()

    def launched(self, name: str) -> None:
        """A Karpenter launch registered node ``name`` (its first boot)."""
        with self._fleet.lock:
            self._launches += 1
            number = self._launches
        rng = self._draws(f"launch/{number}")
        listed = number in self._config.faulty_launches
        if rng.random() < self._config.new_node_fault_probability or listed:
            self._break(name, "arrival", rng)

    def rebooted(self, name: str) -> None:
        """Node ``name`` came back from a reboot."""
        with self._fleet.lock:
            self._reboots[name] += 1
            number = self._reboots[name]
        rng = self._draws(f"reboot/{name}/{number}")
        if rng.random() < self._config.reboot_fault_probability:
            self._break(name, "reboot_arrival", rng)

    def _draws(self, place: str) -> random.Random:
        """The generator of one arrival: the seed and the arrival's place alone."""
        return random.Random(f"{self._fleet.config.seed}/{place}")

    def _break(self, name: str, source: str, rng: random.Random) -> None:
        fleet = self._fleet
        kind = self._kinds[rng.randrange(len(self._kinds))]
        gpu = rng.randrange(fleet.node_gpus(name))
        log.info("%s comes up faulty: %s", name, kind.value)
        fleet.count(f"arrivals.{source}_faulty")
        fleet.inject(kind, name, gpu=gpu, source=source)
