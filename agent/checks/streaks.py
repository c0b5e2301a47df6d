"""Streaks of degraded readings kept between cycles (the gpu-degraded and efa-degraded checks).

A degradation is a finding only after N consecutive degraded readings; each
check keeps, per signal, the times of its latest ones with what was observed
and expected, in the state file. Read back from a file another process (or an
older agent) wrote: damaged entries are dropped, never trusted.
"""

from __future__ import annotations

from typing import Any


class Streak:
    """Consecutive degraded readings of one signal (times, newest last)."""

    def __init__(self, times: list[float], observed: str, expected: str) -> None:
        """A streak read from the state file or started this cycle."""
        self.times = times
        self.observed = observed
        self.expected = expected

    def to_json(self) -> dict[str, Any]:
        """A plain dict for the state file."""
        return {"times": self.times, "observed": self.observed, "expected": self.expected}


def is_number(value: Any) -> bool:
    """An int or float from JSON (a bool is not one)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def streak_from(entry: Any, keep: int, max_word: int) -> Streak | None:
    """The streak of one state-file entry, its latest ``keep`` times; None when damaged."""
    if not isinstance(entry, dict):
        return None
    times = entry.get("times")
    if not isinstance(times, list):
        return None
    kept = [float(t) for t in times[-keep:] if is_number(t)]
    observed, expected = entry.get("observed"), entry.get("expected")
    words = [w for w in (observed, expected) if isinstance(w, str) and 0 < len(w) <= max_word]
    if not kept or len(words) != 2:
        return None
    return Streak(kept, words[0], words[1])


def counter_samples(entry: Any, keep: int) -> list[tuple[float, int]]:
    """The ``[time, value]`` readings of one state-file entry, its latest ``keep``.

    Damaged pairs are dropped: a value must be an integer of a u64 counter.
    """
    if not isinstance(entry, list):
        return []
    return [
        (float(pair[0]), int(pair[1]))
        for pair in entry[-keep:]
        if isinstance(pair, list)
        and len(pair) == 2
        and is_number(pair[0])
        and isinstance(pair[1], int)
        and not isinstance(pair[1], bool)
        and 0 <= pair[1] < 1 << 64
    ]


def counter_readings(
    saved: Any, limit: int, max_key: int, keep: int
) -> dict[str, list[tuple[float, int]]]:
    """Counter readings of a state-file section (key -> [(time, count)]), at most ``limit`` keys.

    Damaged entries are dropped: a key longer than ``max_key``, a reading that is
    not a time and a u64 count (``counter_samples``), a key left with none.
    """
    if not isinstance(saved, dict):
        return {}
    readings = {
        key: counter_samples(entry, keep)
        for key, entry in list(saved.items())[:limit]
        if isinstance(key, str) and len(key) <= max_key
    }
    return {key: kept for key, kept in readings.items() if kept}


def extend_counter(
    history: list[tuple[float, int]], value: int, now: float, window: float, keep: int
) -> tuple[list[tuple[float, int]], int | None]:
    """Add this cycle's reading of a cumulative counter to the readings of the window.

    Readings older than ``window`` seconds are dropped. A counter that went down
    (driver reload, device reset) starts a new baseline.

    Returns:
        The readings to keep (this one last, at most ``keep``), and the last value
        before a reset (None when the counter did not go down).
    """
    since = now - window
    kept = [(t, v) for t, v in history if since <= t < now]
    reset_from = None
    if kept and value < kept[-1][1]:
        reset_from, kept = kept[-1][1], []
    return [*kept, (now, value)][-keep:], reset_from


def per_minute(history: list[tuple[float, int]]) -> tuple[float, int, float]:
    """(rate per minute, rise, span in seconds) from the oldest to the newest reading."""
    (first_time, first_value), (last_time, last_value) = history[0], history[-1]
    span = last_time - first_time
    rise = last_value - first_value
    return (rise * 60.0 / span if span > 0 else 0.0), rise, span
