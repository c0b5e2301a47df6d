"""Pure ladder decisions: starting point, climbing, attempt limits."""

from datetime import UTC, datetime, timedelta

from gpu_remediation.models import Classification, FaultClass, Rung
from gpu_remediation.workflow_models import RungAttempt
from tests.workflows.node_support import policy, with_rung
from workflows import ladder

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def verdict(start: Rung | None, ceiling: Rung = Rung.ESCALATE) -> Classification:
    return Classification(
        fault_class=FaultClass.GPU_RESET_REQUIRED, start_rung=start, max_rung=ceiling
    )


def test_the_third_incident_in_the_window_starts_at_replacement() -> None:
    start, ceiling, reason = ladder.starting_point(verdict(Rung.GPU_RESET), policy(), 2)
    assert start == Rung.REPLACE
    assert ceiling == Rung.ESCALATE
    assert "repeat offender" in reason


def test_the_second_incident_starts_where_its_class_says() -> None:
    start, _, _ = ladder.starting_point(verdict(Rung.GPU_RESET), policy(), 1)
    assert start == Rung.GPU_RESET


def test_repeat_offender_never_starts_above_the_class_ceiling() -> None:
    start, ceiling, _ = ladder.starting_point(verdict(Rung.DIAGNOSE, Rung.REBOOT), policy(), 5)
    assert start == Rung.REBOOT
    assert ceiling == Rung.REBOOT


def test_an_untouchable_fault_has_no_start_even_for_repeat_offenders() -> None:
    start, _, _ = ladder.starting_point(verdict(None), policy(), 10)
    assert start is None


def test_a_preparation_start_begins_at_diagnosis() -> None:
    start, _, _ = ladder.starting_point(verdict(Rung.QUARANTINE), policy(), 0)
    assert start == Rung.DIAGNOSE


def test_climbing_honours_a_stronger_classification() -> None:
    assert ladder.climb(Rung.GPU_RESET, verdict(Rung.GPU_RESET)) == Rung.REBOOT
    assert ladder.climb(Rung.DIAGNOSE, verdict(Rung.REPLACE)) == Rung.REPLACE
    assert ladder.climb(Rung.REPLACE, verdict(Rung.GPU_RESET)) == Rung.ESCALATE


def test_attempts_outside_the_window_do_not_count() -> None:
    pol = with_rung(policy(), Rung.REBOOT, max_attempts=1, window=timedelta(hours=24))
    old = RungAttempt(rung=Rung.REBOOT, started_at=NOW - timedelta(hours=25))
    recent = RungAttempt(rung=Rung.REBOOT, started_at=NOW - timedelta(hours=1))
    assert ladder.blocked_by_policy(Rung.REBOOT, Rung.ESCALATE, [old], NOW, pol) is None
    blocked = ladder.blocked_by_policy(Rung.REBOOT, Rung.ESCALATE, [old, recent], NOW, pol)
    assert blocked is not None
    assert "attempt limit" in blocked


def test_disabled_and_above_ceiling_rungs_are_blocked_but_escalation_never_is() -> None:
    pol = with_rung(policy(), Rung.GPU_RESET, enabled=False)
    assert "disabled" in (
        ladder.blocked_by_policy(Rung.GPU_RESET, Rung.ESCALATE, [], NOW, pol) or ""
    )
    assert "ceiling" in (ladder.blocked_by_policy(Rung.REPLACE, Rung.REBOOT, [], NOW, pol) or "")
    assert ladder.blocked_by_policy(Rung.ESCALATE, Rung.REBOOT, [], NOW, pol) is None


def test_a_node_slow_for_the_third_time_in_the_window_starts_at_replacement() -> None:
    # Repeat offenders by degradation count too (issue 37): the class starts at a reset.
    slow = Classification(
        fault_class=FaultClass.GPU_DEGRADED, start_rung=Rung.GPU_RESET, max_rung=Rung.ESCALATE
    )
    start, _, reason = ladder.starting_point(slow, policy(), 2)
    assert start == Rung.REPLACE
    assert "repeat offender" in reason
