"""The fault catalog: what each GPU, DCGM, EFA and node signal means for remediation.

Pure data and small lookups, written from the reference (NVIDIA's Xid catalog,
NVML recovery actions, DCGM error ids, EKS node-monitoring conditions). The
classifier combines these per-signal verdicts into one incident class; the
policy decides what each class does, so every mapping here is a default that
operators change through policy, not code.

Nothing here does I/O: the module is imported by workflow code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from gpu_remediation.models import FaultClass

FC = FaultClass


class NvidiaAction(StrEnum):
    """NVIDIA's recommended immediate action for an Xid (its catalog's buckets)."""

    RESTART_APP = "RESTART_APP"
    IGNORE = "IGNORE"
    RESET_GPU = "RESET_GPU"
    RESTART_BM = "RESTART_BM"
    RESTART_VM = "RESTART_VM"
    CONTACT_SUPPORT = "CONTACT_SUPPORT"
    CHECK_MECHANICALS = "CHECK_MECHANICALS"
    WORKFLOW = "WORKFLOW"  # needs more context: decode registers, follow another Xid


@dataclass(frozen=True, slots=True)
class XidInfo:
    """One row of the Xid table."""

    xid: int
    fault_class: FaultClass
    action: NvidiaAction
    meaning: str


_A = NvidiaAction
_XID_ROWS: tuple[tuple[int, FaultClass, NvidiaAction, str], ...] = (
    (8, FC.APPLICATION, _A.RESTART_APP, "FIFO idle timeout"),
    (13, FC.APPLICATION, _A.RESTART_APP, "graphics engine exception"),
    (31, FC.APPLICATION, _A.RESTART_APP, "GPU memory page fault"),
    (32, FC.APPLICATION, _A.RESTART_APP, "corrupted push buffer"),
    (38, FC.INFORMATIONAL, _A.IGNORE, "driver firmware watchdog"),
    # NVIDIA says IGNORE: the channel is reset and the GPU stays healthy; the
    # application faulted, so its owner is told.
    (43, FC.APPLICATION, _A.IGNORE, "GPU stopped processing"),
    # Secondary error: the causing Xid, reported alongside, decides the class.
    (45, FC.APPLICATION, _A.WORKFLOW, "preemptive cleanup after earlier errors"),
    (46, FC.GPU_RESET_REQUIRED, _A.RESET_GPU, "GPU timeout"),
    (48, FC.GPU_RESET_REQUIRED, _A.RESET_GPU, "double-bit ECC error"),
    (54, FC.HARDWARE_FAILURE, _A.CHECK_MECHANICALS, "auxiliary power not connected"),
    (62, FC.GPU_RESET_REQUIRED, _A.RESET_GPU, "internal micro-controller halt"),
    # NVIDIA says IGNORE, but the remap only takes effect after a reset, and AWS's
    # agent treats it as repair-worthy: reset at the next convenient time.
    (63, FC.ROW_REMAP_PENDING, _A.IGNORE, "row remapping pending"),
    # A remapping failure is an RMA criterion.
    (64, FC.ROW_REMAP_FAILURE, _A.CONTACT_SUPPORT, "row remapping failure"),
    (68, FC.APPLICATION, _A.RESTART_APP, "video decoder exception"),
    (69, FC.APPLICATION, _A.RESTART_APP, "graphics engine class error"),
    (74, FC.NVLINK_ERROR, _A.WORKFLOW, "NVLink error"),
    # A reset does not help a GPU that fell off the bus: reboot the host.
    (79, FC.GPU_FALLEN_OFF_BUS, _A.RESTART_BM, "GPU has fallen off the bus"),
    (92, FC.INFORMATIONAL, _A.IGNORE, "high single-bit ECC rate"),
    (94, FC.APPLICATION, _A.RESTART_APP, "contained memory error"),
    (95, FC.GPU_RESET_REQUIRED, _A.RESET_GPU, "uncontained memory error"),
    (109, FC.GPU_RESET_REQUIRED, _A.RESET_GPU, "context-switch timeout"),
    (110, FC.GPU_RESET_REQUIRED, _A.RESET_GPU, "security fault"),
    (119, FC.GPU_RESET_REQUIRED, _A.RESET_GPU, "GSP RPC timeout"),
    (120, FC.GPU_RESET_REQUIRED, _A.RESET_GPU, "GSP error"),
    (121, FC.INFORMATIONAL, _A.IGNORE, "C2C error (corrected)"),
    (136, FC.GPU_RESET_REQUIRED, _A.RESET_GPU, "link training failed"),
    (140, FC.GPU_RESET_REQUIRED, _A.RESET_GPU, "ECC unrecovered error"),
    (143, FC.GPU_RESET_REQUIRED, _A.RESET_GPU, "GPU init error"),
    *((xid, FC.NVLINK_ERROR, _A.WORKFLOW, "NVLink5 error") for xid in range(144, 151)),
    (151, FC.REBOOT_REQUIRED, _A.RESTART_VM, "key rotation error"),
    # The recovery action it reports decides (see RECOVERY_ACTIONS); without one
    # the node is quarantined and diagnosed.
    (154, FC.UNKNOWN, _A.WORKFLOW, "GPU recovery action changed"),
    (155, FC.GPU_RESET_REQUIRED, _A.RESET_GPU, "NVLink link down (software)"),
    (156, FC.GPU_RESET_REQUIRED, _A.RESET_GPU, "resource retirement event"),
    # NVIDIA's immediate action is IGNORE (support only if it repeats); a real
    # retirement failure also shows as DCGM error 80/84, which replaces the node.
    (157, FC.INFORMATIONAL, _A.IGNORE, "resource retirement failure"),
    (158, FC.GPU_RESET_REQUIRED, _A.RESET_GPU, "GPU fatal timeout"),
)

XID_TABLE: dict[int, XidInfo] = {row[0]: XidInfo(*row) for row in _XID_ROWS}
"""Known Xids. An Xid not listed is FaultClass.UNKNOWN (quarantine and diagnose)."""

SUSPECT_HARDWARE_XIDS = frozenset({13, 31})
"""Application-side Xids whose repetition on one GPU suggests hardware."""

REPEATED_APPLICATION_XID_THRESHOLD = 3
"""This many distinct Xid 13/31 events on one GPU make it suspect (class unknown)."""


def xid_info(xid: int) -> XidInfo | None:
    """Return the catalog row of ``xid``, or None when NVIDIA's table lacks it."""
    return XID_TABLE.get(xid)


