"""The paced simulated clock: late simulator events hold simulated time, never reverse it."""

from __future__ import annotations

import threading
import time

import pytest

from simulator.fleet.clock import SimClock
from simulator.fleet.scheduler import Scheduler


def test_an_event_later_than_max_lag_holds_simulated_time_until_resumed() -> None:
    clock = SimClock(time_factor=10_000, max_lag=60)
    clock.start()
    time.sleep(0.05)  # about 500 simulated seconds pass
    late = clock.pace(0.0)
    assert late > 60
    held = clock.now()
    time.sleep(0.02)
    assert clock.now() == held  # stands still while the scheduler catches up
    clock.resume()
    time.sleep(0.02)
    assert clock.now() > held  # runs again, from where it stood (no jump, no reversal)
    assert clock.now() < held + 0.02 * 10_000 * 3
    report = clock.lag_report()
    assert report["holds"] == 1
    assert report["held_real_s"] >= 0.015
    assert report["late_max_s"] == pytest.approx(late, abs=0.1)
    assert report["achieved_factor"] < 10_000


def test_an_event_within_max_lag_does_not_hold_the_clock() -> None:
    clock = SimClock(time_factor=100, max_lag=60)
    clock.start()
    clock.pace(clock.now() - 1)
    before = clock.now()
    time.sleep(0.02)
    assert clock.now() > before
    assert clock.lag_report()["holds"] == 0


def test_without_max_lag_the_clock_is_wall_clock_times_factor() -> None:
    clock = SimClock(time_factor=10_000, max_lag=None)
    clock.start()
    time.sleep(0.02)
    clock.pace(0.0)
    before = clock.now()
    time.sleep(0.02)
    assert clock.now() > before
    assert clock.lag_report()["holds"] == 0


def test_a_negative_max_lag_is_refused() -> None:
    with pytest.raises(ValueError, match="max lag"):
        SimClock(time_factor=10, max_lag=-1)


def test_deferred_work_does_not_run_ahead_of_timed_work_already_due() -> None:
    clock = SimClock(time_factor=1000, max_lag=None)
    scheduler = Scheduler(clock)
    order: list[str] = []
    done = threading.Event()
    clock.start()
    scheduler.call_at(0.0, lambda: order.append("due"))
    time.sleep(0.01)  # the timed event is due before the deferred one is queued
    scheduler.call_soon(lambda: order.append("soon"))
    scheduler.call_soon(done.set)
    scheduler.start()
    try:
        assert done.wait(5)
    finally:
        scheduler.stop()
    assert order == ["due", "soon"]
