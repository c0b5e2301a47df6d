"""Triage: evidence in, one fault class and a starting rung out."""

from __future__ import annotations

import pytest

from gpu_remediation.classifier import TIE_BREAK_ORDER, classify
from gpu_remediation.models import FaultClass as FC
from gpu_remediation.models import Rung
from gpu_remediation.policy import Policy
from gpu_remediation.policy_loader import load_policy, parse_policy
from tests.gpu_remediation.evidence_factories import (
    alert,
    at,
    condition,
    dcgm,
    efa,
    manual,
    xid,
)


@pytest.fixture(scope="module")
def policy() -> Policy:
    return load_policy()


def test_xid_79_is_fallen_off_bus_and_starts_at_reboot(policy: Policy) -> None:
    result = classify([xid(79, gpu=3)], policy)
    assert result.fault_class == FC.GPU_FALLEN_OFF_BUS
    assert result.start_rung == Rung.REBOOT
    assert result.max_rung == Rung.ESCALATE
    assert result.gpu_indices == [3]
    assert result.reasons == ["Xid 79 on GPU 3: GPU has fallen off the bus -> gpu_fallen_off_bus"]


def test_application_xids_alone_leave_the_node_untouched(policy: Policy) -> None:
    result = classify([xid(13, gpu=1), xid(43, gpu=2, observed_at=at(5))], policy)
    assert result.fault_class == FC.APPLICATION
    assert result.start_rung is None


def test_application_xid_with_xid_79_is_fallen_off_bus(policy: Policy) -> None:
    result = classify([xid(13, gpu=1), xid(79, gpu=3)], policy)
    assert result.fault_class == FC.GPU_FALLEN_OFF_BUS
    assert result.start_rung == Rung.REBOOT
    assert result.gpu_indices == [3]
    assert len(result.reasons) == 2


def test_informational_alone_is_not_acted_on(policy: Policy) -> None:
    result = classify([xid(92)], policy)
    assert (result.fault_class, result.start_rung) == (FC.INFORMATIONAL, None)


def test_unknown_xid_quarantines_and_diagnoses_but_never_replaces(policy: Policy) -> None:
    result = classify([xid(999)], policy)
    assert result.fault_class == FC.UNKNOWN
    assert result.start_rung == Rung.DIAGNOSE
    assert result.max_rung.order < Rung.REPLACE.order


def test_recovery_action_overrides_the_xid_table(policy: Policy) -> None:
    result = classify([xid(48, gpu=2, recovery_action=2)], policy)
    assert result.fault_class == FC.REBOOT_REQUIRED
    assert result.start_rung == Rung.REBOOT
    assert "driver recovery action 2" in result.reasons[0]


def test_recovery_action_zero_defers_to_the_table(policy: Policy) -> None:
    assert classify([xid(48, recovery_action=0)], policy).fault_class == FC.GPU_RESET_REQUIRED


def test_recovery_action_may_lower_the_table_class(policy: Policy) -> None:
    # The driver knows better than the static table.
    assert classify([xid(79, recovery_action=1)], policy).fault_class == FC.GPU_RESET_REQUIRED


def test_unrecognised_recovery_action_on_an_application_xid_is_unknown(policy: Policy) -> None:
    assert classify([xid(13, recovery_action=9)], policy).fault_class == FC.UNKNOWN


def test_unrecognised_recovery_action_keeps_a_stronger_table_class(policy: Policy) -> None:
    assert classify([xid(79, recovery_action=9)], policy).fault_class == FC.GPU_FALLEN_OFF_BUS


def test_xid_154_reads_the_recovery_action_from_its_message(policy: Policy) -> None:
    line = "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"
    assert classify([xid(154, message=line)], policy).fault_class == FC.REBOOT_REQUIRED


def test_xid_154_without_an_action_is_unknown(policy: Policy) -> None:
    assert classify([xid(154)], policy).fault_class == FC.UNKNOWN


