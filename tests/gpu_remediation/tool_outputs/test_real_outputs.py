"""Real (or DCGM-source-derived) tool outputs yield the right evidence and class.

Each fixture under fixtures/real/ names its source on its first line; the
``src_`` ones were built from DCGM's JSON writer and message templates because
no capture of that failure is public (issue 18).
"""

from __future__ import annotations

import pytest

from gpu_remediation.classifier import classify
from gpu_remediation.contracts import DiagnosticResult
from gpu_remediation.models import FaultClass as FC
from gpu_remediation.models import Rung, Urgency
from gpu_remediation.policy import Policy
from gpu_remediation.policy_loader import load_policy
from gpu_remediation.tool_outputs.common import DiagnosticParseError
from gpu_remediation.tool_outputs.dcgm_diag import parse_dcgm_diag
from gpu_remediation.tool_outputs.dcgm_health import parse_dcgm_health
from gpu_remediation.tool_outputs.gpu_reset import parse_gpu_reset
from tests.gpu_remediation.tool_outputs.support import NOW, dcgm, real


@pytest.fixture(scope="module")
def policy() -> Policy:
    return load_policy()


def health(name: str) -> DiagnosticResult:
    return parse_dcgm_health(real(name), observed_at=NOW)


def one_failure(name: str, policy: Policy) -> tuple[int | None, int | None, FC]:
    result = health(name)
    assert not result.passed
    [evidence] = dcgm(result)
    return evidence.error_id, evidence.gpu_index, classify([evidence], policy).fault_class


# ------------------------------------------------------------------ dcgmi health -c -j


def test_health_fallen_off_the_bus_under_internal_error_is_dcgm_120(policy: Policy) -> None:
    assert one_failure("dcgm_health_src_fallen_off_bus.txt", policy) == (
        120,
        3,
        FC.GPU_FALLEN_OFF_BUS,
    )


def test_health_recovery_action_gpu_reset_is_dcgm_125_and_a_reset(policy: Policy) -> None:
    assert one_failure("dcgm_health_src_recovery_reset.txt", policy) == (
        125,
        0,
        FC.GPU_RESET_REQUIRED,
    )


def test_health_recovery_action_node_reboot_is_dcgm_126_and_a_reboot(policy: Policy) -> None:
    assert one_failure("dcgm_health_src_recovery_reboot.txt", policy) == (
        126,
        5,
        FC.REBOOT_REQUIRED,
    )


def test_health_recovery_action_drain_and_reset_is_dcgm_128(policy: Policy) -> None:
    assert one_failure("dcgm_health_src_recovery_drain_reset.txt", policy) == (
        128,
        7,
        FC.GPU_RESET_REQUIRED,
    )


def test_health_detected_xid_48_goes_through_the_xid_table(policy: Policy) -> None:
    assert one_failure("dcgm_health_src_xid48_dbe.txt", policy) == (101, 2, FC.GPU_RESET_REQUIRED)


def test_health_detected_xid_119_goes_through_the_xid_table(policy: Policy) -> None:
    error_id, gpu, fault_class = one_failure("dcgm_health_src_xid119_gsp.txt", policy)
    assert (error_id, gpu, fault_class) == (101, 4, FC.GPU_RESET_REQUIRED)
    [evidence] = dcgm(health("dcgm_health_src_xid119_gsp.txt"))
    assert "Xid 119, GSP RPC timeout" in classify([evidence], policy).reasons[0]


def test_health_uncontained_error_is_dcgm_81_and_starts_at_reset_without_waiting(
    policy: Policy,
) -> None:
    assert one_failure("dcgm_health_src_xid95_uncontained.txt", policy) == (
        81,
        1,
        FC.UNCONTAINED_ERROR,
    )
    assert policy.fault_class(FC.UNCONTAINED_ERROR).start_rung == Rung.GPU_RESET
    assert policy.fault_class(FC.UNCONTAINED_ERROR).urgency == Urgency.IMMEDIATE


