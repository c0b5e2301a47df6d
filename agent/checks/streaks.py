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