# NVML recovery action (also reported by Xid 154). 0 (None) defers to the Xid table.
RECOVERY_ACTIONS: dict[int, tuple[FaultClass | None, str]] = {
    0: (None, "none"),
    1: (FC.GPU_RESET_REQUIRED, "GPU reset required"),
    2: (FC.REBOOT_REQUIRED, "node reboot required"),
    # Drain P2P, then the driver is queried again; quiescing peers means stopping
    # the GPU work, which the reset rung does anyway.
    3: (FC.GPU_RESET_REQUIRED, "drain P2P"),
    4: (FC.GPU_RESET_REQUIRED, "drain and reset"),
    5: (FC.GPU_RESET_REQUIRED, "recover IMEX domain"),
    6: (FC.REBOOT_REQUIRED, "bus reset"),
    7: (FC.REBOOT_REQUIRED, "system reboot"),
}

_RECOVERY_CHANGE = re.compile(r"recovery action changed from 0x[0-9a-f]+.*? to 0x([0-9a-f]+)", re.I)


def recovery_action_from_message(message: str) -> int | None:
    """Return the new action of an Xid 154 line ("... changed from 0x0 (None) to 0x2 ...")."""
    match = _RECOVERY_CHANGE.search(message)
    return int(match.group(1), 16) if match else None