def test_health_volatile_dbe_is_dcgm_4_and_a_reset(policy: Policy) -> None:
    assert one_failure("dcgm_health_src_dbe_volatile.txt", policy) == (4, 2, FC.GPU_RESET_REQUIRED)


def test_health_nvlink_down_is_dcgm_14_and_an_nvlink_error(policy: Policy) -> None:
    assert one_failure("dcgm_health_src_nvlink_down.txt", policy) == (14, 1, FC.NVLINK_ERROR)


def test_health_row_remap_failure_is_dcgm_80_and_a_replacement(policy: Policy) -> None:
    assert one_failure("dcgm_health_src_row_remap_failure.txt", policy) == (
        80,
        6,
        FC.ROW_REMAP_FAILURE,
    )


def test_health_retired_pages_limit_is_dcgm_7_and_hardware(policy: Policy) -> None:
    assert one_failure("dcgm_health_src_retired_pages_limit.txt", policy) == (
        7,
        0,
        FC.HARDWARE_FAILURE,
    )


def test_health_row_remap_limit_warning_is_still_an_rma_failure(policy: Policy) -> None:
    assert one_failure("dcgm_health_src_row_remap_limit_warn.txt", policy) == (
        132,
        0,
        FC.ROW_REMAP_FAILURE,
    )


def test_health_contained_error_warning_is_not_a_failure() -> None:
    result = health("dcgm_health_src_contained_warn.txt")
    assert result.passed
    assert "contained error" in result.summary


def test_health_pending_page_retirement_warning_is_not_a_failure() -> None:
    result = health("dcgm_health_src_pending_page_retirement_warn.txt")
    assert result.passed
    assert "pending retired page" in result.summary


# ---------------------------------------------------------------------- dcgmi diag -j


def test_diag_dcgm3_level1_all_pass_from_gcm_is_a_pass() -> None:
    assert parse_dcgm_diag(real("dcgm_diag3_r1_pass_gcm.txt"), 0, observed_at=NOW).passed


def test_diag_dcgm3_level1_failure_from_gcm_fails_with_evidence() -> None:
    result = parse_dcgm_diag(real("dcgm_diag3_r1_fail_gcm.txt"), 226, observed_at=NOW)
    assert not result.passed
    assert dcgm(result)


def test_diag_dcgm4_level3_eight_gpu_pass_from_dcgm_issue_215_is_a_pass() -> None:
    text = real("dcgm_diag4_r3_8gpu_pass_fragment_dcgm215.txt")
    assert parse_dcgm_diag(text, 0, observed_at=NOW).passed


def test_diag_plain_text_output_is_never_read_as_a_pass() -> None:
    text = real("dcgm_diag_text_r2_fail_mlengineering.txt")
    with pytest.raises(DiagnosticParseError):
        parse_dcgm_diag(text, 0, observed_at=NOW)
    assert not parse_dcgm_diag(text, 226, observed_at=NOW).passed


# ------------------------------------------------------------------------ nvidia-smi -r


def test_reset_refused_while_nvidia_persistenced_holds_the_gpu_is_in_use() -> None:
    result = parse_gpu_reset(255, real("gpureset_in_use_persistence_nvsentinel1690.txt"), "")
    assert result.status == "failed"
    assert "in use by another client" in result.detail.lower()


def test_reset_currently_in_use_by_another_process_is_recognised_as_in_use() -> None:
    result = parse_gpu_reset(255, "", real("gpureset_in_use_process_gpuoperator118.txt"))
    assert result.status == "failed"
    assert "in use by another client" in result.detail.lower()
    assert "currently in use by another process" in result.detail


def test_reset_success_after_persistence_is_off_is_ok() -> None:
    result = parse_gpu_reset(0, real("gpureset_ok_nvsentinel1692.txt"), "")
    assert result.status == "ok"
    assert "successfully reset" in result.detail