def test_three_xid_13_or_31_on_one_gpu_become_unknown(policy: Policy) -> None:
    evidence = [xid(13, gpu=4, observed_at=at(0)), xid(31, gpu=4, observed_at=at(60))]
    assert classify(evidence, policy).fault_class == FC.APPLICATION
    evidence.append(xid(13, gpu=4, observed_at=at(120)))
    result = classify(evidence, policy)
    assert result.fault_class == FC.UNKNOWN
    assert result.start_rung == Rung.DIAGNOSE
    assert result.gpu_indices == [4]
    assert "suspect hardware" in result.reasons[-1]


def test_application_xids_spread_over_gpus_stay_application(policy: Policy) -> None:
    evidence = [xid(13, gpu=g, observed_at=at(g)) for g in range(4)]
    assert classify(evidence, policy).fault_class == FC.APPLICATION


def test_one_event_reported_twice_counts_once(policy: Policy) -> None:
    evidence = [xid(13, gpu=1), xid(13, gpu=1), xid(31, gpu=1, observed_at=at(9))]
    assert classify(evidence, policy).fault_class == FC.APPLICATION


def test_cleared_evidence_is_ignored(policy: Policy) -> None:
    result = classify([xid(79, gpu=3, cleared=True), xid(48, gpu=1)], policy)
    assert result.fault_class == FC.GPU_RESET_REQUIRED
    assert result.gpu_indices == [1]
    assert result.reasons[0].startswith("cleared, ignored: Xid 79")


def test_only_cleared_evidence_leaves_the_node_untouched(policy: Policy) -> None:
    result = classify([xid(79, cleared=True)], policy)
    assert (result.fault_class, result.start_rung) == (FC.INFORMATIONAL, None)


def test_empty_evidence_is_an_error(policy: Policy) -> None:
    with pytest.raises(ValueError, match="at least one"):
        classify([], policy)


def test_highest_start_rung_wins(policy: Policy) -> None:
    result = classify([xid(48, gpu=0), dcgm(80, gpu_index=5), xid(79, gpu=3)], policy)
    assert result.fault_class == FC.ROW_REMAP_FAILURE
    assert result.start_rung == Rung.REPLACE
    assert result.gpu_indices == [5]


def test_gpus_of_every_evidence_at_the_winning_rung_are_reset(policy: Policy) -> None:
    result = classify([xid(48, gpu=1), xid(63, gpu=2), xid(13, gpu=7)], policy)
    assert result.start_rung == Rung.GPU_RESET
    assert result.fault_class == FC.ROW_REMAP_PENDING  # the more specific of the two
    assert result.gpu_indices == [1, 2]


def test_evidence_without_a_gpu_at_the_winning_rung_means_all_gpus(policy: Policy) -> None:
    assert classify([xid(48, gpu=1), xid(48, gpu=None)], policy).gpu_indices == []


def test_classes_come_from_the_policy(policy: Policy) -> None:
    custom = parse_policy("fault_classes:\n  gpu_reset_required: {start_rung: reboot}\n")
    result = classify([xid(48)], custom)
    assert result.start_rung == Rung.REBOOT


def test_notify_only_classes_lose_to_any_other_class() -> None:
    custom = parse_policy("fault_classes:\n  unknown: {start_rung: null}\n")
    assert classify([xid(13), xid(999)], custom).fault_class == FC.UNKNOWN


def test_tie_break_order_covers_every_class() -> None:
    assert sorted(TIE_BREAK_ORDER) == sorted(FC)


@pytest.mark.parametrize(
    ("error_id", "severity", "expected"),
    [(3, None, FC.UNKNOWN), (120, 2, FC.GPU_FALLEN_OFF_BUS), (777, 6, FC.GPU_RESET_REQUIRED)],
)
def test_dcgm_evidence_is_classified_by_id_then_severity(
    policy: Policy, error_id: int, severity: int | None, expected: FC
) -> None:
    assert classify([dcgm(error_id, severity)], policy).fault_class == expected


