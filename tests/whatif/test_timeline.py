"""One fault timeline per seed: a pure function of seed, mix, fleet size and duration."""

from __future__ import annotations

import time
from datetime import timedelta

from simulator.fleet import FaultMix, Fleet, FleetConfig, PoolSpec
from simulator.fleet.faults import FaultKind
from simulator.kube_api import NODECLAIMS
from whatif.options import compare_fleet, options_from
from whatif.timeline import planned_faults, slot_of, timeline


def config(**changes: object) -> tuple[FleetConfig, timedelta]:
    fields: dict[str, object] = {
        "nodes": 50,
        "pools": "h100,p5:no-reset",
        "fault_multiplier": 500.0,
        "duration": "12h",
        "seed": 4,
    }
    fields.update(changes)
    return compare_fleet(options_from(**fields))


def test_the_same_seed_plans_the_same_faults_whatever_the_time_factor() -> None:
    a, duration = config(time_factor=600)
    b, _ = config(time_factor=5000)
    assert timeline(a, duration) == timeline(b, duration)
    assert timeline(a, duration).planned > 20


def test_another_seed_mix_or_fleet_size_plans_other_faults() -> None:
    base = timeline(*config())
    assert timeline(*config(seed=5)).digest != base.digest
    assert timeline(*config(fault_multiplier=400.0)).digest != base.digest
    assert timeline(*config(nodes=51)).digest != base.digest


def test_planned_slots_cover_the_fleet_and_stay_in_range() -> None:
    cfg, duration = config()
    slots = {slot_of(f, cfg.total_nodes) for f in planned_faults(cfg, duration)}
    assert slots <= set(range(cfg.total_nodes))
    assert len(slots) > 10


def _run(mix: FaultMix, pools: list[PoolSpec], until: timedelta, *, replace: bool) -> Fleet:
    """A fleet run past ``until`` (one at a time: moto patches its backend per process)."""
    fleet = Fleet(
        FleetConfig(pools=pools, fault_mix=mix, seed=11, faults_until=until, time_factor=1200)
    ).start()
    try:
        if replace:  # at once, before the first fault: this node is replaced
            fleet.store.delete_object(NODECLAIMS, "h100-0002")
        deadline = time.monotonic() + 30
        while fleet.clock.now() < until.total_seconds() + 60:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        fleet.stop()
    return fleet


def _mix_faults(fleet: Fleet) -> list[tuple[str, str, int | None]]:
    return [(f.kind.value, f.node, f.gpu) for f in fleet.fault_log() if f.source == "mix"]


def test_faults_land_on_the_same_slots_after_a_node_was_replaced() -> None:
    # Only faults that clear by themselves, so nothing else changes the fleet.
    mix = FaultMix(rates={FaultKind.FALSE_POSITIVE: 2.0}, multiplier=1)
    pools = [PoolSpec(name="h100", nodes=4)]
    until = timedelta(hours=2)
    untouched = _run(mix, pools, until, replace=False)
    touched = _run(mix, pools, until, replace=True)
    planned = planned_faults(FleetConfig(pools=pools, fault_mix=mix, seed=11), until)
    a, b = _mix_faults(untouched), _mix_faults(touched)
    assert len(a) == len(planned)
    assert len(b) + touched.counters["mix.skipped"] == len(planned)
    # Same kinds and GPUs; the same node except in the slot the replacement took over.
    expected = [(k, "h100-0004" if n == "h100-0002" else n, g) for k, n, g in a]
    assert all(x in expected for x in b)
    others = [x for x in expected if x[1] != "h100-0004"]
    assert others == [x for x in b if x[1] != "h100-0004"]
