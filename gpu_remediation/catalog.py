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

from gpu_remediation.dcgm_errors import (
    DCGM_ERROR_META,
    HARDWARE_CATEGORIES,
    DcgmCategory,
    DcgmSeverity,
)
from gpu_remediation.models import FaultClass
from gpu_remediation.xid_catalog import NVIDIA_XID_CATALOG, NvidiaXid

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
    UPDATE_SWFW = "UPDATE_SWFW"
    CHECK_UVM = "CHECK_UVM"
    WORKFLOW = "WORKFLOW"  # needs more context: decode registers, follow another Xid
    NONE = "NONE"  # the catalog gives no action (codes newer than its action columns)


def nvidia_action(raw: str) -> NvidiaAction:
    """NVIDIA's immediate-resolution word -> its bucket (``WORKFLOW_XID_48`` -> WORKFLOW)."""
    if not raw:
        return NvidiaAction.NONE
    if raw.startswith(("WORKFLOW_", "XID_")):
        return NvidiaAction.WORKFLOW
    return NvidiaAction(raw)


@dataclass(frozen=True, slots=True)
class XidInfo:
    """One row of the Xid table."""

    xid: int
    fault_class: FaultClass
    action: NvidiaAction
    meaning: str


_A = NvidiaAction

# What NVIDIA's immediate action means for the ladder, for every code the rows
# below do not decide. RESTART_APP and IGNORE never touch the node.
ACTION_CLASSES: dict[NvidiaAction, FaultClass] = {
    _A.RESTART_APP: FC.APPLICATION,
    _A.IGNORE: FC.INFORMATIONAL,
    _A.RESET_GPU: FC.GPU_RESET_REQUIRED,
    _A.RESTART_BM: FC.REBOOT_REQUIRED,
    _A.RESTART_VM: FC.REBOOT_REQUIRED,
    _A.CHECK_MECHANICALS: FC.HARDWARE_FAILURE,
    # A driver / firmware update: a person, not a repair step.
    _A.UPDATE_SWFW: FC.CONFIGURATION,
    # NVIDIA's CONTACT_SUPPORT / CHECK_UVM / an undecoded workflow: quarantine and diagnose.
    _A.CONTACT_SUPPORT: FC.UNKNOWN,
    _A.CHECK_UVM: FC.UNKNOWN,
    _A.WORKFLOW: FC.UNKNOWN,
    _A.NONE: FC.UNKNOWN,
}

