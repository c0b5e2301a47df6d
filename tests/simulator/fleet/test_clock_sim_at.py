"""Real moments mapped to the paced clock: a held stretch adds no simulated time."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from simulator.fleet.clock import SimClock


def test_sim_at_maps_real_moments_through_holds() -> None:
    clock = SimClock(time_factor=1000, max_lag=60)
    assert clock.sim_at(datetime.now(UTC)) == 0.0  # not started
    clock.start()
    time.sleep(0.1)  # about 100 simulated seconds
    clock.pace(0.0)  # late by more than 60: held from here
    held_from = datetime.now(UTC)
    held = clock.now()
    time.sleep(0.2)
    held_until = datetime.now(UTC)
    clock.resume()
    time.sleep(0.1)
    after = datetime.now(UTC)

    # The held stretch of 0.2 real seconds is no simulated time at all.
    assert clock.sim_at(held_until) - clock.sim_at(held_from) == pytest.approx(0.0, abs=5.0)
    assert clock.sim_at(held_from) == pytest.approx(held, abs=5.0)
    # Across the whole run: real time x factor overstates by the held part.
    span = clock.sim_at(after) - clock.sim_at(held_from - timedelta(seconds=0.05))
    real = (after - (held_from - timedelta(seconds=0.05))).total_seconds()
    assert span == pytest.approx((real - 0.2) * 1000, abs=40.0)
    assert span < real * 1000 - 150
    # Before the start: 0; never decreasing.
    assert clock.sim_at(held_from - timedelta(hours=1)) == 0.0
    assert clock.sim_at(after) >= clock.sim_at(held_until) >= clock.sim_at(held_from)


def test_sim_at_without_holds_is_real_time_times_factor() -> None:
    clock = SimClock(time_factor=500, max_lag=None)
    clock.start()
    first = datetime.now(UTC)
    time.sleep(0.1)
    second = datetime.now(UTC)
    assert clock.sim_at(second) - clock.sim_at(first) == pytest.approx(
        (second - first).total_seconds() * 500, abs=1.0
    )
