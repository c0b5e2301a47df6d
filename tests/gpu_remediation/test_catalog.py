"""The fault catalog matches the reference (docs: /work/shared/reference/gpu-faults.md)."""

from __future__ import annotations

import pytest

from gpu_remediation import catalog
from gpu_remediation.catalog import NvidiaAction
from gpu_remediation.models import FaultClass as FC

# Every row of the reference's Xid table and the class it must map to.
REFERENCE_XIDS: dict[int, FC] = {
    8: FC.APPLICATION,
    13: FC.APPLICATION,
    31: FC.APPLICATION,
    32: FC.APPLICATION,
    38: FC.INFORMATIONAL,
    43: FC.APPLICATION,
    45: FC.APPLICATION,
    46: FC.GPU_RESET_REQUIRED,
    48: FC.GPU_RESET_REQUIRED,
    54: FC.HARDWARE_FAILURE,
    62: FC.GPU_RESET_REQUIRED,
    63: FC.ROW_REMAP_PENDING,
    # Issue 18: NVIDIA says RESET_GPU, then field-diagnose before RMA.
    64: FC.GPU_RESET_REQUIRED,
    68: FC.APPLICATION,
    69: FC.APPLICATION,
    74: FC.NVLINK_ERROR,
    79: FC.GPU_FALLEN_OFF_BUS,
    92: FC.INFORMATIONAL,
    94: FC.APPLICATION,
    # Issue 16: RESET_GPU like 48, but uncontained: its own class, urgency immediate.
    95: FC.UNCONTAINED_ERROR,
    109: FC.GPU_RESET_REQUIRED,
    110: FC.GPU_RESET_REQUIRED,
    119: FC.GPU_RESET_REQUIRED,
    120: FC.GPU_RESET_REQUIRED,
    121: FC.INFORMATIONAL,
    136: FC.GPU_RESET_REQUIRED,
    140: FC.GPU_RESET_REQUIRED,
    143: FC.GPU_RESET_REQUIRED,
    # Issue 33: NVIDIA's 144-150 decode says RESET_GPU for a fatal unit error (a
    # non-fatal one is informational, test_xid_catalog); was nvlink_error (reboot).
    **dict.fromkeys(range(144, 151), FC.GPU_RESET_REQUIRED),
    151: FC.REBOOT_REQUIRED,
    154: FC.UNKNOWN,
    155: FC.GPU_RESET_REQUIRED,
    156: FC.GPU_RESET_REQUIRED,
    157: FC.INFORMATIONAL,
    158: FC.GPU_RESET_REQUIRED,
}


@pytest.mark.parametrize(("xid", "expected"), sorted(REFERENCE_XIDS.items()))
def test_every_reference_xid_maps_to_its_class(xid: int, expected: FC) -> None:
    info = catalog.xid_info(xid)
    assert info is not None
    assert info.fault_class == expected
    assert info.meaning


def test_the_table_holds_every_reference_xid() -> None:
    # Issue 18: the table is NVIDIA's whole catalog now (test_xid_catalog.py).
    assert set(REFERENCE_XIDS) <= set(catalog.XID_TABLE)


@pytest.mark.parametrize("xid", [0, 1, 2, 91, 173, 1023])
def test_xids_nvidia_lists_as_unused_or_does_not_list_have_no_entry(xid: int) -> None:
    assert catalog.xid_info(xid) is None


def test_xid_79_carries_nvidias_reboot_action() -> None:
    info = catalog.xid_info(79)
    assert info is not None
    assert info.action == NvidiaAction.RESTART_BM


@pytest.mark.parametrize(
    ("action", "expected"),
    [
        (0, None),
        (1, FC.GPU_RESET_REQUIRED),
        (2, FC.REBOOT_REQUIRED),
        (3, FC.GPU_RESET_REQUIRED),
        (4, FC.GPU_RESET_REQUIRED),
        (5, FC.GPU_RESET_REQUIRED),
        (6, FC.REBOOT_REQUIRED),
        (7, FC.REBOOT_REQUIRED),
    ],
)
def test_recovery_actions_map_to_classes(action: int, expected: FC | None) -> None:
    assert catalog.RECOVERY_ACTIONS[action][0] == expected


def test_recovery_action_is_read_from_an_xid_154_line() -> None:
    line = "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"
    assert catalog.recovery_action_from_message(line) == 2
    assert catalog.recovery_action_from_message("Xid 154 with no details") is None