@pytest.mark.parametrize(
    ("check", "expected", "start"),
    [
        ("device_count", FC.EFA_FAILURE, Rung.REPLACE),
        ("provider", FC.EFA_FAILURE, Rung.REPLACE),
        ("link", FC.EFA_LINK_DOWN, Rung.REBOOT),
        ("counters", FC.INFORMATIONAL, None),
    ],
)
def test_efa_checks_are_classified(
    policy: Policy, check: str, expected: FC, start: Rung | None
) -> None:
    result = classify([efa(check, device="rdmap0s6")], policy)
    assert (result.fault_class, result.start_rung) == (expected, start)


def test_eks_accelerated_hardware_false_uses_the_xid_of_its_reason(policy: Policy) -> None:
    evidence = condition("AcceleratedHardwareReady", "False", reason="NvidiaXID79Error")
    assert classify([evidence], policy).fault_class == FC.GPU_FALLEN_OFF_BUS


def test_eks_condition_true_is_healthy(policy: Policy) -> None:
    evidence = condition("AcceleratedHardwareReady", "True", reason="NvidiaXID79Error")
    result = classify([evidence], policy)
    assert result.start_rung is None
    assert "not a problem" in result.reasons[0]


def test_eks_networking_false_is_unknown(policy: Policy) -> None:
    assert classify([condition("NetworkingReady", "False")], policy).fault_class == FC.UNKNOWN


@pytest.mark.parametrize("status", ["False", "Unknown"])
def test_ready_false_or_unknown_is_node_not_ready(policy: Policy, status: str) -> None:
    result = classify([condition("Ready", status)], policy)
    assert (result.fault_class, result.start_rung) == (FC.NODE_NOT_READY, Rung.REBOOT)


def test_npd_gpu_condition_true_yields_the_xid_and_gpu_of_its_message(policy: Policy) -> None:
    message = "Xid 79 on GPU 3 (0000:53:00): reboot required"
    result = classify([condition("GpuHealthProblem", "True", "GpuXidError", message)], policy)
    assert result.fault_class == FC.GPU_FALLEN_OFF_BUS
    assert result.gpu_indices == [3]


def test_npd_gpu_condition_false_is_healthy(policy: Policy) -> None:
    message = "Xid 79 on GPU 3 (0000:53:00): reboot required"
    result = classify([condition("GpuHealthProblem", "False", "GpuXidError", message)], policy)
    assert result.start_rung is None


def test_npd_gpu_condition_with_a_dcgm_error_uses_the_dcgm_id(policy: Policy) -> None:
    evidence = condition("GpuHealthProblem", "True", "GpuDcgmError", "DCGM error 85 on GPU 2")
    result = classify([evidence], policy)
    assert (result.fault_class, result.gpu_indices) == (FC.ROW_REMAP_PENDING, [2])


def test_npd_efa_condition_uses_its_reason(policy: Policy) -> None:
    evidence = condition("EfaHealthProblem", "True", "EfaDeviceCountMismatch", "16 of 32")
    assert classify([evidence], policy).fault_class == FC.EFA_FAILURE


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("EFA device count: 31 of 32 devices", FC.EFA_FAILURE),
        ("EFA provider: fi_info -p efa found no provider", FC.EFA_FAILURE),
        ("EFA link (rdmap0s6): port 1 is DOWN", FC.EFA_LINK_DOWN),
        ("efa-check hung: no answer within 10 s", FC.UNKNOWN),
    ],
)
def test_npd_efa_condition_from_the_agent_reads_the_check_from_its_message(
    policy: Policy, message: str, expected: FC
) -> None:
    # The agent's NPD rule has one fixed reason; only the message names the check.
    evidence = condition("EfaHealthProblem", "True", "EfaHealthCheckFailed", message)
    assert classify([evidence], policy).fault_class == expected


