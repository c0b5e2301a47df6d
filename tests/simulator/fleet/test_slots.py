"""A mix's node ordinals name fleet slots: the same place whatever happened to the nodes."""

from __future__ import annotations

from simulator.fleet.injector import Slots


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
