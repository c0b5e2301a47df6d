"""What each part of the fleet simulator needs from the fleet, and nothing more.

The parts (the node agent, the hosts, the fault injector, Karpenter, reboots,
the training jobs and the node inventory) each take one of these Protocols
instead of the ``Fleet`` class, so none of them imports ``fleet.py`` and each
can be read (and driven) on its own. ``Fleet`` implements all of them.

Every part shares :class:`FleetCore`: the configuration, simulated time, the
node model and its lock, the Kubernetes store and the counters. The rest is
what that part calls back into the fleet for.
"""

from __future__ import annotations

import random
import threading
from datetime import timedelta
from typing import Protocol

from simulator.fleet.accounting import Availability
from simulator.fleet.clock import FleetClock
from simulator.fleet.config import FleetConfig, PoolSpec
from simulator.fleet.faults import FaultKind
from simulator.fleet.model import ActiveFault, NodeState
from simulator.fleet.scheduler import Scheduler
from simulator.kube_api import KubeStore


class FleetCore(Protocol):
    """The shared state every part reads (the model only under ``lock``)."""

    @property
    def config(self) -> FleetConfig:
        """Pools, durations, seed."""

    @property
    def clock(self) -> FleetClock:
        """Simulated time."""

    @property
    def scheduler(self) -> Scheduler:
        """Where timed and handed-over work runs (the only thread that writes the cluster)."""

    @property
    def lock(self) -> threading.RLock:
        """Guards ``nodes``; never held while calling the store or moto."""

    @property
    def nodes(self) -> dict[str, NodeState]:
        """Every node of the fleet by name (any phase but gone)."""

    @property
    def store(self) -> KubeStore:
        """The Kubernetes API emulator's objects."""

    def count(self, key: str, n: int = 1) -> None:
        """Add to one of the fleet's counters (shown in the snapshot)."""


AgentFleet = FleetCore
"""The node agent only reads the model and writes conditions."""


class HostFleet(FleetCore, Protocol):
    """What the simulated hosts need: find a node, wait, and clear what a command fixed."""

    @property
    def stopping(self) -> threading.Event:
        """Set when the fleet stops (a running Job's wait ends early)."""

    def node_name_for_instance(self, instance_id: str) -> str | None:
        """The node running on EC2 instance ``instance_id``."""

    def clear_faults(self, name: str, faults: list[ActiveFault], *, reason: str) -> None:
        """Remove these faults from node ``name`` (those still present)."""


class InjectorFleet(FleetCore, Protocol):
    """What the fault injector needs: pick a node and give it a fault."""

    def has_node(self, name: str) -> bool:
        """Whether ``name`` is a node of the fleet."""

    def node_gpus(self, name: str) -> int:
        """GPUs of node ``name``."""

    def inject(
        self,
        kind: FaultKind | str,
        name: str,
        *,
        gpu: int | None = None,
        xid: int | None = None,
        clears_after: timedelta | None = None,
        source: str = "api",
    ) -> int:
        """Give node ``name`` a fault now; returns the fault's id."""


class KarpenterFleet(FleetCore, Protocol):
    """What Karpenter needs besides the node inventory: pools and re-accounting."""

    def pool(self, name: str) -> PoolSpec:
        """The pool named ``name``."""

    def node_changed(self, name: str) -> None:
        """The node's phase changed: re-account it and let its agent look."""


class RebootFleet(FleetCore, Protocol):
    """What EC2 reboots need: the instance's node, fresh boot ids, re-accounting."""

    @property
    def rng(self) -> random.Random:
        """The fleet's seeded generator (new boot ids)."""

    def node_name_for_instance(self, instance_id: str) -> str | None:
        """The node running on EC2 instance ``instance_id``."""

    def node_changed(self, name: str) -> None:
        """The node's phase or hardware changed: re-account it and let its agent look."""


class WorkloadsFleet(FleetCore, Protocol):
    """What the training jobs need: the pools they run on, the API their pods call."""

    @property
    def kube_url(self) -> str:
        """The Kubernetes API emulator's URL (jobs answer checkpoint requests over HTTP)."""

    def pool(self, name: str) -> PoolSpec:
        """The pool named ``name``."""

    @property
    def accounting(self) -> Availability:
        """Node-seconds available and doing work (a job on a node changes the latter)."""


class InventoryFleet(FleetCore, Protocol):
    """What the node inventory needs: fresh boot ids and the availability integrals."""

    @property
    def rng(self) -> random.Random:
        """The fleet's seeded generator (boot ids, agent phases)."""

    @property
    def accounting(self) -> Availability:
        """Node-seconds available, healthy and schedulable."""


class ArrivalsFleet(InjectorFleet, Protocol):
    """What faulty arrivals need: the seed (in ``config``) and a way to inject."""
