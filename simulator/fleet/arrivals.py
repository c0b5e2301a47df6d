"""Nodes that come up faulty: new capacity from Karpenter and hosts back from a reboot.

A node that arrives broken (dead on arrival) is what the admission gate is
for: without it the node takes the next gang job and fails it. Which arrivals
are faulty is drawn from the fleet's seeded generator (or listed by launch
number in the configuration, for scenarios that must show one); the fault is
injected like any other, so the node agent, DCGM and the EFA checks report it.
"""

from __future__ import annotations

import logging

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

    def launched(self, name: str) -> None:
        """A Karpenter launch registered node ``name`` (its first boot)."""
        fleet = self._fleet
        with fleet.lock:
            self._launches += 1
            listed = self._launches in self._config.faulty_launches
            faulty = listed or fleet.rng.random() < self._config.new_node_fault_probability
        if faulty:
            self._break(name, "arrival")

    def rebooted(self, name: str) -> None:
        """Node ``name`` came back from a reboot."""
        fleet = self._fleet
        with fleet.lock:
            faulty = fleet.rng.random() < self._config.reboot_fault_probability
        if faulty:
            self._break(name, "reboot_arrival")

    def _break(self, name: str, source: str) -> None:
        fleet = self._fleet
        gpus = fleet.node_gpus(name)
        with fleet.lock:
            kind = self._kinds[fleet.rng.randrange(len(self._kinds))]
            gpu = fleet.rng.randrange(gpus)
        log.info("%s comes up faulty: %s", name, kind.value)
        fleet.count(f"arrivals.{source}_faulty")
        fleet.inject(kind, name, gpu=gpu, source=source)