def test_unrecognised_problem_condition_is_unknown(policy: Policy) -> None:
    assert classify([condition("KernelDeadlock", "True")], policy).fault_class == FC.UNKNOWN


@pytest.mark.parametrize("label", ["xid", "value"])
def test_xid_alert_uses_the_xid_and_gpu_labels(policy: Policy, label: str) -> None:
    evidence = alert(
        alertname="GpuXid", __name__="DCGM_FI_DEV_XID_ERRORS", gpu="6", **{label: "79"}
    )
    result = classify([evidence], policy)
    assert (result.fault_class, result.gpu_indices) == (FC.GPU_FALLEN_OFF_BUS, [6])


def test_xid_alert_without_an_xid_is_unknown(policy: Policy) -> None:
    assert classify([alert(alertname="DCGM_FI_DEV_XID_ERRORS")], policy).fault_class == FC.UNKNOWN


@pytest.mark.parametrize(
    ("metric", "expected"),
    [
        ("DCGM_FI_DEV_ROW_REMAP_FAILURE", FC.ROW_REMAP_FAILURE),
        ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", FC.ROW_REMAP_PENDING),
    ],
)
def test_row_remap_alerts_are_classified_by_metric(
    policy: Policy, metric: str, expected: FC
) -> None:
    assert classify([alert(alertname="RowRemap", metric=metric)], policy).fault_class == expected


def test_alert_rule_may_state_the_class(policy: Policy) -> None:
    result = classify([alert(alertname="Custom", fault_class="hardware_failure")], policy)
    assert result.fault_class == FC.HARDWARE_FAILURE


def test_unrecognised_alert_is_unknown(policy: Policy) -> None:
    assert classify([alert(alertname="DiskFull")], policy).fault_class == FC.UNKNOWN


@pytest.mark.parametrize(
    ("runbook", "expected", "start"),
    [
        ("diagnose", FC.UNKNOWN, Rung.DIAGNOSE),
        ("reset", FC.GPU_RESET_REQUIRED, Rung.GPU_RESET),
        ("reboot", FC.REBOOT_REQUIRED, Rung.REBOOT),
        ("replace", FC.HARDWARE_FAILURE, Rung.REPLACE),
    ],
)
def test_manual_runbooks_start_where_asked(
    policy: Policy, runbook: str, expected: FC, start: Rung
) -> None:
    result = classify([manual(runbook, requested_by="alice")], policy)
    assert (result.fault_class, result.start_rung) == (expected, start)
    assert "by alice" in result.reasons[0]


def test_manual_replace_starts_at_replace_even_if_the_policy_says_otherwise() -> None:
    custom = parse_policy("fault_classes:\n  hardware_failure: {start_rung: reboot}\n")
    result = classify([manual("replace")], custom)
    assert result.start_rung == Rung.REPLACE


def test_manual_auto_alone_is_unknown(policy: Policy) -> None:
    result = classify([manual("auto")], policy)
    assert (result.fault_class, result.start_rung) == (FC.UNKNOWN, Rung.DIAGNOSE)


def test_manual_auto_defers_to_other_evidence(policy: Policy) -> None:
    assert classify([manual("auto"), xid(13)], policy).fault_class == FC.APPLICATION


def test_one_reason_per_piece_of_evidence_in_order(policy: Policy) -> None:
    evidence = [xid(13), efa("counters"), condition("Ready", "True"), manual("auto")]
    reasons = classify(evidence, policy).reasons
    assert len(reasons) == 4
    assert reasons[0].startswith("Xid 13 on GPU 0")


def test_classification_is_deterministic(policy: Policy) -> None:
    evidence = [xid(48, gpu=1), xid(63, gpu=2), dcgm(3), condition("Ready", "Unknown")]
    assert classify(evidence, policy) == classify(list(evidence), policy)
