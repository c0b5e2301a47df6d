"""The demo's policy: every duration divided by the time factor, with real-time floors."""

from __future__ import annotations

from datetime import timedelta

import pytest

from demo.policy import MIN_RETRY_INITIAL, MIN_TIMEOUT, scale_policy
from gpu_remediation.models import FaultClass, Rung
from gpu_remediation.policy_loader import load_policy, parse_policy


def test_grace_cooldown_and_windows_are_divided_by_the_time_factor() -> None:
    policy = scale_policy(load_policy(), 60)
    assert policy.cooldown == timedelta(seconds=30)  # 30m
    assert policy.fault_class(FaultClass.UNKNOWN).grace == timedelta(seconds=2)  # 2m
    assert policy.rung(Rung.REBOOT).window == timedelta(minutes=24)  # 24h
    assert policy.repeat_offender.window == timedelta(hours=2.8)  # 7d
    ready = next(rule for rule in policy.triggers.conditions if rule.type == "Ready")
    assert ready.grace == timedelta(seconds=5)  # 5m


def test_timeouts_and_retry_intervals_keep_a_real_time_floor() -> None:
    policy = scale_policy(load_policy(), 600)
    assert policy.rung(Rung.QUARANTINE).timeout == MIN_TIMEOUT  # 2m / 600 = 0.2 s
    assert policy.rung(Rung.REPLACE).timeout == MIN_TIMEOUT  # 1h / 600 = 6 s
    assert policy.rung(Rung.QUARANTINE).retry.initial_interval == MIN_RETRY_INITIAL
    assert policy.operator.escalation_hold == timedelta(seconds=432)  # 3d: above the floor
    # A live holder never loses its permit: the lease outlives the replace rung.
    assert policy.replacement.lease >= 2 * policy.rung(Rung.REPLACE).timeout


def test_a_floor_never_lengthens_a_duration_the_policy_made_shorter() -> None:
    policy = scale_policy(parse_policy("rungs: {quarantine: {timeout: 3s}}"), 600)
    assert policy.rung(Rung.QUARANTINE).timeout == timedelta(seconds=3)


def test_what_is_not_a_duration_is_unchanged() -> None:
    original = load_policy()
    policy = scale_policy(original, 120)
    assert policy.replacement.max_concurrent == original.replacement.max_concurrent
    assert policy.breaker == original.breaker
    assert policy.fault_classes[FaultClass.APPLICATION].start_rung is None
    assert scale_policy(original, 1) == original


def test_a_time_factor_that_is_not_positive_is_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        scale_policy(load_policy(), 0)
