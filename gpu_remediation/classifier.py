"""Triage: turn a set of evidence into one fault class and a starting rung.

``classify`` runs inside Temporal workflow code, so it is pure and
deterministic: no I/O, no clock, no randomness, no logging, and its output
depends only on its arguments (in their given order for the reasons).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from gpu_remediation import catalog, nvsentinel
from gpu_remediation.models import (
    AlertEvidence,
    Classification,
    ConditionEvidence,
    DcgmEvidence,
    EfaEvidence,
    Evidence,
    FaultClass,
    ManualEvidence,
    NvSentinelEvidence,
    Rung,
    StragglerEvidence,
    XidEvidence,
)
from gpu_remediation.policy import Policy

FC = FaultClass

NOTIFY_ONLY_CLASSES = frozenset({FC.APPLICATION, FC.INFORMATIONAL})
"""Classes that do not touch the node by default (the workload owner is told)."""

SECONDARY_CLASSES = NOTIFY_ONLY_CLASSES | {FC.CONFIGURATION, FC.STRAGGLER}
"""Classes that win only when no other class is present: a configuration finding
next to a hardware fault must not turn the repair into an escalation, and a
job's straggler report (a tenant's word) never names an incident beside any
other evidence."""

TIE_BREAK_ORDER: tuple[FaultClass, ...] = (
    FC.INFORMATIONAL,
    FC.APPLICATION,
    FC.CONFIGURATION,
    FC.STRAGGLER,
    FC.UNKNOWN,
    FC.GPU_DEGRADED,  # any fault found beside a slowdown names the incident
    FC.EFA_DEGRADED,
    FC.NODE_NOT_READY,
    FC.GPU_RESET_REQUIRED,
    FC.UNCONTAINED_ERROR,
    FC.ROW_REMAP_PENDING,
    FC.REBOOT_REQUIRED,
    FC.NVLINK_ERROR,
    FC.EFA_LINK_DOWN,
    FC.GPU_FALLEN_OFF_BUS,
    FC.EFA_FAILURE,
    FC.ROW_REMAP_FAILURE,
    FC.HARDWARE_FAILURE,
)
"""Among classes starting at the same rung, the later (more specific) one names the incident."""
_SPECIFICITY = {fault_class: i for i, fault_class in enumerate(TIE_BREAK_ORDER)}
_CLASS_VALUES = frozenset(fc.value for fc in FaultClass)

MANUAL_RUNBOOKS: dict[str, tuple[FaultClass, Rung]] = {
    "diagnose": (FC.UNKNOWN, Rung.DIAGNOSE),
    "reset": (FC.GPU_RESET_REQUIRED, Rung.GPU_RESET),
    "reboot": (FC.REBOOT_REQUIRED, Rung.REBOOT),
    "replace": (FC.HARDWARE_FAILURE, Rung.REPLACE),
}
"""An operator's runbook: its class and the rung it starts at, whatever the policy says."""


@dataclass(frozen=True, slots=True)
class _Finding:
    """What one piece of evidence says."""

    subject: str  # "Xid 79 on GPU 3: GPU has fallen off the bus"
    fault_class: FaultClass | None  # None: not a problem, or a manual "auto" request
    gpu_index: int | None = None
    start_override: Rung | None = None  # operator runbooks start where they asked
    cleared: bool = False
    auto: bool = False
    repeat_key: tuple[str, datetime] | None = None  # (GPU, event time) of Xid 13/31
    note: str = ""

    @property
    def active(self) -> bool:
        return not self.cleared and self.fault_class is not None

    @property
    def reason(self) -> str:
        if self.cleared:
            return f"cleared, ignored: {self.subject}"
        if self.fault_class is None:
            return f"{self.subject}: no fault class of its own, ignored"
        return f"{self.subject} -> {self.fault_class}{self.note}"


def _where(gpu_index: int | None, pci_bus: str | None = None) -> str:
    if gpu_index is not None:
        return f" on GPU {gpu_index}"
    return f" on PCI {pci_bus}" if pci_bus else ""


def _xid_class(xid: int) -> tuple[FaultClass, str]:
    info = catalog.xid_info(xid)
    if info is None:
        # NVIDIA's tooling says CONTACT_SUPPORT; we quarantine and diagnose, and
        # the policy keeps unknown faults below replacement.
        return FC.UNKNOWN, "not in NVIDIA's Xid catalog"
    return info.fault_class, info.meaning