# The project's own decisions, where NVIDIA's bucket alone is not enough (the
# reason is on the row). Every other live code takes ACTION_CLASSES of its
# immediate action (xid_catalog.NVIDIA_XID_CATALOG).
_XID_ROWS: tuple[tuple[int, FaultClass, str], ...] = (
    (8, FC.APPLICATION, "FIFO idle timeout"),
    (13, FC.APPLICATION, "graphics engine exception"),
    (31, FC.APPLICATION, "GPU memory page fault"),
    (32, FC.APPLICATION, "corrupted push buffer"),
    (38, FC.INFORMATIONAL, "driver firmware watchdog"),
    # NVIDIA says IGNORE: the channel is reset and the GPU stays healthy; the
    # application faulted, so its owner is told.
    (43, FC.APPLICATION, "GPU stopped processing"),
    # Secondary error: the causing Xid, reported alongside, decides the class.
    (45, FC.APPLICATION, "preemptive cleanup after earlier errors"),
    (46, FC.GPU_RESET_REQUIRED, "GPU timeout"),
    # WORKFLOW_XID_48: reset alone; drain and reset with 63/64 (the recovery action says so).
    (48, FC.GPU_RESET_REQUIRED, "double-bit ECC error"),
    (54, FC.HARDWARE_FAILURE, "auxiliary power not connected"),
    (62, FC.GPU_RESET_REQUIRED, "internal micro-controller halt"),
    # The one deliberate departure from NVIDIA's IGNORE: the remap only takes
    # effect after a reset, and AWS's agent treats it as repair-worthy; reset at
    # the next convenient time (test_xid_catalog lists it as the only exception).
    (63, FC.ROW_REMAP_PENDING, "row remapping pending"),
    # NVIDIA: RESET_GPU now, CONTACT_SUPPORT if it persists. The reset rung's
    # verification diagnostic is the field check; a GPU that still fails climbs
    # to replacement (DCGM 80 / nvidia-smi "Remapping Failure Occurred" replace at once).
    (64, FC.GPU_RESET_REQUIRED, "row remapping failure"),
    (68, FC.APPLICATION, "video decoder exception"),
    (69, FC.APPLICATION, "graphics engine class error"),
    (74, FC.NVLINK_ERROR, "NVLink error"),
    # A reset does not help a GPU that fell off the bus: reboot the host.
    (79, FC.GPU_FALLEN_OFF_BUS, "GPU has fallen off the bus"),
    (92, FC.INFORMATIONAL, "high single-bit ECC rate"),
    (94, FC.APPLICATION, "contained memory error"),
    # NVIDIA: RESET_GPU, like 48, but the error escaped containment: the job's
    # results cannot be trusted, so it is not asked to checkpoint (urgency).
    (95, FC.UNCONTAINED_ERROR, "uncontained memory error"),
    (109, FC.GPU_RESET_REQUIRED, "context-switch timeout"),
    (110, FC.GPU_RESET_REQUIRED, "security fault"),
    (119, FC.GPU_RESET_REQUIRED, "GSP RPC timeout"),
    (120, FC.GPU_RESET_REQUIRED, "GSP error"),
    (121, FC.INFORMATIONAL, "C2C error (corrected)"),
    (136, FC.GPU_RESET_REQUIRED, "link training failed"),
    (140, FC.GPU_RESET_REQUIRED, "ECC unrecovered error"),
    (143, FC.GPU_RESET_REQUIRED, "GPU init error"),
    # WORKFLOW_NVLINK5_ERR: a fatal unit error needs the links retrained; the
    # line's severity word decides (a "Nonfatal" one is informational, classifier).
    *((xid, FC.NVLINK_ERROR, "NVLink5 error") for xid in range(144, 151)),
    (151, FC.REBOOT_REQUIRED, "key rotation error"),
    # The recovery action it reports decides (see RECOVERY_ACTIONS); without one
    # the node is quarantined and diagnosed.
    (154, FC.UNKNOWN, "GPU recovery action changed"),
    (155, FC.GPU_RESET_REQUIRED, "NVLink link down (software)"),
    (156, FC.GPU_RESET_REQUIRED, "resource retirement event"),
    # NVIDIA's immediate action is IGNORE (support only if it repeats); a real
    # retirement failure also shows as DCGM error 80/84, which the DCGM rows decide.
    (157, FC.INFORMATIONAL, "resource retirement failure"),
    (158, FC.GPU_RESET_REQUIRED, "GPU fatal timeout"),
    # Codes the catalog lists without an action yet (driver R575+):
    # power-smoothing capability changes do not stop the GPU working.
    *((xid, FC.INFORMATIONAL, "power smoothing circuitry state") for xid in range(162, 166)),
    # The GPU stopped answering on PCIe: like a fall off the bus, a reboot is needed.
    (167, FC.REBOOT_REQUIRED, "PCIe fatal timeout"),
    # The same internal micro-controller halt as 62, on SEC2.
    (169, FC.GPU_RESET_REQUIRED, "internal micro-controller halt (SEC2)"),
    # Details of an Xid 48 (DRAM or SRAM): handled as 48.
    (171, FC.GPU_RESET_REQUIRED, "uncorrectable DRAM error"),
    (172, FC.GPU_RESET_REQUIRED, "uncorrectable SRAM error"),
)

_PROJECT_ROWS: dict[int, tuple[FaultClass, str]] = {xid: (fc, m) for xid, fc, m in _XID_ROWS}


