"""A mix's node ordinals name fleet slots: the same place whatever happened to the nodes."""

from __future__ import annotations

import threading
from collections import Counter
from types import SimpleNamespace
from typing import Any, cast

from simulator.fleet.faults import FaultKind, PlannedFault
from simulator.fleet.injector import FaultInjector, Slots
from simulator.fleet.model import Phase


def test_ordinals_name_slots_in_pool_order() -> None:
    slots = Slots([("a", 2), ("b", 2)])
    for name, pool in (("a-0", "a"), ("a-1", "a"), ("b-0", "b"), ("b-1", "b")):
        slots.added(name, pool)
    assert [slots.holder(x) for x in (0.0, 0.3, 0.5, 0.99)] == ["a-0", "a-1", "b-0", "b-1"]


def test_a_replacement_takes_the_slot_of_the_node_it_replaced() -> None:
    slots = Slots([("a", 3)])
    for i in range(3):
        slots.added(f"a-{i}", "a")
    slots.removed("a-1", "a")
    assert slots.holder(0.5) is None  # the slot is empty while the new node launches
    slots.added("a-3", "a")
    assert slots.holder(0.5) == "a-3"


def test_a_replacement_up_before_its_predecessor_is_gone_waits_in_overflow() -> None:
    slots = Slots([("a", 2)])
    slots.added("a-0", "a")
    slots.added("a-1", "a")
    slots.added("a-2", "a")  # a-1's replacement, up early
    assert [slots.holder(0.0), slots.holder(0.9)] == ["a-0", "a-1"]
    slots.removed("a-1", "a")
    assert slots.holder(0.9) == "a-2"


def test_a_slot_remembers_its_first_host_after_a_replacement() -> None:
    # Issue 36: a lemon host's extra faults follow the host, not the slot.
    slots = Slots([("a", 2)])
    slots.added("a-0", "a")
    slots.added("a-1", "a")
    slots.removed("a-1", "a")
    slots.added("a-2", "a")
    assert (slots.holder(0.9), slots.first_holder(0.9)) == ("a-2", "a-1")
    assert slots.first_holder(0.0) == slots.holder(0.0) == "a-0"


class _Fleet:
    """Just what the injector reads and calls, to watch where a planned fault lands."""

    def __init__(self, names: list[str]) -> None:
        self.lock = threading.RLock()
        self.nodes = {n: SimpleNamespace(phase=Phase.RUNNING) for n in names}
        self.config = SimpleNamespace(pools=[], total_nodes=len(names), faults_until=None)
        self.counts: Counter[str] = Counter()
        self.injected: list[str] = []

    def count(self, key: str, n: int = 1) -> None:
        self.counts[key] += n

    def node_gpus(self, name: str) -> int:
        return 8

    def inject(self, kind: object, name: str, **_: object) -> int:
        self.injected.append(name)
        return len(self.injected)


def test_a_lemons_extra_faults_stop_when_a_replacement_brings_a_fresh_host() -> None:
    slots = Slots([("a", 2)])
    for name in ("a-0", "a-1"):
        slots.added(name, "a")
    fleet = _Fleet(["a-0", "a-1", "a-2"])
    injector = FaultInjector(cast(Any, fleet), None, None, seed=0, slots=slots)
    extra = PlannedFault(at=0, kind=FaultKind.XID_RESET, ordinal=0.75, gpu_draw=0, lemon=True)
    injector._random(extra)
    assert fleet.injected == ["a-1"]  # the lemon, repaired or not, keeps faulting
    slots.removed("a-1", "a")
    slots.added("a-2", "a")
    injector._random(extra)
    assert fleet.injected == ["a-1"]
    assert fleet.counts["mix.lemon_replaced"] == 1
    # The base plan's faults go on landing in the slot, whoever holds it.
    injector._random(PlannedFault(at=0, kind=FaultKind.XID_RESET, ordinal=0.75, gpu_draw=0))
    assert fleet.injected == ["a-1", "a-2"]
