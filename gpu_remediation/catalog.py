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
from typing import NamedTuple

from gpu_remediation.dcgm_errors import (
    DCGM_ERROR_META,
    HARDWARE_CATEGORIES,
    DcgmCategory,
    DcgmSeverity,
)
from gpu_remediation.models import FaultClass
from gpu_remediation.xid_catalog import (
    NVIDIA_XID_CATALOG,
    SOURCE_BUCKETS,
    SOURCE_DESCRIPTION,
    SOURCE_IMMEDIATE,
    SOURCE_NVLINK5_DECODE,
    SOURCE_TRIGGER,
    NvidiaXid,
)

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
    """One row of the Xid table.

    Attributes:
        xid: The Xid code.
        fault_class: The project's class of the code (the policy decides what it does).
        action: NVIDIA's immediate-action bucket of the code.
        meaning: A few words for reasons and messages.
        source: Where ``fault_class`` comes from: one of ``xid_catalog.SOURCES``,
            ``": "``, then what that cell of NVIDIA's catalog says, or, for a
            deliberate departure, ``"project: "`` and the reason.
    """

    xid: int
    fault_class: FaultClass
    action: NvidiaAction
    meaning: str
    source: str


_A = NvidiaAction

# What NVIDIA's immediate action means for the ladder, for every code the rows
# below do not decide. Each bucket's definition is in the catalog's sheet
# "Resolution Buckets" (xid_catalog.SOURCE_BUCKETS), quoted here.
ACTION_CLASSES: dict[NvidiaAction, FaultClass] = {
    # "The application should be restarted; RESET_GPU or RESTART_BM is not deemed
    # necessary" / "No Action required": neither touches the node.
    _A.RESTART_APP: FC.APPLICATION,
    _A.IGNORE: FC.INFORMATIONAL,
    # "RESTART_BM is not deemed necessary" (a failed reset climbs to reboot).
    _A.RESET_GPU: FC.GPU_RESET_REQUIRED,
    # "Restart bare metal" / "VM owning the affected GPU must be restarted" (on
    # EC2 the instance is that VM).
    _A.RESTART_BM: FC.REBOOT_REQUIRED,
    _A.RESTART_VM: FC.REBOOT_REQUIRED,
    # "Check to ensure that device seating and all applicable connections to it
    # are secure": hands on the host.
    _A.CHECK_MECHANICALS: FC.HARDWARE_FAILURE,
    # "Update Firmware and Software to latest versions": a person, not a repair step.
    _A.UPDATE_SWFW: FC.CONFIGURATION,
    # CONTACT_SUPPORT; CHECK_UVM ("If UVM/vGPU is being utilized, RESET_GPU;
    # otherwise IGNORE": the line does not say which); an undecoded workflow; no
    # action given: quarantine and diagnose, the diagnostic's findings reclassify.
    _A.CONTACT_SUPPORT: FC.UNKNOWN,
    _A.CHECK_UVM: FC.UNKNOWN,
    _A.WORKFLOW: FC.UNKNOWN,
    _A.NONE: FC.UNKNOWN,
}


class _Row(NamedTuple):
    fault_class: FaultClass
    meaning: str
    source: str


def _nvidia(immediate: str) -> str:
    # The code's immediate action, verbatim: test_xid_catalog checks it against the catalog.
    return f"{SOURCE_IMMEDIATE}: {immediate}"


def _cite(label: str, says: str) -> str:
    return f"{label}: {says}"


_RESET = FC.GPU_RESET_REQUIRED