def _from_xid(e: XidEvidence) -> _Finding:
    fault_class, meaning = _xid_class(e.xid)
    if catalog.nvlink5_nonfatal(e.xid, e.message):
        # NVIDIA's NVLink5 decode: a non-fatal unit error is IGNORE.
        fault_class, meaning = FC.INFORMATIONAL, f"{meaning} (non-fatal)"
    action = e.recovery_action
    if action is None and e.xid == 154:
        action = catalog.recovery_action_from_message(e.message)
    subject = f"Xid {e.xid}{_where(e.gpu_index, e.pci_bus)}: {meaning}"
    if action:  # 0 (None) defers to the table
        known = catalog.RECOVERY_ACTIONS.get(action)
        if known is not None and known[0] is not None:
            fault_class = known[0]
            subject += f"; driver recovery action {action} ({known[1]})"
        else:
            # A future driver's action still asks for something: at least diagnose.
            if fault_class in NOTIFY_ONLY_CLASSES:
                fault_class = FC.UNKNOWN
            subject += f"; unrecognised driver recovery action {action}"
    repeat_key = None
    gpu = str(e.gpu_index) if e.gpu_index is not None else e.pci_bus
    if e.xid in catalog.SUSPECT_HARDWARE_XIDS and fault_class == FC.APPLICATION and gpu:
        repeat_key = (gpu, e.observed_at)
    return _Finding(subject, fault_class, e.gpu_index, repeat_key=repeat_key)


def _from_dcgm(e: DcgmEvidence) -> _Finding:
    fault_class, meaning = catalog.dcgm_class(e.error_id, e.severity)
    code = f" error {e.error_id}" if e.error_id is not None else " failure"
    test = f" ({e.test})" if e.test else ""
    xid = catalog.dcgm_message_xid(e.message) if e.error_id == catalog.DCGM_XID_ERROR else None
    if xid is not None:
        # "Detected XID N for GPU M": the Xid table knows what N means.
        fault_class, xid_meaning = _xid_class(xid)
        meaning = f"Xid {xid}, {xid_meaning}"
    subject = f"DCGM {e.check}{code}{test}{_where(e.gpu_index)}: {meaning}"
    return _Finding(subject, fault_class, e.gpu_index)


def _from_efa(e: EfaEvidence) -> _Finding:
    fault_class, meaning = catalog.EFA_CHECKS[e.check]
    device = f" ({e.device})" if e.device else ""
    return _Finding(f"EFA {e.check} check{device}: {meaning}", fault_class)


def _from_straggler(e: StragglerEvidence) -> _Finding:
    subject = (
        f"job {e.job} reports the node {e.slower_by:.0%} slower than its gang's median "
        f"for {e.steps} steps"
    )
    return _Finding(subject, FC.STRAGGLER)


def _from_nvsentinel(e: NvSentinelEvidence) -> _Finding:
    subject = f"NVSentinel {e.check_name or 'health event'}{_where(e.gpu_index)}"
    xid = nvsentinel.xid_of(e)
    if xid is not None:
        fault_class, meaning = _xid_class(xid)
        return _Finding(f"{subject}: Xid {xid}, {meaning}", fault_class, e.gpu_index)
    fault_class, meaning = nvsentinel.RECOMMENDED_ACTIONS.get(
        e.recommended_action, (FC.UNKNOWN, f"NVSentinel's action {e.recommended_action!r}")
    )
    return _Finding(f"{subject}: {meaning}", fault_class, e.gpu_index)


def _xid_item(message: str) -> str:
    """The finding of a condition message (``; ``-separated) that names its first Xid."""
    for item in message.split(";"):
        if catalog.parse_message_xid(item) is not None:
            return item
    return ""