@pytest.mark.parametrize(
    ("error_id", "expected"),
    [
        (3, FC.UNKNOWN),
        (4, FC.GPU_RESET_REQUIRED),
        (5, FC.INFORMATIONAL),
        (14, FC.NVLINK_ERROR),
        (80, FC.ROW_REMAP_FAILURE),
        (81, FC.UNCONTAINED_ERROR),
        # Issue 18: rows remapped after an uncorrectable error wait for a reset (DCGM: RESET).
        (84, FC.ROW_REMAP_PENDING),
        (85, FC.ROW_REMAP_PENDING),
        (120, FC.GPU_FALLEN_OFF_BUS),
        (125, FC.GPU_RESET_REQUIRED),
        (126, FC.REBOOT_REQUIRED),
        (128, FC.GPU_RESET_REQUIRED),
        (131, FC.INFORMATIONAL),
    ],
)
def test_dcgm_error_ids_map_to_classes(error_id: int, expected: FC) -> None:
    assert catalog.dcgm_class(error_id, None)[0] == expected


def test_a_known_dcgm_error_id_wins_over_its_severity() -> None:
    assert catalog.dcgm_class(85, 2)[0] == FC.ROW_REMAP_PENDING


@pytest.mark.parametrize(
    ("severity", "expected"),
    [
        (6, FC.GPU_RESET_REQUIRED),
        (2, FC.UNKNOWN),
        (4, FC.UNKNOWN),
        (1, FC.INFORMATIONAL),
        (0, FC.UNKNOWN),
        (3, FC.UNKNOWN),
        # Issue 18: a CONFIG finding is for a person, not a reboot.
        (5, FC.CONFIGURATION),
        (None, FC.UNKNOWN),
    ],
)
def test_unknown_dcgm_error_ids_fall_back_to_severity(severity: int | None, expected: FC) -> None:
    assert catalog.dcgm_class(9999, severity)[0] == expected


@pytest.mark.parametrize(
    ("check", "expected"),
    [
        ("device_count", FC.EFA_FAILURE),
        ("provider", FC.EFA_FAILURE),
        ("link", FC.EFA_LINK_DOWN),
        ("counters", FC.INFORMATIONAL),
        ("loopback", FC.EFA_DEGRADED),
    ],
)
def test_efa_checks_map_to_classes(check: str, expected: FC) -> None:
    assert catalog.EFA_CHECKS[check][0] == expected


def test_npd_efa_reasons_name_real_efa_checks() -> None:
    # Every check but the worker's own load test (ADR 028) is the node agent's.
    assert set(catalog.NPD_EFA_REASONS.values()) == set(catalog.EFA_CHECKS) - {"loopback"}


@pytest.mark.parametrize(
    ("type_", "status", "problem"),
    [
        ("Ready", "False", True),
        ("Ready", "Unknown", True),
        ("Ready", "True", False),
        ("AcceleratedHardwareReady", "False", True),
        ("AcceleratedHardwareReady", "True", False),
        ("AcceleratedHardwareReady", "Unknown", False),
        ("NetworkingReady", "False", True),
        ("GpuHealthProblem", "True", True),
        ("GpuHealthProblem", "False", False),
        ("EfaHealthProblem", "True", True),
        ("KernelDeadlock", "True", True),
        ("KernelDeadlock", "False", False),
        ("SomeVendorReady", "False", True),
    ],
)
def test_condition_polarity_npd_true_is_problem_eks_false_is_problem(
    type_: str, status: str, problem: bool
) -> None:
    assert catalog.condition_is_problem(type_, status) is problem


def test_npd_xid_message_round_trips() -> None:
    message = catalog.npd_xid_message(79, 3, "0000:53:00", "reboot required")
    assert message == "Xid 79 on GPU 3 (0000:53:00): reboot required"
    assert catalog.parse_message_xid(message) == (79, 3)


def test_a_message_without_gpu_still_yields_its_xid() -> None:
    assert catalog.parse_message_xid("Xid 48: reset required") == (48, None)
    assert catalog.parse_message_xid("all good") is None


def test_eks_reason_yields_the_xid() -> None:
    assert catalog.eks_reason_xid("NvidiaXID79Error") == 79
    assert catalog.eks_reason_xid("NvidiaXID13Warning") is None
    assert catalog.eks_reason_xid("DCGMHealthCheckFailed") is None