# The project's rows, each citing its source (xid_catalog.SOURCE_*). A row citing
# NVIDIA's immediate action starts where that action's class starts (it may name
# the fault more precisely); a "project" row departs from the catalog or fills a
# gap in it, for the reason on its comment. Every other live code takes
# ACTION_CLASSES of its immediate action (xid_catalog.NVIDIA_XID_CATALOG).
_XID_ROWS: dict[int, _Row] = {
    8: _Row(FC.APPLICATION, "FIFO idle timeout", _nvidia("RESTART_APP")),
    # Repeats on one GPU make it suspect (WORKFLOW_XID_13/31, SUSPECT_HARDWARE_XIDS).
    13: _Row(FC.APPLICATION, "graphics engine exception", _nvidia("RESTART_APP")),
    31: _Row(FC.APPLICATION, "GPU memory page fault", _nvidia("RESTART_APP")),
    32: _Row(FC.APPLICATION, "corrupted push buffer", _nvidia("RESTART_APP")),
    38: _Row(FC.INFORMATIONAL, "driver firmware watchdog", _nvidia("IGNORE")),
    # The channel is reset and the GPU stays healthy; the application faulted, so
    # its owner is told (application, like IGNORE, never touches the node).
    43: _Row(FC.APPLICATION, "GPU stopped processing", _nvidia("IGNORE")),
    # Secondary error: the causing Xid, reported alongside, decides the class.
    # NVIDIA's solo case asks for a Fabric Manager restart, which no rung does,
    # and its Trigger Conditions say Xid 45 follows every aborted application
    # ("Control-C, GPU resets, sigkill"), "not indicative of a bug": alone it notifies.
    45: _Row(
        FC.APPLICATION,
        "preemptive cleanup after earlier errors",
        "project: WORKFLOW_XID_45 (Resolution Buckets) is 'Not Solo: IGNORE (follow"
        " guidance in other Xid)', 'Solo: RESTART_FM'; no rung restarts Fabric Manager",
    ),
    46: _Row(_RESET, "GPU timeout", _nvidia("RESET_GPU")),
    # Drained and reset with 63/64: the driver's recovery action says so (Xid 154).
    48: _Row(
        _RESET,
        "double-bit ECC error",
        _cite(SOURCE_BUCKETS, "WORKFLOW_XID_48, Solo: RESET_GPU, w/ 63 or 64: DRAIN_AND_RESET"),
    ),
    54: _Row(FC.HARDWARE_FAILURE, "auxiliary power not connected", _nvidia("CHECK_MECHANICALS")),
    62: _Row(_RESET, "internal micro-controller halt", _nvidia("RESET_GPU")),
    # The one departure from NVIDIA's IGNORE: the remap takes effect only after a
    # reset, and AWS treats Xid 63 as repair-worthy (aws/eks-node-monitoring-agent,
    # monitors/nvidia/dcgm/dcgm_policies.go, WellKnownXidCodes: "NVIDIA: IGNORE,
    # EC2: replace instance"); row_remap_pending resets at the next convenient
    # time (test_xid_catalog lists it as the only exception).
    63: _Row(
        FC.ROW_REMAP_PENDING,
        "row remapping pending",
        "project: NVIDIA says IGNORE, but the remap is applied only by a GPU reset"
        " (aws/eks-node-monitoring-agent WellKnownXidCodes: repair-worthy)",
    ),
    # NVIDIA: RESET_GPU now, CONTACT_SUPPORT if it persists. The reset rung's
    # verification diagnostic is the field check; a GPU that still fails climbs
    # to replacement (DCGM 80 / nvidia-smi "Remapping Failure Occurred" replace at once).
    64: _Row(_RESET, "row remapping failure", _nvidia("RESET_GPU")),
    68: _Row(FC.APPLICATION, "video decoder exception", _nvidia("RESTART_APP")),
    69: _Row(FC.APPLICATION, "graphics engine class error", _nvidia("RESTART_APP")),
    # NVIDIA's WORKFLOW_NVLINK_ERR is a register decode (bits to ignore, to follow
    # the other Xid, to re-seat, "a reset of the fabric is required") that the
    # agent does not do. Of the two steps the Trigger Conditions allow, the
    # nvlink_error policy takes the reboot: the link or the remote end may be at
    # fault, and a reboot retrains every link and resets the fabric state.
    74: _Row(
        FC.NVLINK_ERROR,
        "NVLink error",
        _cite(SOURCE_TRIGGER, "A GPU reset or node reboot is needed to clear this error"),
    ),
    # A reset does not help a GPU that fell off the bus: reboot the host.
    79: _Row(FC.GPU_FALLEN_OFF_BUS, "GPU has fallen off the bus", _nvidia("RESTART_BM")),
    92: _Row(FC.INFORMATIONAL, "high single-bit ECC rate", _nvidia("IGNORE")),
    94: _Row(FC.APPLICATION, "contained memory error", _nvidia("RESTART_APP")),
    # RESET_GPU, like 48, but the error escaped containment: the job's results
    # cannot be trusted, so it is not asked to checkpoint (urgency).
    95: _Row(FC.UNCONTAINED_ERROR, "uncontained memory error", _nvidia("RESET_GPU")),
    109: _Row(_RESET, "context-switch timeout", _nvidia("RESET_GPU")),
    110: _Row(_RESET, "security fault", _nvidia("RESET_GPU")),
    # GSP: Trigger Conditions of 119/120 say "A GPU reset or node power cycle may
    # be needed if the error persists": reset first; a failed reset or a repeat
    # climbs to reboot.
    119: _Row(_RESET, "GSP RPC timeout", _nvidia("RESET_GPU")),
    120: _Row(_RESET, "GSP error", _nvidia("RESET_GPU")),
    121: _Row(FC.INFORMATIONAL, "C2C error (corrected)", _nvidia("IGNORE")),
    136: _Row(_RESET, "link training failed", _nvidia("RESET_GPU")),
    140: _Row(_RESET, "ECC unrecovered error", _nvidia("RESET_GPU")),
    143: _Row(_RESET, "GPU init error", _nvidia("RESET_GPU")),
    # WORKFLOW_NVLINK5_ERR: the decode sheet gives RESET_GPU for the Fatal and Link
    # Fatal rows ("Link fatal put the GPU in a drain and reset recommended state")
    # and IGNORE (or Xid 154's action) for Non-fatal ones (all of 147's and 148's),
    # which the classifier reads from the line (nvlink5_nonfatal). Was nvlink_error
    # (reboot first) until issue 33.
    **{
        xid: _Row(
            _RESET,
            "NVLink5 error",
            _cite(SOURCE_NVLINK5_DECODE, "Fatal / Link Fatal: RESET_GPU, Non-fatal: IGNORE"),
        )
        for xid in range(144, 151)
    },
    151: _Row(FC.REBOOT_REQUIRED, "key rotation error", _nvidia("RESTART_VM")),
    # The recovery action it reports decides (RECOVERY_ACTIONS); without one the
    # node is quarantined and diagnosed.
    154: _Row(
        FC.UNKNOWN,
        "GPU recovery action changed",
        _cite(SOURCE_BUCKETS, "XID_154, Follow XID 154 reported guidance"),
    ),
    155: _Row(_RESET, "NVLink link down (software)", _nvidia("RESET_GPU")),
    156: _Row(_RESET, "resource retirement event", _nvidia("RESET_GPU")),
    # Support only if it repeats; a real retirement failure also shows as DCGM
    # error 80/84, which the DCGM rows decide.
    157: _Row(FC.INFORMATIONAL, "resource retirement failure", _nvidia("IGNORE")),
    158: _Row(_RESET, "GPU fatal timeout", _nvidia("RESET_GPU")),
    # Codes the catalog lists without an action yet (driver R575+). Power
    # smoothing changes do not stop the GPU working; replacing a worn-out circuit
    # is an operator's choice ("if power swings are not acceptable").
    162: _Row(
        FC.INFORMATIONAL,
        "power smoothing circuitry reengaged",
        _cite(SOURCE_DESCRIPTION, "Power Smoothing HW Circuitry capability reengaged"),
    ),
    163: _Row(
        FC.INFORMATIONAL,
        "power smoothing circuitry disengaged",
        _cite(SOURCE_TRIGGER, "No GPU reset required"),
    ),
    164: _Row(
        FC.INFORMATIONAL,
        "power smoothing circuitry low lifetime",
        _cite(SOURCE_TRIGGER, "Monitor power swings"),
    ),
    165: _Row(
        FC.INFORMATIONAL,
        "power smoothing circuitry lifetime exhausted",
        _cite(SOURCE_TRIGGER, "Replace GPUs if power swings are not acceptable"),
    ),
    # The GPU stopped answering on PCIe: like a fall off the bus (79, RESTART_BM).
    167: _Row(
        FC.REBOOT_REQUIRED,
        "PCIe fatal timeout",
        "project: no action in the catalog; handled like Xid 79 (RESTART_BM)",
    ),
    # The same internal micro-controller halt as 62 (RESET_GPU), on SEC2.
    169: _Row(
        _RESET,
        "internal micro-controller halt (SEC2)",
        "project: no action in the catalog; handled like Xid 62 (RESET_GPU)",
    ),
    # Details of an Xid 48 (DRAM or SRAM): handled as 48.
    171: _Row(
        _RESET,
        "uncorrectable DRAM error",
        _cite(SOURCE_DESCRIPTION, "Additional to Xid 48 (WORKFLOW_XID_48, Solo: RESET_GPU)"),
    ),
    172: _Row(
        _RESET,
        "uncorrectable SRAM error",
        _cite(SOURCE_DESCRIPTION, "Additional to Xid 48 (WORKFLOW_XID_48, Solo: RESET_GPU)"),
    ),
}


