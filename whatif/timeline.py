"""The fault timeline a comparison runs: planned from the seed alone, identical for every policy.

A fault mix's plan (times, kinds, node ordinals, GPU draws) is a pure function
of the seed, the mix and the fleet's size; the injector maps each ordinal to a
fleet slot (``simulator.fleet.injector.Slots``), so the same fault lands on the
same slot under every policy. A fault whose slot's node is rebooting or being
replaced at that moment cannot happen and is counted as skipped (``mix.skipped``).
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections import Counter
from datetime import timedelta

from pydantic import BaseModel, ConfigDict

from simulator.fleet import FleetConfig
from simulator.fleet.faults import PlannedFault


class Timeline(BaseModel):
    """What the plan holds: its size, kinds and a digest that changes with any fault."""

    model_config = ConfigDict(frozen=True)

    planned: int
    by_kind: dict[str, int]
    digest: str
    scripted_events: int


def planned_faults(config: FleetConfig, duration: timedelta) -> list[PlannedFault]:
    """The mix's faults within ``duration``, in time order (none without a mix)."""
    if config.fault_mix is None:
        return []
    horizon = duration.total_seconds()
    events = config.fault_mix.events(config.seed, config.total_nodes)
    return list(itertools.takewhile(lambda p: p.at <= horizon, events))


def slot_of(fault: PlannedFault, nodes: int) -> int:
    """The fleet slot a planned fault names (as the injector maps it)."""
    return min(int(fault.ordinal * nodes), nodes - 1)


def timeline(config: FleetConfig, duration: timedelta) -> Timeline:
    """Describe the plan; equal plans give equal digests."""
    faults = planned_faults(config, duration)
    nodes = config.total_nodes
    rows = [
        # A fault's duration joins its row only when the mix draws one: older plans keep
        # their digests.
        (round(f.at, 6), f.kind.value, slot_of(f, nodes), round(f.gpu_draw, 9))
        + (() if f.lasts is None else (round(f.lasts, 3),))
        for f in faults
    ]
    scripted = config.scenario.events if config.scenario is not None else []
    payload = json.dumps(
        {"mix": rows, "scenario": [e.model_dump(mode="json") for e in scripted]}, sort_keys=True
    )
    return Timeline(
        planned=len(faults),
        by_kind=dict(sorted(Counter(f.kind.value for f in faults).items())),
        digest=hashlib.sha256(payload.encode()).hexdigest()[:16],
        scripted_events=len(scripted),
    )
