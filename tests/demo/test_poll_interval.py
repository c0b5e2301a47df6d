"""Issue 40: a poll costs the same simulated time at every time factor (no real-time floor)."""

from __future__ import annotations

import pytest

from demo.run import (
    SIM_POLL_INTERVAL,
    WATCHER_BACKOFF,
    real_poll_interval,
    real_watcher_backoff,
    real_watcher_tick,
)


@pytest.mark.parametrize("time_factor", [20.0, 375.0, 1500.0, 6000.0])
def test_polls_and_watcher_ticks_are_the_same_simulated_interval_at_every_factor(
    time_factor: float,
) -> None:
    sim_seconds = SIM_POLL_INTERVAL.total_seconds()
    assert real_poll_interval(time_factor).total_seconds() * time_factor == pytest.approx(
        sim_seconds
    )
    assert real_watcher_tick(time_factor) * time_factor == pytest.approx(sim_seconds)


def test_at_real_time_a_poll_is_at_most_a_second() -> None:
    assert real_poll_interval(1).total_seconds() == real_watcher_tick(1) == 1.0


@pytest.mark.parametrize("time_factor", [1.0, 20.0, 200.0])
def test_the_watchers_backoff_is_productions_in_simulated_time(time_factor: float) -> None:
    # Real seconds of backoff at factor 20 were 40 simulated seconds of blindness
    # after an API outage: a fault that came and went in them met no incident.
    initial, longest = real_watcher_backoff(time_factor)
    assert (initial * time_factor, longest * time_factor) == pytest.approx(
        tuple(d.total_seconds() for d in WATCHER_BACKOFF)
    )
