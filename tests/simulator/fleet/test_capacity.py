"""The capacity model (issue 36): launch times, shortages, and what the ledger counts."""

from __future__ import annotations

import math
import random
import statistics
from datetime import timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from simulator.fleet.capacity import (
    CapacityLedger,
    CapacityModel,
    attempt_draws,
    launch_draws,
)
from simulator.fleet.config import FleetConfig

FIVE_MINUTES = timedelta(minutes=5)


def test_the_defaults_launch_at_the_median_and_always_find_capacity() -> None:
    model = FleetConfig().capacity
    assert model == CapacityModel()
    for number in range(1, 50):
        assert model.launch_seconds(FIVE_MINUTES, launch_draws(0, "gpu", number)) == 300.0
        assert model.finds_capacity(attempt_draws(0, "gpu", number, 1))
    assert model.capacity_block_relaunch is None


def test_the_capacity_retry_is_karpenters_unavailable_offerings_ttl() -> None:
    assert CapacityModel().capacity_retry == timedelta(minutes=3)


def test_launch_times_are_lognormal_with_the_node_launch_as_median() -> None:
    model = CapacityModel(launch_sigma=0.5)
    draws = [model.launch_seconds(FIVE_MINUTES, launch_draws(1, "h100", n)) for n in range(4001)]
    assert statistics.median(draws) == pytest.approx(300.0, rel=0.05)
    logs = [math.log(d) for d in draws]
    assert statistics.mean(logs) == pytest.approx(math.log(300.0), abs=0.03)
    assert statistics.stdev(logs) == pytest.approx(0.5, rel=0.05)


def test_draws_depend_only_on_the_seed_pool_and_number() -> None:
    model = CapacityModel(launch_sigma=0.8, insufficient_capacity_probability=0.5)

    def launch(seed: int, pool: str, number: int) -> float:
        return model.launch_seconds(FIVE_MINUTES, launch_draws(seed, pool, number))

    # Whatever else was drawn before (another pool's launches, a shared stream), the
    # pool's Nth NodeClaim gets the same launch time and the same capacity answers.
    random.Random(0).random()
    first = [launch(7, "h100", n) for n in (1, 2, 3)]
    [launch(7, "p5", n) for n in range(10)]
    assert [launch(7, "h100", n) for n in (1, 2, 3)] == first
    assert len(set(first)) == 3
    assert launch(7, "p5", 1) != first[0]
    assert launch(8, "h100", 1) != first[0]
    answers = [model.finds_capacity(attempt_draws(7, "h100", 1, a)) for a in range(1, 40)]
    assert answers == [model.finds_capacity(attempt_draws(7, "h100", 1, a)) for a in range(1, 40)]
    assert set(answers) == {True, False}


def test_a_shortage_of_one_never_finds_capacity_and_of_zero_always_does() -> None:
    never, always = (CapacityModel(insufficient_capacity_probability=p) for p in (1.0, 0.0))
    for attempt in range(1, 100):
        rng = attempt_draws(3, "gpu", 1, attempt)
        assert not never.finds_capacity(rng)
        assert always.finds_capacity(attempt_draws(3, "gpu", 1, attempt))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"insufficient_capacity_probability": 1.5}, "less than or equal to 1"),
        ({"insufficient_capacity_probability": -0.1}, "greater than or equal to 0"),
        ({"launch_sigma": -1}, "greater than or equal to 0"),
        ({"launch_sigma": 3}, "less than or equal to 2"),
        ({"capacity_retry": "0s"}, "greater than 0"),
        ({"capacity_retry": "2d"}, "less than or equal to 1 day"),
        ({"capacity_block_relaunch": -60}, "greater than or equal to"),
        ({"shortage": 0.1}, "Extra inputs are not permitted"),
    ],
)
def test_a_bad_capacity_model_is_refused_naming_the_field(
    fields: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError, match=message) as caught:
        CapacityModel.model_validate(fields)
    assert next(iter(fields)) in str(caught.value)


def test_the_model_reads_durations_as_the_rest_of_the_simulator_does() -> None:
    model = CapacityModel.model_validate({"capacity_retry": "90s", "capacity_block_relaunch": "8m"})
    assert model.capacity_retry == timedelta(seconds=90)
    assert model.capacity_block_relaunch == timedelta(minutes=8)


def test_node_hours_short_run_from_the_first_failed_attempt_to_the_launch() -> None:
    ledger = CapacityLedger()
    ledger.waiting("a", 100.0)
    ledger.waiting("a", 280.0)  # a second failed attempt: the same wait goes on
    assert ledger.node_hours_short(460.0) == pytest.approx(360.0 / 3600)  # still waiting
    ledger.launch_started("a", 460.0)
    ledger.launch_started("b", 500.0)  # found capacity at once: never short
    assert ledger.node_hours_short(10_000.0) == pytest.approx(360.0 / 3600)


def test_a_nodeclaim_deleted_while_it_waits_is_short_until_its_deletion() -> None:
    ledger = CapacityLedger()
    ledger.waiting("a", 0.0)
    ledger.dropped("a", 720.0)
    ledger.waiting("b", 720.0)  # the NodeClaim that takes its place waits on
    assert ledger.node_hours_short(1800.0) == pytest.approx(1800.0 / 3600)


def test_overlap_runs_from_the_replacements_launch_to_the_old_instances_end() -> None:
    ledger = CapacityLedger()
    ledger.terminating("old")
    ledger.replacing("new", "old")
    ledger.launch_started("new", 10.0)
    assert ledger.overlap_instance_hours(370.0) == pytest.approx(360.0 / 3600)  # still both
    ledger.instance_ended("old", 910.0)
    assert ledger.overlap_instance_hours(5000.0) == pytest.approx(900.0 / 3600)


def test_no_overlap_when_the_replacement_launches_after_the_old_instance_ended() -> None:
    ledger = CapacityLedger()
    ledger.terminating("old")
    ledger.replacing("new", "old")
    ledger.waiting("new", 0.0)
    ledger.instance_ended("old", 60.0)
    ledger.replacing("later", "old")  # the old instance is gone: nothing to pair with
    ledger.launch_started("new", 540.0)
    ledger.launch_started("later", 600.0)
    assert ledger.overlap_instance_hours(9000.0) == 0.0
    assert ledger.node_hours_short(9000.0) == pytest.approx(540.0 / 3600)


def test_a_replacement_deleted_before_it_registers_hands_the_overlap_on() -> None:
    ledger = CapacityLedger()
    ledger.terminating("old")
    ledger.replacing("first", "old")
    ledger.launch_started("first", 0.0)
    ledger.dropped("first", 100.0)  # 100 s with both instances
    ledger.replacing("second", "old")
    ledger.launch_started("second", 400.0)
    ledger.instance_ended("old", 500.0)  # 100 s more
    assert ledger.overlap_instance_hours(1000.0) == pytest.approx(200.0 / 3600)