def _from_condition(e: ConditionEvidence) -> _Finding:
    subject = f"condition {e.type}={e.status}" + (f" ({e.reason})" if e.reason else "")
    if not catalog.condition_is_problem(e.type, e.status):
        return _Finding(f"{subject}: not a problem", None)
    if e.type == catalog.READY_CONDITION:
        return _Finding(f"{subject}: node not ready", FC.NODE_NOT_READY)
    if e.type == catalog.EKS_ACCELERATED_HARDWARE_CONDITION:
        xid = catalog.eks_reason_xid(e.reason)
        if xid is not None:
            fault_class, meaning = _xid_class(xid)
            return _Finding(f"{subject}: Xid {xid}, {meaning}", fault_class)
    elif e.type == catalog.NPD_GPU_CONDITION:
        parsed = catalog.parse_message_xid(e.message)
        if parsed is not None:
            fault_class, meaning = _xid_class(parsed[0])
            if catalog.nvlink5_nonfatal(parsed[0], _xid_item(e.message)):
                # As for Xid evidence: the agent's finding names the unit's severity.
                fault_class, meaning = FC.INFORMATIONAL, f"{meaning} (non-fatal)"
            where = _where(parsed[1])
            return _Finding(f"{subject}: Xid {parsed[0]}{where}, {meaning}", fault_class, parsed[1])
        parsed = catalog.parse_message_dcgm(e.message)
        if parsed is not None:
            fault_class, meaning = catalog.dcgm_class(parsed[0], None)
            where = _where(parsed[1])
            text = f"{subject}: DCGM error {parsed[0]}{where}, {meaning}"
            return _Finding(text, fault_class, parsed[1])
    elif e.type == catalog.NPD_GPU_DEGRADED_CONDITION:
        # Slow, not dead: the message says what was measured (link width, clock events).
        what = e.message.strip()[:200] or "no detail"
        return _Finding(f"{subject}: GPU degraded ({what})", FC.GPU_DEGRADED)
    elif e.type == catalog.NPD_EFA_DEGRADED_CONDITION:
        what = e.message.strip()[:200] or "no detail"
        return _Finding(f"{subject}: EFA degraded ({what})", FC.EFA_DEGRADED)
    elif e.type == catalog.NPD_EFA_CONDITION:
        # The agent's NPD rule has one fixed reason; the message names the check.
        check = catalog.NPD_EFA_REASONS.get(e.reason) or catalog.parse_message_efa(e.message)
        if check is not None:
            fault_class, meaning = catalog.EFA_CHECKS[check]
            return _Finding(f"{subject}: {meaning}", fault_class)
    # Anything else reports a problem we cannot name: quarantine and diagnose.
    return _Finding(f"{subject}: unrecognised problem", FC.UNKNOWN)


def _label_int(value: str | None, upper: int) -> int | None:
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    if not number.is_integer() or not 0 <= number <= upper:
        return None
    return int(number)


def _from_alert(e: AlertEvidence) -> _Finding:
    labels = e.labels
    gpu = _label_int(labels.get(catalog.ALERT_GPU_LABEL), 63)
    metric = next(
        (
            labels[name]
            for name in catalog.ALERT_METRIC_LABELS
            if labels.get(name) in (catalog.XID_METRIC, *catalog.ALERT_METRIC_CLASSES)
        ),
        None,
    )
    subject = f"alert {labels.get('alertname', metric or '-')}{_where(gpu)}"
    stated = labels.get(catalog.ALERT_FAULT_CLASS_LABEL)
    if stated in _CLASS_VALUES:
        return _Finding(f"{subject}: fault class set by the alert rule", FC(stated), gpu)
    xid = _label_int(labels.get("xid"), 1023)
    if xid is None and metric == catalog.XID_METRIC:
        xid = _label_int(labels.get("value"), 1023)
    if xid is not None:
        fault_class, meaning = _xid_class(xid)
        return _Finding(f"{subject}: Xid {xid}, {meaning}", fault_class, gpu)
    if metric in catalog.ALERT_METRIC_CLASSES:
        fault_class, meaning = catalog.ALERT_METRIC_CLASSES[metric]
        return _Finding(f"{subject}: {meaning}", fault_class, gpu)
    detail = "Xid alert without an xid label" if metric else "unrecognised alert"
    return _Finding(f"{subject}: {detail}", FC.UNKNOWN, gpu)


def _from_manual(e: ManualEvidence) -> _Finding:
    by = f" by {e.requested_by}" if e.requested_by else ""
    subject = f"manual runbook {e.runbook}{by}"
    if e.runbook == "auto":
        return _Finding(subject, None, auto=True)
    fault_class, rung = MANUAL_RUNBOOKS[e.runbook]
    return _Finding(subject, fault_class, start_override=rung, note=f" (start at {rung})")


