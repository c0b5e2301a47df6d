"""``efa-degraded``: EFA devices that work, slowly: a port rate below expectation, errors rising.

Its own NPD condition (``EfaDegraded``, deploy/npd/efa-degraded-monitor.json),
apart from the EFA faults (``efa``: count, provider, links) and the counter
bursts (``efa-counters``: an event per cycle). Findings are of kind
``degraded`` in the grammar of agent/findings.py, with ``WHAT``:

* ``efa_port_rate``: ``/sys/class/infiniband/<dev>/ports/1/rate`` below the
  expected rate (``AgentConfig.expected_efa_rate``: ``efa_degraded_expected_rate_gbps``,
  else the instance type's in ``efa_rate_by_instance_type``). The kernel writes that
  file as ``"%d%s Gb/sec (%dX%s)"`` (``rate_show``, drivers/infiniband/core/sysfs.c:
  ``"100 Gb/sec (4X EDR)"``, ``"2.5 Gb/sec (1X SDR)"``); the EFA driver fills it
  from the device attribute ``max_link_speed_gbps`` (``efa_query_port``,
  amzn/amzn-drivers kernel/linux/efa/src/efa_verbs.c, since r2.13.0; 100 Gb/s
  when the device reports 0, and before r2.13.0 always 4X EDR, 100 Gb/s). The
  attribute is read when the device is probed (``efa_com_get_device_attr`` in
  efa_main.c), so the file says what the device was given, not a link that
  retrained: the finding is a device that came up short of its instance type,
  and the devices are not compared with each other. An expectation above 100 is
  judged only under a driver that reports the device's speed (2.13.0 or later,
  read from ``/sys/module/efa/version``). Reported once seen below in
  ``efa_degraded_rate_cycles`` consecutive readings within
  ``efa_degraded_window``.
* ``efa_counter:<name>``: a port error counter
  (``ports/1/hw_counters/<name>``, ``EFA_DEFINE_PORT_STATS`` in efa_verbs.c)
  rising at ``efa_degraded_counter_thresholds[name]`` per minute or more,
  measured over the readings of the last ``efa_degraded_window`` seconds once
  they span ``efa_degraded_counter_min_span`` seconds. Counters are cumulative:
  the rate is (newest - oldest) / time between them; a counter that went down
  (driver reload, device reset) starts a new baseline, and a new boot forgets
  every reading (the cycle passes no state).

Only counters that mean trouble are accepted (``EFA_DEGRADATION_COUNTERS`` in
agent/config.py), never traffic counters (bytes, packets, work requests). The
``lifespan`` file beside the counters is the counters' cache time in
milliseconds (rdma core), not a counter.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, NamedTuple

from agent.checks.efa import Port, efa_ports
from agent.checks.streaks import (
    Streak,
    counter_readings,
    extend_counter,
    per_minute,
    streak_from,
)
from agent.config import AgentConfig
from agent.findings import Problem

SOURCE = "efa-degraded"
RATE = "efa_port_rate"
COUNTER_PREFIX = "efa_counter:"
# Bounds on what the state file is trusted with: 64 devices, every counter.
_MAX_WORD = 24
"""The longest observed or expected words kept from the state file (``"400 Gb/sec"``)."""
MAX_PORTS = 64
MAX_SAMPLES = 128
_MAX_RATE_TEXT = 64
_MAX_DIGITS = 20  # a u64 prints at most 20 digits


class PortRate(NamedTuple):
    """A parsed ``rate`` file: ``"100 Gb/sec (4X EDR)"`` -> 100.0, 4, ``"EDR"``."""

    gbps: float
    width: int
    speed: str


def parse_rate(text: str) -> PortRate | None:
    """Read the kernel's ``"%d%s Gb/sec (%dX%s)"``; None for anything else.

    Only the first line's first 64 characters are looked at: linear in nothing.
    """
    line = text[:_MAX_RATE_TEXT].strip()
    number, sep, rest = line.partition(" Gb/sec (")
    if not sep or not rest.endswith(")"):
        return None
    whole, dot, half = number.partition(".")
    if not (whole.isascii() and whole.isdigit() and len(whole) <= 6) or (dot and half != "5"):
        return None
    width_text, x, speed = rest[:-1].partition("X")
    if not x or not (width_text.isascii() and width_text.isdigit() and len(width_text) <= 3):
        return None
    speed = speed.strip()
    if speed and not (speed.isascii() and speed.isalnum()):
        return None
    return PortRate(int(whole) + (0.5 if dot else 0.0), int(width_text), speed)


def _counter_value(raw: str | None) -> int | None:
    if raw is None or not 0 < len(raw) <= _MAX_DIGITS or not raw.isascii() or not raw.isdigit():
        return None
    return int(raw)


def _read(path: Path) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            return handle.read(4096).strip()
    except OSError:
        return None


def load_streaks(saved: Any, config: AgentConfig) -> dict[str, Streak]:
    """Rate streaks of the state file (port -> streak); damaged entries are dropped."""
    if not isinstance(saved, dict):
        return {}
    streaks: dict[str, Streak] = {}
    for key, entry in list(saved.items())[:MAX_PORTS]:
        if not isinstance(key, str) or len(key) > 80:
            continue
        streak = streak_from(entry, config.efa_degraded_rate_cycles, _MAX_WORD)
        if streak is not None:
            streaks[key] = streak
    return streaks


def load_samples(saved: Any, config: AgentConfig) -> dict[str, list[tuple[float, int]]]:
    """Counter readings of the state file (``<dev>/<port>/<counter>`` -> [(time, value)]).

    Only the counters the config watches are kept; damaged entries are dropped.
    """
    names = set(config.efa_degraded_counter_thresholds)
    readings = counter_readings(saved, MAX_PORTS * max(1, len(names)), 120, MAX_SAMPLES)
    return {key: kept for key, kept in readings.items() if key.rpartition("/")[2] in names}


class EfaDegradedOutcome:
    """What the check concluded, and the state to keep for the next cycle."""

    def __init__(self) -> None:
        """Nothing found yet."""
        self.problems: list[Problem] = []
        self.unknowns: list[str] = []
        self.log: list[str] = []
        self.detail = ""
        self.streaks: dict[str, Streak] = {}
        self.samples: dict[str, list[tuple[float, int]]] = {}

    def state(self) -> dict[str, Any]:
        """What the state file keeps: rate streaks and counter readings."""
        return {
            "rate_streaks": {key: s.to_json() for key, s in self.streaks.items()},
            "counters": {key: [[t, v] for t, v in pairs] for key, pairs in self.samples.items()},
        }


def _gbps(value: float) -> str:
    return f"{value:g} Gb/sec"


def _judge_rate(
    port: Port,
    base: Path,
    expected: int | None,
    config: AgentConfig,
    streaks: dict[str, Streak],
    now: float,
    out: EfaDegradedOutcome,
) -> bool:
    """Extend or end the port's streak; whether the rate was judged."""
    if expected is None:
        return False
    raw = _read(base / "rate")
    rate = parse_rate(raw) if raw is not None else None
    if rate is None:
        out.log.append(f"EFA {port.name} rate unreadable or not understood: not judged")
        return False
    if rate.gbps >= expected:
        if streaks.pop(port.name, None) is not None:
            out.log.append(f"EFA {port.name} {RATE}: back to {_gbps(rate.gbps)}")
        return True
    streak = streaks.get(port.name)
    times = [*(streak.times if streak else []), now][-config.efa_degraded_rate_cycles :]
    streaks[port.name] = Streak(times, _gbps(rate.gbps), _gbps(expected))
    return True


