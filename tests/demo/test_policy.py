"""The demo's policy: every duration divided by the time factor; floors on liveness nets only."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from demo.policy import MIN_ACTIVITY_TIMEOUT, MIN_TIMEOUT, scale_policy
from demo.run import demo_policy, options_from
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


def test_windows_waits_and_retry_intervals_are_scaled_exactly_with_no_real_time_floor() -> None:
    # Issue 40: at factor 6000 a 10 s floor made the 45 min reboot window 16.7 h.
    policy = scale_policy(load_policy(), 6000)
    assert policy.rung(Rung.REBOOT).timeout == timedelta(minutes=45) / 6000
    assert policy.rung(Rung.STOP_GPU_WORK).timeout == timedelta(minutes=15) / 6000
    assert policy.verification.timeout == timedelta(minutes=20) / 6000
    assert policy.rung(Rung.QUARANTINE).retry.initial_interval == timedelta(seconds=5) / 6000
    assert policy.replacement.permit_wait_timeout == timedelta(hours=6) / 6000
    assert policy.operator.approval_timeout == timedelta(hours=24) / 6000
    assert policy.admission.check_timeout == timedelta(minutes=30) / 6000


def test_only_the_liveness_nets_keep_a_real_time_floor() -> None:
    policy = scale_policy(load_policy(), 600)
    assert policy.timeouts.bookkeeping == policy.timeouts.heartbeat == MIN_ACTIVITY_TIMEOUT
    # A live holder never loses its permit: the lease outlives the replace rung.
    assert policy.replacement.lease >= max(MIN_TIMEOUT, 2 * policy.rung(Rung.REPLACE).timeout)


def test_a_test_may_floor_the_windows_but_never_lengthens_a_shorter_one() -> None:
    floor = timedelta(seconds=5)
    policy = scale_policy(
        parse_policy("rungs: {quarantine: {timeout: 3s}}"), 600, window_floor=floor
    )
    assert policy.rung(Rung.REBOOT).timeout == floor  # 45m / 600 = 4.5 s
    assert policy.rung(Rung.QUARANTINE).timeout == timedelta(seconds=3)
    assert policy.cooldown == timedelta(seconds=3)  # not a window: exact


def test_what_is_not_a_duration_is_unchanged() -> None:
    original = load_policy()
    policy = scale_policy(original, 120)
    assert policy.replacement.max_concurrent == original.replacement.max_concurrent
    fields = ("max_unhealthy_fraction", "min_unhealthy_nodes", "per_pool")
    assert [getattr(policy.breaker, f) for f in fields] == [
        getattr(original.breaker, f) for f in fields
    ]
    # Its hold's durations are policy time, scaled like every other.
    assert policy.breaker.recheck_interval == original.breaker.recheck_interval / 120
    assert policy.fault_classes[FaultClass.APPLICATION].start_rung is None
    assert scale_policy(original, 1) == original


def test_a_time_factor_that_is_not_positive_is_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        scale_policy(load_policy(), 0)


def test_the_demo_skips_the_gpu_reset_on_p5_only() -> None:
    policy = demo_policy(options_from())  # the default fleet: h100 and p5:no-reset
    assert not policy.for_pool("p5").rung(Rung.GPU_RESET).enabled
    assert policy.for_pool("h100").rung(Rung.GPU_RESET).enabled
    assert policy.rung(Rung.GPU_RESET).enabled
    assert policy.admission.enabled  # the demo still shows the gate
    # Everything else is the shipped default, scaled.
    shipped = scale_policy(load_policy(), options_from().time_factor)
    assert policy.model_copy(update={"pools": {}, "admission": shipped.admission}) == shipped


def test_a_policy_file_given_to_the_demo_decides_its_pools_itself(tmp_path: Path) -> None:
    file = tmp_path / "policy.yaml"
    file.write_text("dry_run: true\n")
    assert demo_policy(options_from(policy=file)).pools == {}


def test_a_pools_durations_are_scaled_like_the_settings_they_override() -> None:
    policy = scale_policy(
        parse_policy(
            "pools: {p5: {cooldown: 10m, rungs: {reboot: {timeout: 1h, window: 24h}}, "
            "timeouts: {heartbeat: 5m}, fault_classes: {unknown: {grace: 1m}}}}"
        ),
        600,
    )
    p5 = policy.for_pool("p5")
    assert p5.cooldown == timedelta(seconds=1)  # 10m, exactly
    assert p5.rung(Rung.REBOOT).window == timedelta(minutes=2.4)  # 24h, exactly
    assert p5.fault_class(FaultClass.UNKNOWN).grace == timedelta(seconds=0.1)
    assert p5.rung(Rung.REBOOT).timeout == timedelta(seconds=6)  # 1h, exactly
    assert p5.timeouts.heartbeat == MIN_ACTIVITY_TIMEOUT  # 5m / 600 = 0.5 s


def test_a_pools_lease_outlives_its_own_replace_rung() -> None:
    policy = scale_policy(parse_policy("pools: {p5: {rungs: {replace: {timeout: 10h}}}}"), 600)
    p5 = policy.for_pool("p5")
    assert p5.rung(Rung.REPLACE).timeout == timedelta(minutes=1)
    assert p5.replacement.lease >= 2 * p5.rung(Rung.REPLACE).timeout
    assert policy.replacement.lease < p5.replacement.lease  # the base keeps its own
