"""The fleet simulator: GPU nodes behind the Kubernetes API emulator and moto.

Typical use::

    from simulator.fleet import Fleet, FleetConfig, PoolSpec

    config = FleetConfig(pools=[PoolSpec(name="h100", nodes=16)], time_factor=60)
    with Fleet(config) as fleet:
        fleet.inject("fallen_off_bus", "h100-0003", gpu=2)
        settings = fleet.worker_settings()  # for the real activities
        print(fleet.snapshot().truly_faulty)

See ``simulator/README.md``.
"""

from simulator.fleet.clock import Durations, SimClock, SteppedClock
from simulator.fleet.config import FleetConfig, PoolSpec, WorkloadConfig, parse_pools
from simulator.fleet.faults import (
    FAULTS,
    FaultKind,
    FaultMix,
    Fix,
    Scenario,
    ScenarioError,
    ScenarioEvent,
)
from simulator.fleet.fleet import Fleet
from simulator.fleet.snapshot import FleetSnapshot, InjectedFault, NodeTruth

__all__ = [
    "FAULTS",
    "Durations",
    "FaultKind",
    "FaultMix",
    "Fix",
    "Fleet",
    "FleetConfig",
    "FleetSnapshot",
    "InjectedFault",
    "NodeTruth",
    "PoolSpec",
    "Scenario",
    "ScenarioError",
    "ScenarioEvent",
    "SimClock",
    "SteppedClock",
    "WorkloadConfig",
    "parse_pools",
]
