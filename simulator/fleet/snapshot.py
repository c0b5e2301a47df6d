"""What the fleet reports of its true state: per node, per fault, for the whole fleet."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from simulator.fleet.capacity import CapacityReport
from simulator.fleet.faults import FaultKind
from simulator.fleet.model import Phase


class NodeTruth(BaseModel):
    """One node as it really is."""

    model_config = ConfigDict(frozen=True)

    name: str
    pool: str
    phase: Phase
    faults: list[str]
    real_fault: bool
    ready: bool
    schedulable: bool


class InjectedFault(BaseModel):
    """One fault as it was injected (the fleet's fault log)."""

    model_config = ConfigDict(frozen=True)

    at: float
    """Simulated seconds since the fleet started."""
    node: str
    kind: FaultKind
    gpu: int | None
    xid: int | None
    source: str


class FleetSnapshot(BaseModel):
    """The true state of the fleet at one moment, for summaries and tests."""

    model_config = ConfigDict(frozen=True)

    sim_seconds: float
    capacity: int
    nodes: int
    nodes_ready: int
    faulty_nodes: list[NodeTruth]
    """Nodes with any fault or report (spurious ones included), by name."""
    truly_faulty: list[str]
    """Nodes whose hardware is really broken."""
    availability: dict[str, float]
    counters: dict[str, int]
    replacements_in_flight: int
    """Nodes whose NodeClaim is deleted and whose Node is not gone yet."""
    max_replacements_in_flight: int
    """The most such nodes at any one time so far."""
    jobs: dict[str, float | int | None] | None
    capacity_report: CapacityReport = CapacityReport()
    """Launches, capacity shortages and what replacements cost (``capacity.py``, issue 36)."""