def _xid_row(xid: int, entry: NvidiaXid) -> XidInfo:
    action = nvidia_action(entry.immediate)
    fault_class, meaning = _PROJECT_ROWS.get(
        xid, (ACTION_CLASSES[action], entry.description[:1].lower() + entry.description[1:])
    )
    return XidInfo(xid, fault_class, action, meaning)


XID_TABLE: dict[int, XidInfo] = {
    xid: _xid_row(xid, entry) for xid, entry in sorted(NVIDIA_XID_CATALOG.items())
}
"""Every live Xid of NVIDIA's catalog; an Xid not listed is unknown (quarantine, diagnose)."""

NONFATAL_NVLINK5_XIDS = frozenset(range(144, 151))
"""NVLink5 Xids whose line carries the unit's severity: a ``Nonfatal`` one is informational."""
_NONFATAL = re.compile(r"\bnon-?fatal\b", re.IGNORECASE)


def nvlink5_nonfatal(xid: int, message: str) -> bool:
    """Whether an Xid 144-150 line reports a non-fatal unit error (NVIDIA's decode: IGNORE)."""
    return xid in NONFATAL_NVLINK5_XIDS and _NONFATAL.search(message) is not None


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


# DCGM error ids (dcgm_errors.h) -> class and meaning: the project's decisions.
# Ids without a row fall back to DCGM's own severity and category of the id
# (dcgm_errors.DCGM_ERROR_META, from dcgm_errors.c), see dcgm_class.
DCGM_ERRORS: dict[int, tuple[FaultClass, str]] = {
    # A high PCIe replay rate may be the riser, the slot or the GPU: diagnose.
    3: (FC.UNKNOWN, "PCIe replay rate"),
    4: (FC.GPU_RESET_REQUIRED, "volatile double-bit ECC error"),
    5: (FC.INFORMATIONAL, "volatile single-bit ECC error"),
    # Pre-Ampere page retirement: like a pending row remap, applied by a reset.
    6: (FC.ROW_REMAP_PENDING, "pending page retirement"),
    # Retired-page limits are NVIDIA's RMA criterion for pre-Ampere GPUs.
    7: (FC.HARDWARE_FAILURE, "retired pages limit"),
    8: (FC.HARDWARE_FAILURE, "retired pages (DBE) limit"),
    # DCGM ISOLATE on the NVLink fabric: retrain (reboot), then replace.
    13: (FC.NVLINK_ERROR, "NVLink error threshold"),
    14: (FC.NVLINK_ERROR, "NVLink down"),
    15: (FC.NVLINK_ERROR, "NVSwitch fatal error"),
    # Configuration findings: a person fixes them; no repair step would.
    29: (FC.CONFIGURATION, "persistence mode disabled"),
    46: (FC.CONFIGURATION, "PCIe link width"),
    # The diagnostic's memory tests found faulty memory (DCGM ISOLATE).
    52: (FC.HARDWARE_FAILURE, "faulty memory"),
    57: (FC.HARDWARE_FAILURE, "double-bit errors in the memory test"),
    58: (FC.HARDWARE_FAILURE, "memory miscompare"),
    70: (FC.NVLINK_ERROR, "NVLink CRC error threshold"),
    71: (FC.NVLINK_ERROR, "critical NVLink error"),
    80: (FC.ROW_REMAP_FAILURE, "row remap failure"),
    81: (FC.UNCONTAINED_ERROR, "uncontained error"),
    # Rows remapped after an uncorrectable error: pending until a reset (DCGM RESET).
    84: (FC.ROW_REMAP_PENDING, "uncorrectable row remap"),
    85: (FC.ROW_REMAP_PENDING, "pending row remap"),
    # The Xid decides: classifier reads "Detected XID N" through the Xid table.
    101: (FC.UNKNOWN, "Xid error"),
    109: (FC.NVLINK_ERROR, "NVSwitch fatal SXid"),
    112: (FC.CONFIGURATION, "fabric manager training error"),
    120: (FC.GPU_FALLEN_OFF_BUS, "GPU fallen off the bus"),
    125: (FC.GPU_RESET_REQUIRED, "recovery action: reset"),
    126: (FC.REBOOT_REQUIRED, "recovery action: reboot"),
    # As RECOVERY_ACTIONS 3: quiescing peers means stopping the GPU work, which the reset rung does.
    127: (FC.GPU_RESET_REQUIRED, "recovery action: drain P2P"),
    128: (FC.GPU_RESET_REQUIRED, "recovery action: drain and reset"),
    131: (FC.INFORMATIONAL, "contained error"),
    # Uncorrectable remaps at the limit: an RMA criterion (DCGM says TRIAGE).
    132: (FC.ROW_REMAP_FAILURE, "uncorrectable row remap limit"),
}

