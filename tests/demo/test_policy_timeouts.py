"""The demo scales the activities' own timeouts too: crash recovery takes simulated time."""

from __future__ import annotations

from datetime import timedelta

from demo.policy import (
    CLOCK_FREE_HEARTBEAT,
    MIN_ACTIVITY_TIMEOUT,
    clock_free_policy,
    scale_policy,
)
from gpu_remediation.policy_loader import load_policy, parse_policy


def test_activity_timeouts_are_divided_by_the_time_factor() -> None:
    timeouts = scale_policy(load_policy(), 4).timeouts
    assert timeouts.bookkeeping == timedelta(seconds=15)  # 60s
    assert timeouts.heartbeat == timedelta(seconds=30)  # 2m


def test_activity_timeouts_keep_a_real_time_floor_at_high_time_factors() -> None:
    for factor in (60, 600):
        timeouts = scale_policy(load_policy(), factor).timeouts
        assert timeouts.bookkeeping == timeouts.heartbeat == MIN_ACTIVITY_TIMEOUT


def test_the_activity_timeout_floor_is_its_own_and_can_be_lowered() -> None:
    policy = scale_policy(
        load_policy(),
        600,
        window_floor=timedelta(seconds=1),
        min_activity_timeout=timedelta(seconds=3),
    )
    assert policy.timeouts.heartbeat == policy.timeouts.bookkeeping == timedelta(seconds=3)


def test_a_floor_never_lengthens_an_activity_timeout_the_policy_made_shorter() -> None:
    policy = scale_policy(parse_policy("timeouts: {bookkeeping: 4s, heartbeat: 6s}"), 600)
    assert policy.timeouts.bookkeeping == timedelta(seconds=4)
    assert policy.timeouts.heartbeat == timedelta(seconds=6)


def test_the_clock_free_policy_keeps_every_duration_and_lengthens_only_the_heartbeat_net() -> None:
    policy = load_policy()
    free = clock_free_policy(policy)
    assert free.timeouts.heartbeat == CLOCK_FREE_HEARTBEAT
    assert free.model_dump(exclude={"timeouts"}) == policy.model_dump(exclude={"timeouts"})
    assert free.timeouts.bookkeeping == policy.timeouts.bookkeeping