def _meaning(description: str) -> str:
    # "Invalid or ..." -> "invalid or ...", but "CE3: ..." and "NVDEC0 Error" keep their case.
    if description[1:2].isupper():
        return description
    return description[:1].lower() + description[1:]


def _xid_row(xid: int, entry: NvidiaXid) -> XidInfo:
    action = nvidia_action(entry.immediate)
    row = _XID_ROWS.get(xid) or _Row(
        ACTION_CLASSES[action], _meaning(entry.description), _nvidia(entry.immediate or "none")
    )
    return XidInfo(xid, row.fault_class, action, row.meaning, row.source)


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

_RECOVERY_FROM = re.compile(r"recovery action changed from 0x[0-9a-f]+", re.I)
_RECOVERY_TO = re.compile(r" to 0x([0-9a-f]+)", re.I)


def recovery_action_from_message(message: str) -> int | None:
    """Return the new action of an Xid 154 line ("... changed from 0x0 (None) to 0x2 ...").

    The first "changed from" with a " to 0x..." after it on its line wins, as
    with one regex joining the two by ``.*?``; but that regex re-read the rest
    of the line from every "changed from" that had none, quadratic in a line
    repeating it (the agent reads kernel lines of up to 1 MiB, issue 35). Here
    a line whose first "changed from" finds no " to 0x" is skipped whole: any
    later one on it has less of the same line after it. Linear.
    """
    position = 0
    while (head := _RECOVERY_FROM.search(message, position)) is not None:
        line_end = message.find("\n", head.end())
        line_end = len(message) if line_end < 0 else line_end
        if (to := _RECOVERY_TO.search(message, head.end(), line_end)) is not None:
            return int(to.group(1), 16)
        position = line_end
    return None


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
    # The diagnostic's performance tests (level 3: targeted stress and power, memory
    # bandwidth; PCIe bandwidth) found a GPU that works, slowly (DCGM TRIAGE): slow,
    # not dead, the gpu_degraded ladder (reset when idle, then reboot, replace, each
    # verified by the same level-3 tests). NVIDIA, "Targeted Stress Plugin" (DCGM docs).
    30: (FC.GPU_DEGRADED, "PCIe bandwidth below the minimum"),
    50: (FC.GPU_DEGRADED, "stress level below the target"),
    62: (FC.GPU_DEGRADED, "memory bandwidth below the minimum"),
    63: (FC.GPU_DEGRADED, "power below the target"),
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
    # A link may be down because of the switch or cable, not this node: a reboot
    # retrains it before a replacement is spent; the EFA checks verify it.
    "link": (FC.EFA_LINK_DOWN, "EFA link down"),
    # Counter bursts are warnings.
    "counters": (FC.INFORMATIONAL, "EFA error counters rising"),
    # The verification's loopback under load (issue 37): the port still loses
    # messages, retransmits or drops, or runs far below its sibling devices.
    "loopback": (FC.EFA_DEGRADED, "EFA loopback under load failed"),
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
NPD_GPU_DEGRADED_CONDITION = "GpuDegraded"
"""The agent's ``gpu-degraded`` check: a GPU that works but slows its job (issue 37)."""
NPD_EFA_DEGRADED_CONDITION = "EfaDegraded"
"""The agent's ``efa-degraded`` check: an EFA port slower than expected or erring (issue 37)."""
NPD_CONDITIONS = frozenset(
    {
        NPD_GPU_CONDITION,
        NPD_EFA_CONDITION,
        NPD_GPU_DEGRADED_CONDITION,
        NPD_EFA_DEGRADED_CONDITION,
    }
)

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


# More digits than this are no Xid, DCGM id or GPU index. Python refuses to
# convert numbers of over 4300 digits (a ValueError, not a parse failure) because
# the conversion is quadratic in their length, so long ones are not converted.
_MAX_DIGITS = 18


def _number(digits: str) -> int | None:
    significant = digits.lstrip("0") or "0"
    return int(significant) if len(significant) <= _MAX_DIGITS else None


def _parse(pattern: re.Pattern[str], message: str) -> tuple[int, int | None] | None:
    match = pattern.search(message)
    if match is None:
        return None
    number = _number(match.group(1))
    if number is None:
        return None
    gpu = _number(match.group(2)) if match.group(2) is not None else None
    # GPU indices are bounded (models.GpuIndex); a larger number is not an index.
    return number, gpu if gpu is not None and gpu <= 63 else None


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