# DCGM error ids (dcgm_errors.h) -> class and meaning.
DCGM_ERRORS: dict[int, tuple[FaultClass, str]] = {
    # A high PCIe replay rate may be the riser, the slot or the GPU: diagnose.
    3: (FC.UNKNOWN, "PCIe replay rate"),
    4: (FC.GPU_RESET_REQUIRED, "volatile double-bit ECC error"),
    5: (FC.INFORMATIONAL, "volatile single-bit ECC error"),
    14: (FC.NVLINK_ERROR, "NVLink down"),
    80: (FC.ROW_REMAP_FAILURE, "row remap failure"),
    81: (FC.GPU_RESET_REQUIRED, "uncontained error"),
    84: (FC.ROW_REMAP_FAILURE, "uncorrectable row remap"),
    85: (FC.ROW_REMAP_PENDING, "pending row remap"),
    120: (FC.GPU_FALLEN_OFF_BUS, "GPU fallen off the bus"),
    125: (FC.GPU_RESET_REQUIRED, "recovery action: reset"),
    126: (FC.REBOOT_REQUIRED, "recovery action: reboot"),
    128: (FC.GPU_RESET_REQUIRED, "recovery action: drain and reset"),
    131: (FC.INFORMATIONAL, "contained error"),
}

# DCGM severity (for ids not in DCGM_ERRORS): 6 reset, 2 isolate, 4 triage, 1 monitor.
DCGM_SEVERITY_CLASSES: dict[int, FaultClass] = {
    6: FC.GPU_RESET_REQUIRED,
    2: FC.UNKNOWN,
    4: FC.UNKNOWN,
    1: FC.INFORMATIONAL,
}


def dcgm_class(error_id: int | None, severity: int | None) -> tuple[FaultClass, str]:
    """Classify a DCGM failure by error id, else by severity; anything else is unknown."""
    if error_id is not None and error_id in DCGM_ERRORS:
        return DCGM_ERRORS[error_id]
    if severity is not None and severity in DCGM_SEVERITY_CLASSES:
        return DCGM_SEVERITY_CLASSES[severity], f"severity {severity}"
    return FC.UNKNOWN, "unclassified failure"


EFA_CHECKS: dict[str, tuple[FaultClass, str]] = {
    # A missing device or provider does not come back without new hardware.
    "device_count": (FC.EFA_FAILURE, "wrong EFA device count"),
    "provider": (FC.EFA_FAILURE, "EFA provider missing"),
    # A link may be down because of the switch or cable, not this node: diagnose
    # and reboot (link retraining) rather than spend a replacement on it.
    "link": (FC.UNKNOWN, "EFA link down"),
    # Counter bursts are warnings.
    "counters": (FC.INFORMATIONAL, "EFA error counters rising"),
}

# -------------------------------------------------------------------- node conditions

READY_CONDITION = "Ready"

# EKS node monitoring agent: status False is the problem.
EKS_ACCELERATED_HARDWARE_CONDITION = "AcceleratedHardwareReady"
EKS_NETWORKING_CONDITION = "NetworkingReady"
EKS_CONDITIONS = frozenset(
    {
        EKS_ACCELERATED_HARDWARE_CONDITION,
        EKS_NETWORKING_CONDITION,
        "StorageReady",
        "KernelReady",
        "ContainerRuntimeReady",
    }
)
_EKS_XID_REASON = re.compile(r"^NvidiaXID(\d+)Error$")

# This project's Node Problem Detector plugin (agent/): status True is the problem,
# as for every NPD custom condition.
NPD_GPU_CONDITION = "GpuHealthProblem"
NPD_EFA_CONDITION = "EfaHealthProblem"
NPD_CONDITIONS = frozenset({NPD_GPU_CONDITION, NPD_EFA_CONDITION})

# Reasons of NPD_EFA_CONDITION, one per EfaEvidence check.
NPD_EFA_REASONS: dict[str, str] = {
    "EfaDeviceCountMismatch": "device_count",
    "EfaProviderMissing": "provider",
    "EfaLinkDown": "link",
    "EfaCounterBurst": "counters",
}
NPD_GPU_XID_REASON = "GpuXidError"
NPD_GPU_DCGM_REASON = "GpuDcgmError"

