"""The demo's policy: the real one, with every duration scaled by the time factor.

The fleet simulator runs its clock ``time_factor`` times as fast as real time
(a 4-minute reboot takes 4 / time_factor real minutes), but the workflows'
timers run in real time on the Temporal server. So that a grace period, a
cooldown or a timeout means the same against the simulated fleet as against a
real one, the demo divides every duration of the policy by the time factor:
grace periods (fault classes and the watcher's conditions), the cooldown,
rung and verification timeouts, retry intervals, attempt windows, the
repeat-offender window, approval and escalation waits, the permit wait, the
lease, and the activities' own timeouts (``timeouts``: how soon a SIGKILLed
worker's activities are retried, so crash recovery takes the same simulated
time at any time factor, down to its floor). Pool overrides (``pools``) are
scaled like the settings they override. A policy file given to the demo is
written in simulated time like any other policy and is scaled the same way.

Without a policy file the demo runs ``DEMO_DEFAULTS``: the shipped defaults
with the admission gate on and pool ``p5``'s GPU reset off.

Every duration with policy meaning is scaled exactly, with no floor in real
time (issue 40): rung and verification windows, grace periods, the cooldown,
retry intervals, approval, escalation and permit waits. The workflows decide
them with workflow timers, so at factor F they end at the policy's time on the
fleet's clock; what real latency adds on top is measured
(``whatif.latency``), not hidden by a floor. Only the liveness nets keep one:
the activities' own timeouts (``timeouts``, at least ``MIN_ACTIVITY_TIMEOUT``:
a call slowed by the machine's load or a heartbeat held up by a Temporal
restart must not time out; they never decide a step) and the replacement lease
(at least ``MIN_TIMEOUT`` and twice the replace rung's window, so a live holder
never loses its permit).

Tests that exercise behaviour, not measure it, may give ``window_floor`` to
keep the windows above a loaded CI machine's latency.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from gpu_remediation.models import Rung
from gpu_remediation.policy import Policy
from gpu_remediation.policy_loader import parse_policy
from gpu_remediation.policy_override import deep_merge

MIN_TIMEOUT = timedelta(seconds=10)
MIN_ACTIVITY_TIMEOUT = timedelta(seconds=10)

DEMO_DEFAULTS = """\
# The demo shows the admission gate; a policy file given to it decides for itself.
admission: {enabled: true}
# Pool p5 is the EC2 profile (the fleet's p5:no-reset) whose hypervisor refuses
# nvidia-smi -r: its incidents skip the reset instead of spending an attempt on it.
pools:
  p5:
    rungs: {gpu_reset: {enabled: false}}
"""
"""The demo's policy without ``--policy``, merged over the shipped defaults."""

# Windows and operator waits: exact, unless a test asks for a floor.
_WINDOW_KEYS = frozenset({"timeout", "permit_wait_timeout", "approval_timeout", "escalation_hold"})


def _scale(value: timedelta, factor: float, floor: timedelta | None) -> timedelta:
    scaled = value / factor
    if floor is not None and value > timedelta(0):
        scaled = max(scaled, min(floor, value))
    return scaled


def _floor_for(
    path: tuple[str, ...], window_floor: timedelta | None, min_activity_timeout: timedelta
) -> timedelta | None:
    if path[:1] == ("pools",):
        path = path[2:]  # a pool's override: the floor of the setting it overrides
    key = path[-1]
    if path[:1] == ("timeouts",):
        return min_activity_timeout  # liveness nets, never a decision
    if key == "lease":
        return MIN_TIMEOUT
    if key in _WINDOW_KEYS:
        return window_floor
    return None  # grace periods, cooldown, windows, retry intervals: scaled exactly


def _walk(
    value: Any, factor: float, path: tuple[str, ...], floors: tuple[timedelta | None, timedelta]
) -> Any:
    if isinstance(value, timedelta):
        return _scale(value, factor, _floor_for(path, *floors))
    if isinstance(value, dict):
        return {key: _walk(item, factor, (*path, str(key)), floors) for key, item in value.items()}
    if isinstance(value, list):
        return [_walk(item, factor, path, floors) for item in value]
    return value


def scale_policy(
    policy: Policy,
    time_factor: float,
    *,
    window_floor: timedelta | None = None,
    min_activity_timeout: timedelta = MIN_ACTIVITY_TIMEOUT,
) -> Policy:
    """Return ``policy`` with every duration divided by ``time_factor`` (floors: see above).

    Args:
        policy: A validated policy, its durations in simulated time.
        time_factor: Simulated seconds per real second (> 0); 1 changes nothing.
        window_floor: Tests only: a real-time floor for windows and operator
            waits (the demo and the comparison have none).
        min_activity_timeout: The floor of ``timeouts`` (bookkeeping start-to-close
            and heartbeat timeout).

    Raises:
        ValueError: A time factor that is not positive.
    """
    if not time_factor > 0:
        raise ValueError(f"time factor must be positive, got {time_factor!r}")
    if time_factor == 1:
        return policy
    floors = (window_floor, min_activity_timeout)
    data = _walk(policy.model_dump(mode="python"), time_factor, (), floors)
    replace_timeout: timedelta = data["rungs"][Rung.REPLACE]["timeout"]
    data["replacement"]["lease"] = max(data["replacement"]["lease"], 2 * replace_timeout)
    for override in data["pools"].values():
        # The same for a pool whose override changes the replace rung or the lease.
        effective = deep_merge(data, override)
        pool_timeout: timedelta = effective["rungs"][Rung.REPLACE]["timeout"]
        if effective["replacement"]["lease"] < 2 * pool_timeout:
            override.setdefault("replacement", {})["lease"] = 2 * pool_timeout
    return Policy.model_validate(data)


CLOCK_FREE_HEARTBEAT = timedelta(hours=1)
"""The heartbeat timeout on the clock-free comparison's server (the policy's maximum)."""


def clock_free_policy(policy: Policy) -> Policy:
    """``policy`` for the clock-free comparison (ADR 018): its durations as written.

    The fleet's clock is the time-skipping server's, so nothing is scaled. Only the
    heartbeat timeout grows to its maximum: between two looks at the world an
    activity hands the server's time back, and the server may skip many steps
    before the activity's heartbeat (sent by the SDK in real time) reaches it; a
    2-minute net of the server's time could then expire under an activity that
    is well. It stays a liveness net (the windows are workflow timers).
    """
    data = policy.model_dump(mode="python")
    data["timeouts"]["heartbeat"] = CLOCK_FREE_HEARTBEAT
    return Policy.model_validate(data)


def demo_defaults() -> Policy:
    """The policy the demo runs without ``--policy`` (not yet scaled): ``DEMO_DEFAULTS``."""
    return parse_policy(DEMO_DEFAULTS, "<demo defaults>")
