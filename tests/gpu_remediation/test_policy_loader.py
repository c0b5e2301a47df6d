"""Loading policies: packaged defaults, overrides merged over them, clear errors."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import yaml

from gpu_remediation.models import FaultClass as FC
from gpu_remediation.models import Rung
from gpu_remediation.policy_loader import (
    PolicyError,
    deep_merge,
    default_policy_text,
    load_policy,
    parse_policy,
)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_load_and_spell_out_every_class_and_rung() -> None:
    raw = yaml.safe_load(default_policy_text())
    # The shipped file states every default rather than leaning on model defaults.
    assert set(raw["fault_classes"]) == {fc.value for fc in FC}
    assert set(raw["rungs"]) == {r.value for r in Rung}
    policy = load_policy()
    assert set(policy.fault_classes) == set(FC)


@pytest.mark.parametrize(
    ("fault_class", "start", "max_rung"),
    [
        (FC.APPLICATION, None, Rung.ESCALATE),
        (FC.INFORMATIONAL, None, Rung.ESCALATE),
        (FC.GPU_RESET_REQUIRED, Rung.GPU_RESET, Rung.ESCALATE),
        (FC.ROW_REMAP_PENDING, Rung.GPU_RESET, Rung.ESCALATE),
        (FC.NVLINK_ERROR, Rung.REBOOT, Rung.ESCALATE),
        (FC.REBOOT_REQUIRED, Rung.REBOOT, Rung.ESCALATE),
        (FC.GPU_FALLEN_OFF_BUS, Rung.REBOOT, Rung.ESCALATE),
        (FC.NODE_NOT_READY, Rung.REBOOT, Rung.ESCALATE),
        (FC.ROW_REMAP_FAILURE, Rung.REPLACE, Rung.ESCALATE),
        (FC.HARDWARE_FAILURE, Rung.REPLACE, Rung.ESCALATE),
        (FC.EFA_FAILURE, Rung.REPLACE, Rung.ESCALATE),
        (FC.UNKNOWN, Rung.DIAGNOSE, Rung.REBOOT),
    ],
)
def test_default_ladder_of_each_class(fault_class: FC, start: Rung | None, max_rung: Rung) -> None:
    fc = load_policy().fault_class(fault_class)
    assert (fc.start_rung, fc.max_rung) == (start, max_rung)


def test_default_guards() -> None:
    policy = load_policy()
    assert policy.dry_run is False
    assert policy.cooldown == timedelta(minutes=30)
    assert policy.verification.diag_level == 2
    assert policy.replacement.max_concurrent == 2
    assert policy.breaker.max_unhealthy_fraction == 0.2
    assert policy.breaker.min_unhealthy_nodes == 2
    rule = policy.repeat_offender
    assert (rule.incidents, rule.window, rule.start_rung) == (3, timedelta(days=7), Rung.REPLACE)
    assert not any(rp.requires_approval for rp in policy.rungs.values())
    assert policy.fault_class(FC.NODE_NOT_READY).grace == timedelta(minutes=5)


def test_partial_override_merges_over_the_defaults(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "rungs:\n"
        "  gpu_reset: {enabled: false}\n"
        "  reboot:\n"
        "    retry: {max_attempts: 7}\n"
        "fault_classes:\n"
        "  application: {start_rung: diagnose}\n"
        "dry_run: true\n",
    )
    policy = load_policy(path)
    defaults = load_policy()
    assert policy.dry_run is True
    assert policy.rung(Rung.GPU_RESET).enabled is False
    assert policy.rung(Rung.GPU_RESET).timeout == defaults.rung(Rung.GPU_RESET).timeout
    assert policy.rung(Rung.REBOOT).retry.max_attempts == 7
    assert policy.rung(Rung.REBOOT).retry.initial_interval == timedelta(seconds=30)
    assert policy.fault_class(FC.APPLICATION).start_rung == Rung.DIAGNOSE
    assert policy.fault_class(FC.APPLICATION).max_rung == Rung.ESCALATE
    assert policy.fault_class(FC.UNKNOWN) == defaults.fault_class(FC.UNKNOWN)


def test_null_overrides_a_default_start_rung() -> None:
    policy = parse_policy("fault_classes:\n  gpu_reset_required: {start_rung: null}\n")
    assert policy.fault_class(FC.GPU_RESET_REQUIRED).start_rung is None


def test_deep_merge_replaces_lists_and_scalars_and_merges_mappings() -> None:
    base = {"a": {"x": 1, "y": [1, 2]}, "b": 1}
    assert deep_merge(base, {"a": {"y": [3]}, "b": None}) == {"a": {"x": 1, "y": [3]}, "b": None}
    assert base == {"a": {"x": 1, "y": [1, 2]}, "b": 1}  # inputs untouched


def test_unknown_key_is_rejected_with_its_dotted_path(tmp_path: Path) -> None:
    path = write(tmp_path, "rungs:\n  reboot:\n    timout: 5m\n")
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    assert str(path) in str(info.value)
    assert "rungs.reboot.timout: Extra inputs are not permitted" in str(info.value)


def test_out_of_range_value_names_its_path_and_value() -> None:
    with pytest.raises(PolicyError, match=r"rungs\.reboot\.max_attempts: Input should be greater"):
        parse_policy("rungs:\n  reboot: {max_attempts: 0}\n")


def test_unknown_fault_class_is_rejected() -> None:
    with pytest.raises(PolicyError, match=r"fault_classes\.bogus\.\(key\)"):
        parse_policy("fault_classes:\n  bogus: {start_rung: reboot}\n")


def test_bad_duration_is_rejected_with_a_hint() -> None:
    with pytest.raises(PolicyError, match=r"cooldown: .*'10 minutes'.*\"10m\""):
        parse_policy("cooldown: 10 minutes\n")


@pytest.mark.parametrize(
    ("text", "expected"),
    [("cooldown: 90s", timedelta(seconds=90)), ("cooldown: 2h", timedelta(hours=2))],
)
def test_short_durations_are_accepted(text: str, expected: timedelta) -> None:
    assert parse_policy(text).cooldown == expected


def test_start_above_max_is_rejected() -> None:
    with pytest.raises(PolicyError, match=r"fault_classes\.unknown: start_rung replace is above"):
        parse_policy("fault_classes:\n  unknown: {start_rung: replace}\n")


def test_every_problem_is_listed() -> None:
    with pytest.raises(PolicyError) as info:
        parse_policy("dry_run: maybe\nrungs:\n  replace: {max_attempts: -1}\n")
    assert len(info.value.problems) == 2
    assert "2 problems" in str(info.value)


def test_disabling_quarantine_is_rejected() -> None:
    with pytest.raises(PolicyError, match="quarantine"):
        parse_policy("rungs:\n  quarantine: {enabled: false}\n")


def test_yaml_syntax_error_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "dry_run: false\nrungs:\n  reboot: {enabled: true\ncooldown: 5m\n")
    with pytest.raises(PolicyError, match=r"line \d+, column \d+: YAML syntax error") as info:
        load_policy(path)
    assert str(info.value).startswith(str(path))


def test_duplicate_key_names_the_line() -> None:
    with pytest.raises(PolicyError, match=r"line 2, column 1: .*duplicate key 'dry_run'"):
        parse_policy("dry_run: true\ndry_run: false\n")


@pytest.mark.parametrize(("text", "found"), [("- a\n- b\n", "a list"), ("", "an empty document")])
def test_a_document_that_is_not_a_mapping_is_rejected(text: str, found: str) -> None:
    with pytest.raises(PolicyError, match=f"must be a mapping at the top level, got {found}"):
        parse_policy(text)


def test_missing_file_is_a_policy_error(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="cannot read the policy file"):
        load_policy(tmp_path / "absent.yaml")


def test_unreadable_file_is_a_policy_error(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="cannot read the policy file"):
        load_policy(tmp_path)  # a directory


def test_non_utf8_file_is_a_policy_error(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"dry_run: \xff\n")
    with pytest.raises(PolicyError, match="cannot read the policy file"):
        load_policy(path)