DCGM_XID_ERROR = 101
"""``DCGM_FR_XID_ERROR``: "Detected XID N for GPU M"; the Xid table decides its class."""

# DCGM severity -> class, for ids without a row (and for a reported severity).
DCGM_SEVERITY_CLASSES: dict[int, FaultClass] = {
    DcgmSeverity.RESET: FC.GPU_RESET_REQUIRED,
    DcgmSeverity.ISOLATE: FC.UNKNOWN,  # refined by category in dcgm_class
    DcgmSeverity.TRIAGE: FC.UNKNOWN,
    DcgmSeverity.CONFIG: FC.CONFIGURATION,
    DcgmSeverity.MONITOR: FC.INFORMATIONAL,
}

# DCGM ISOLATE ("cannot perform workload") on hardware: the diagnostic's own verdict.
_ISOLATE_CATEGORY_CLASSES: dict[DcgmCategory, FaultClass] = {
    DcgmCategory.HARDWARE_MEMORY: FC.HARDWARE_FAILURE,
    DcgmCategory.HARDWARE_NVLINK: FC.NVLINK_ERROR,
    DcgmCategory.HARDWARE_NVSWITCH: FC.NVLINK_ERROR,
}

REPLACEMENT_CLASSES = frozenset({FC.ROW_REMAP_FAILURE, FC.HARDWARE_FAILURE})
"""RMA classes: a DCGM health *warning* in one of these is still a failure (e.g. id 132)."""


def _severity_class(severity: int, category: DcgmCategory | None) -> FaultClass | None:
    if severity == DcgmSeverity.ISOLATE and category in HARDWARE_CATEGORIES:
        return _ISOLATE_CATEGORY_CLASSES.get(category, FC.UNKNOWN)
    return DCGM_SEVERITY_CLASSES.get(severity)


_DCGM_XID = re.compile(r"\bDetected XID (\d{1,4})\b", re.IGNORECASE)


def dcgm_message_xid(message: str) -> int | None:
    """The Xid of a DCGM "Detected XID N for GPU M" message (``DCGM_FR_XID_ERROR``)."""
    match = _DCGM_XID.search(message)
    return int(match.group(1)) if match else None


def dcgm_class(error_id: int | None, severity: int | None) -> tuple[FaultClass, str]:
    """Classify a DCGM failure: the project's row, else the reported severity, else DCGM's own.

    DCGM's own severity and category of an id come from ``dcgm_errors.c``
    (``dcgm_errors.DCGM_ERROR_META``); anything else is unknown.
    """
    if error_id is not None and error_id in DCGM_ERRORS:
        return DCGM_ERRORS[error_id]
    meta = DCGM_ERROR_META.get(error_id) if error_id is not None else None
    category = meta.category if meta is not None else None
    name = f"{meta.name.lower().replace('_', ' ')}, " if meta is not None else ""
    if severity is not None and (found := _severity_class(severity, category)) is not None:
        return found, f"{name}severity {severity}"
    if meta is not None and (found := _severity_class(meta.severity, category)) is not None:
        return found, f"{name}DCGM severity {meta.severity.name}"
    return FC.UNKNOWN, f"{name}unclassified failure" if name else "unclassified failure"


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