def _judge_counters(
    port: Port,
    base: Path,
    config: AgentConfig,
    saved: dict[str, list[tuple[float, int]]],
    now: float,
    out: EfaDegradedOutcome,
) -> int:
    """Record this cycle's counter readings; report rising ones. Returns how many were read."""
    read = 0
    for name, per_minute_threshold in sorted(config.efa_degraded_counter_thresholds.items()):
        if per_minute_threshold <= 0:
            continue  # 0 turns a counter off
        key = f"{port.name}/{name}"
        value = _counter_value(_read(base / "hw_counters" / name))
        if value is None:
            if key in saved:
                out.samples[key] = saved[key]  # not read this cycle: keep what we had
            continue
        read += 1
        history, reset_from = extend_counter(
            saved.get(key, []), value, now, config.efa_degraded_window, MAX_SAMPLES
        )
        if reset_from is not None:
            out.log.append(f"EFA {key} went down ({reset_from} -> {value}): new baseline")
        out.samples[key] = history
        rate, rise, span = per_minute(history)
        if span < config.efa_degraded_counter_min_span or rate < per_minute_threshold:
            continue
        what = f"{COUNTER_PREFIX}{name}"
        out.log.append(f"EFA {port.name} {what}: +{rise} in {span:.0f} s ({rate:.1f}/min)")
        out.problems.append(
            Problem(
                kind="degraded",
                source=SOURCE,
                device=port.name,
                what=what,
                observed=f"{per_minute_threshold}+/min",
                expected=f"under {per_minute_threshold}/min",
                text=f"over {config.efa_degraded_counter_min_span:g}+ s",
                observed_at=now,
            )
        )
    return read