def _finding(e: Evidence) -> _Finding:
    if isinstance(e, XidEvidence):
        found = _from_xid(e)
    elif isinstance(e, DcgmEvidence):
        found = _from_dcgm(e)
    elif isinstance(e, EfaEvidence):
        found = _from_efa(e)
    elif isinstance(e, ConditionEvidence):
        found = _from_condition(e)
    elif isinstance(e, AlertEvidence):
        found = _from_alert(e)
    elif isinstance(e, StragglerEvidence):
        found = _from_straggler(e)
    elif isinstance(e, NvSentinelEvidence):
        found = _from_nvsentinel(e)
    else:
        found = _from_manual(e)
    return dataclasses.replace(found, cleared=e.cleared) if e.cleared else found


def _suspect_repeats(findings: list[_Finding]) -> list[_Finding]:
    """Turn application Xids 13/31 into unknown when one GPU has too many of them."""
    events: dict[str, set[datetime]] = defaultdict(set)
    for f in findings:
        if f.active and f.repeat_key is not None:
            # Distinct event times: two sources reporting one event count once.
            events[f.repeat_key[0]].add(f.repeat_key[1])
    suspect = {
        gpu: len(times)
        for gpu, times in events.items()
        if len(times) >= catalog.REPEATED_APPLICATION_XID_THRESHOLD
    }
    result = []
    for f in findings:
        if f.active and f.repeat_key is not None and f.repeat_key[0] in suspect:
            gpu = f.repeat_key[0]
            note = f" ({suspect[gpu]} Xid 13/31 on GPU {gpu}: suspect hardware)"
            f = dataclasses.replace(f, fault_class=FC.UNKNOWN, note=note)
        result.append(f)
    return result


def classify(evidence: Sequence[Evidence], policy: Policy) -> Classification:
    """Classify an incident's evidence into a fault class and where its ladder starts.

    Each piece of evidence gets a class from the catalog (a driver recovery
    action overrides the Xid table). The incident takes the class whose policy
    start rung is highest (no start rung counts lowest; application and
    informational win only when nothing else is present; ties go to the more
    specific class, see ``TIE_BREAK_ORDER``). Cleared evidence is ignored; a
    manual ``auto`` request counts as unknown only when nothing else is active;
    with no active evidence at all the incident is informational and the node
    is not touched.

    ``gpu_indices`` is the sorted union of the GPUs named by the evidence that
    drove the decision (all active evidence starting at the winning rung); it
    is empty, meaning all GPUs, when any of that evidence names no GPU.

    Args:
        evidence: The incident's evidence, in arrival order.
        policy: The policy supplying each class's start and max rung.

    Returns:
        The verdict, with one reason line per piece of evidence.

    Raises:
        ValueError: If ``evidence`` is empty.
    """
    if not evidence:
        raise ValueError("classify needs at least one piece of evidence")
    findings = _suspect_repeats([_finding(e) for e in evidence])
    if not any(f.active for f in findings):
        findings = [
            dataclasses.replace(f, fault_class=FC.UNKNOWN, note=" (nothing else to go on)")
            if f.auto and not f.cleared
            else f
            for f in findings
        ]
    reasons = [f.reason for f in findings]
    active = [f for f in findings if f.active]
    if not active:
        return Classification(
            fault_class=FC.INFORMATIONAL,
            start_rung=None,
            max_rung=policy.fault_class(FC.INFORMATIONAL).max_rung,
            reasons=reasons,
        )

    def start(f: _Finding) -> Rung | None:
        assert f.fault_class is not None
        return f.start_override or policy.fault_class(f.fault_class).start_rung

    def rank(f: _Finding) -> tuple[int, int]:
        rung = start(f)
        return (0 if f.fault_class in SECONDARY_CLASSES else 1, rung.order if rung else -1)

    def key(f: _Finding) -> tuple[int, int, int]:
        assert f.fault_class is not None
        return (*rank(f), _SPECIFICITY[f.fault_class])

    winner = max(active, key=key)
    assert winner.fault_class is not None
    driving = [f for f in active if rank(f) == rank(winner)]
    start_rung = start(winner)
    max_rung = policy.fault_class(winner.fault_class).max_rung
    if start_rung is not None and start_rung.order > max_rung.order:
        max_rung = start_rung  # an operator's runbook may ask above the class's ceiling
    gpus = [f.gpu_index for f in driving]
    return Classification(
        fault_class=winner.fault_class,
        start_rung=start_rung,
        max_rung=max_rung,
        gpu_indices=[] if None in gpus else sorted({g for g in gpus if g is not None}),
        reasons=reasons,
    )