_MESSAGE_XID = re.compile(r"\bXid\s+(\d+)(?:\s+on\s+GPU\s+(\d+))?", re.I)
_MESSAGE_DCGM = re.compile(r"\bDCGM\s+error\s+(\d+)(?:\s+on\s+GPU\s+(\d+))?", re.I)
# "EFA device count (...): ..." etc.: the agent's EFA findings (gpu_remediation.npd_message).
_MESSAGE_EFA = re.compile(r"(?:^|;\s*)EFA\s+(device count|provider|link|counters)\b[^:;]*:", re.I)


def npd_xid_message(xid: int, gpu_index: int | None, pci_bus: str | None, action: str) -> str:
    """Format the NPD condition message for an Xid, e.g. ``Xid 79 on GPU 3 (0000:53:00): ...``.

    The agent writes it and ``parse_message_xid`` reads it back, so both sides
    use this one format.
    """
    where = f" on GPU {gpu_index}" if gpu_index is not None else ""
    bus = f" ({pci_bus})" if pci_bus else ""
    return f"Xid {xid}{where}{bus}: {action}"


def _parse(pattern: re.Pattern[str], message: str) -> tuple[int, int | None] | None:
    match = pattern.search(message)
    if match is None:
        return None
    gpu = int(match.group(2)) if match.group(2) is not None else None
    # GPU indices are bounded (models.GpuIndex); a larger number is not an index.
    return int(match.group(1)), gpu if gpu is not None and gpu <= 63 else None


def parse_message_xid(message: str) -> tuple[int, int | None] | None:
    """Return (xid, gpu index) from a message such as ``Xid 79 on GPU 3 (...): ...``."""
    return _parse(_MESSAGE_XID, message)


def parse_message_dcgm(message: str) -> tuple[int, int | None] | None:
    """Return (DCGM error id, gpu index) from a message such as ``DCGM error 85 on GPU 2``."""
    return _parse(_MESSAGE_DCGM, message)


def parse_message_efa(message: str) -> str | None:
    """Return the EFA check (a key of ``EFA_CHECKS``) a message's first EFA finding names."""
    match = _MESSAGE_EFA.search(message)
    return match.group(1).lower().replace(" ", "_") if match else None


def eks_reason_xid(reason: str) -> int | None:
    """Return N from an EKS ``NvidiaXID<N>Error`` condition reason."""
    match = _EKS_XID_REASON.match(reason)
    return int(match.group(1)) if match else None


def condition_is_problem(condition_type: str, status: str) -> bool:
    """Return whether a node condition's status reports a problem.

    ``Ready`` and the EKS agent's ``*Ready`` conditions are healthy when True
    (Ready Unknown means the kubelet stopped reporting, which is a problem; an
    EKS agent condition Unknown only means the agent has not reported). NPD
    conditions, including unknown types, are problems when True.
    """
    if condition_type == READY_CONDITION:
        return status in ("False", "Unknown")
    if condition_type in EKS_CONDITIONS or (
        condition_type not in NPD_CONDITIONS and condition_type.endswith("Ready")
    ):
        return status == "False"
    return status == "True"


# -------------------------------------------------------------------- alerts

XID_METRIC = "DCGM_FI_DEV_XID_ERRORS"
ROW_REMAP_FAILURE_METRIC = "DCGM_FI_DEV_ROW_REMAP_FAILURE"
UNCORRECTABLE_REMAPPED_ROWS_METRIC = "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"
ALERT_METRIC_LABELS = ("metric", "__name__", "alertname")
"""Labels, in order, that may name the DCGM metric an alert is about."""
ALERT_XID_LABELS = ("xid", "value")
ALERT_GPU_LABEL = "gpu"
ALERT_FAULT_CLASS_LABEL = "fault_class"
"""An alert rule may state the class outright (a FaultClass value)."""

ALERT_METRIC_CLASSES: dict[str, tuple[FaultClass, str]] = {
    ROW_REMAP_FAILURE_METRIC: (FC.ROW_REMAP_FAILURE, "row remap failure"),
    UNCORRECTABLE_REMAPPED_ROWS_METRIC: (FC.ROW_REMAP_PENDING, "uncorrectable remapped rows"),
}