def evaluate(
    config: AgentConfig, saved: dict[str, Any], now: float | None = None
) -> EfaDegradedOutcome:
    """Read the EFA ports' rate and error counters, carrying the state of earlier cycles.

    Args:
        config: Expected rate, cycles, window, per-counter thresholds, sysfs root.
        saved: The state of the last cycle of this boot (``{}`` for none).
        now: Wall-clock time of the reading (state survives the process).
    """
    now = time.time() if now is None else now
    outcome = EfaDegradedOutcome()
    streaks = load_streaks(saved.get("rate_streaks"), config)
    samples = load_samples(saved.get("counters"), config)
    ports = [p for p in efa_ports(config.sysfs_root) if p.port != "-"][:MAX_PORTS]
    if not ports:
        outcome.detail = "no EFA ports"
        return outcome
    root = Path(config.sysfs_root) / "class" / "infiniband"
    expected, why = config.expected_efa_rate()
    judged = counters = 0
    for port in ports:
        base = root / port.device / "ports" / port.port
        judged += _judge_rate(port, base, expected, config, streaks, now, outcome)
        counters += _judge_counters(port, base, config, samples, now, outcome)
    for key, streak in list(streaks.items()):
        if now - streak.times[-1] > config.efa_degraded_window:
            del streaks[key]  # not seen slow within the window: forgotten
    outcome.streaks = streaks
    need = config.efa_degraded_rate_cycles
    rate_problems = []
    for key, streak in sorted(streaks.items()):
        times = streak.times[-need:]
        if len(times) < need or times[-1] - times[0] > config.efa_degraded_window:
            outcome.log.append(
                f"EFA {key} {RATE}: {streak.observed}, expected {streak.expected}"
                f" ({len(times)} of {need} cycles)"
            )
            continue
        rate_problems.append(
            Problem(
                kind="degraded",
                source=SOURCE,
                device=key,
                what=RATE,
                observed=streak.observed,
                expected=streak.expected,
                text=f"{need}+ cycles",
                observed_at=now,
            )
        )
    outcome.problems = rate_problems + outcome.problems
    rate_note = (
        f"rate judged on {judged} (expected {_gbps(expected)}, {why})"
        if expected is not None
        else f"rate not judged ({why})"
    )
    outcome.detail = f"{len(ports)} EFA port(s); {rate_note}; {counters} error counter(s) read"
    return outcome
