"""MTTR on the simulator's own clock: a held clock does not count, the requested factor would."""

from __future__ import annotations

from datetime import datetime

from demo.summary import summarize
from tests.demo.test_summary import T0, replaced, snapshot


def paced(moment: datetime) -> float:
    """A clock at factor 60 that stood still for real seconds 10 to 20 of the run."""
    real = (moment - T0).total_seconds()
    return 60 * (min(real, 10) + max(0.0, real - 20))


def test_mttr_on_the_clock_leaves_out_the_time_it_was_held() -> None:
    # Incidents of 30 and 50 real seconds; both span the held stretch.
    incidents = [replaced("a", 5, 30), replaced("b", 5, 50)]
    summary = summarize(
        incidents,
        snapshot(),
        replacement_cap=2,
        time_factor=60,
        wall_seconds=60,
        temporal_address="127.0.0.1:7233",
        temporal_ui=None,
        sim_time=paced,
    )
    # At the requested factor: 30 s and 50 s real, times 60 (unchanged meaning).
    assert summary.mttr_p50_s == 2400
    assert summary.mttr_p95_s == 2940
    # On the clock: 10 real seconds of each stood still.
    assert summary.mttr_clock_p50_s == 1800
    assert summary.mttr_clock_p95_s == 2340


def test_without_a_clock_there_is_no_clock_mttr() -> None:
    summary = summarize(
        [replaced("a", 5, 30)],
        snapshot(),
        replacement_cap=2,
        time_factor=60,
        wall_seconds=60,
        temporal_address="127.0.0.1:7233",
        temporal_ui=None,
    )
    assert summary.mttr_p50_s == 1800
    assert summary.mttr_clock_p50_s is None
    assert summary.mttr_clock_p95_s is None
