"""effective_ladder: what each fault class would climb under a policy."""

from __future__ import annotations

from gpu_remediation.models import FaultClass as FC
from gpu_remediation.models import Rung
from gpu_remediation.policy_loader import effective_ladder, load_policy, parse_policy

R = Rung


def rungs(steps: list, runs: bool | None = None) -> list[Rung]:
    return [s.rung for s in steps if runs is None or s.runs is runs]


def test_gpu_reset_class_climbs_the_whole_ladder() -> None:
    steps = effective_ladder(load_policy(), FC.GPU_RESET_REQUIRED)
    expected = [R.QUARANTINE, R.STOP_GPU_WORK, R.GPU_RESET, R.REBOOT, R.REPLACE, R.ESCALATE]
    assert rungs(steps) == expected
    assert all(s.runs for s in steps)


def test_replace_class_skips_diagnose_and_lower_corrective_rungs() -> None:
    steps = effective_ladder(load_policy(), FC.HARDWARE_FAILURE)
    assert rungs(steps) == [R.QUARANTINE, R.STOP_GPU_WORK, R.REPLACE, R.ESCALATE]
    replace = steps[2]
    assert "replacement permit" in replace.note
    assert "breaker" in replace.note


def test_unknown_never_runs_replace() -> None:
    steps = effective_ladder(load_policy(), FC.UNKNOWN)
    assert rungs(steps, runs=True) == [
        R.QUARANTINE,
        R.STOP_GPU_WORK,
        R.DIAGNOSE,
        R.GPU_RESET,
        R.REBOOT,
        R.ESCALATE,
    ]
    replace = next(s for s in steps if s.rung == R.REPLACE)
    assert not replace.runs
    assert "above max_rung reboot" in replace.note


def test_notify_only_class_has_no_steps() -> None:
    assert effective_ladder(load_policy(), FC.APPLICATION) == []


def test_disabled_rung_is_shown_as_skipped() -> None:
    policy = parse_policy("rungs:\n  gpu_reset: {enabled: false}\n")
    steps = effective_ladder(policy, FC.GPU_RESET_REQUIRED)
    reset = next(s for s in steps if s.rung == R.GPU_RESET)
    assert (reset.runs, reset.enabled) == (False, False)
    assert "skipped" in reset.note
    assert R.REBOOT in rungs(steps, runs=True)


def test_approval_and_budgets_come_from_the_rung_policy() -> None:
    policy = parse_policy("rungs:\n  replace: {requires_approval: true, max_attempts: 4}\n")
    replace = next(s for s in effective_ladder(policy, FC.EFA_FAILURE) if s.rung == R.REPLACE)
    assert replace.requires_approval
    assert replace.max_attempts == 4
    assert "approval" in replace.note


def test_escalate_start_only_quarantines_then_escalates() -> None:
    policy = parse_policy("fault_classes:\n  unknown: {start_rung: escalate, max_rung: escalate}\n")
    assert rungs(effective_ladder(policy, FC.UNKNOWN)) == [R.QUARANTINE, R.ESCALATE]


def test_escalate_is_always_last() -> None:
    policy = load_policy()
    for fault_class in FC:
        steps = effective_ladder(policy, fault_class)
        if steps:
            assert steps[-1].rung == R.ESCALATE
            assert steps[0].rung == R.QUARANTINE


def test_an_efa_link_fault_passes_over_the_gpu_reset_and_is_verified_by_efa_checks() -> None:
    policy = parse_policy("fault_classes:\n  efa_link_down: {start_rung: diagnose}\n")
    steps = effective_ladder(policy, FC.EFA_LINK_DOWN)
    reset = next(s for s in steps if s.rung == R.GPU_RESET)
    assert not reset.runs
    assert "cannot fix" in reset.note
    reboot = next(s for s in steps if s.rung == R.REBOOT)
    assert "EFA checks" in reboot.note
    assert "DCGM" not in reboot.note
