"""The Node Problem Detector condition message: written by the agent, read by the watcher.

Node Problem Detector turns the node agent's stdout into the message of the
``GpuHealthProblem`` / ``EfaHealthProblem`` condition. NPD gives every rule a
fixed reason, so the message is what carries the detail the ladder needs (Xid
code, GPU index, PCI bus, driver recovery action, DCGM error id, EFA check).
This module is the one definition of that message: :func:`format_message`
writes it from evidence, :func:`parse_condition_message` reads it back into
evidence, and the tests hold the two to a round trip.

Grammar (findings joined by ``"; "``, most severe first, ASCII only)::

    message  := finding ("; " finding)* ["; +N more"]
    finding  := "Xid " N [" on GPU " I] [" (" BUS ")"] ": " TEXT
              | "DCGM error " N [" on GPU " I] [" [" TAG "]"] ": " TEXT
              | "DCGM failure" [" on GPU " I] [" [" TAG "]"] ": " TEXT
              | "EFA " CHECK [" (" DEVICE ")"] ": " TEXT
              | NOTE                          (free text, not evidence)

``TEXT`` of an Xid ends with ``recovery action N (...)`` when the driver
reported one. ``TAG`` is the DCGM health system or the tool that found it
(``diag <test>`` for diagnostics). ``CHECK`` is ``device count``, ``provider``,
``link`` or ``counters``. A finding is only read when its head is complete (up
to ``": "``), so a message cut short by NPD never yields a wrong code.

The Xid head is ``catalog.npd_xid_message``'s, so the classifier's own reading
of a condition message (``catalog.parse_message_xid`` / ``parse_message_dcgm``)
finds the most severe finding first.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import datetime
from functools import lru_cache

from pydantic import Field, ValidationError

from gpu_remediation import catalog
from gpu_remediation.classifier import SECONDARY_CLASSES, TIE_BREAK_ORDER, classify
from gpu_remediation.models import (
    DcgmEvidence,
    EfaEvidence,
    Evidence,
    FaultClass,
    Model,
    XidEvidence,
)
from gpu_remediation.policy import Policy

__all__ = [
    "NPD_EFA_REASON",
    "NPD_GPU_REASON",
    "Finding",
    "Note",
    "format_finding",
    "format_message",
    "parse_condition_message",
    "severity_rank",
    "split_findings",
]

NPD_GPU_REASON = "GpuHealthCheckFailed"
"""Reason of the GPU rule: NPD fixes one reason per rule, the message says what failed."""
NPD_EFA_REASON = "EfaHealthCheckFailed"
"""Reason of the EFA rule (device count, provider, links)."""

SEPARATOR = "; "
MIN_MESSAGE_BYTES = 40
_MORE = re.compile(r"^\+(\d+) more$")


class Note(Model):
    """A problem or status the agent reports that is not a piece of evidence.

    GPU count mismatches, a wedged driver, fatal NVSwitch errors and tool
    failures are written as notes: the watcher gets no typed evidence from
    them, and the classifier reads the condition itself (quarantine and
    diagnose).
    """

    text: str = Field(min_length=1, max_length=1024)
    fault_class: FaultClass = FaultClass.UNKNOWN


Finding = Evidence | Note
"""What one item of the message says."""

_NVIDIA_ACTION_TEXT: dict[catalog.NvidiaAction, str] = {
    catalog.NvidiaAction.RESTART_APP: "application fault, restart the job",
    catalog.NvidiaAction.IGNORE: "no action needed",
    catalog.NvidiaAction.RESET_GPU: "GPU reset required",
    catalog.NvidiaAction.RESTART_BM: "reboot required",
    catalog.NvidiaAction.RESTART_VM: "reboot required",
    catalog.NvidiaAction.CONTACT_SUPPORT: "hardware support needed",
    catalog.NvidiaAction.CHECK_MECHANICALS: "check power cabling",
    catalog.NvidiaAction.WORKFLOW: "needs diagnosis",
    catalog.NvidiaAction.UPDATE_SWFW: "driver or firmware update needed",
    catalog.NvidiaAction.CHECK_UVM: "needs diagnosis",
    catalog.NvidiaAction.NONE: "needs diagnosis",
}

_EFA_WORDS: dict[str, str] = {
    "device_count": "device count",
    "provider": "provider",
    "link": "link",
    "counters": "counters",
}
_EFA_CHECKS = {words: check for check, words in _EFA_WORDS.items()}

_UNSAFE = re.compile(r"[^\x20-\x7e]+")
_SPACES = re.compile(r"\s+")


def _clean(text: str, forbidden: str = ";") -> str:
    """Printable ASCII on one line, without the characters that delimit the grammar."""
    text = _UNSAFE.sub("?", text)
    for char in forbidden:
        text = text.replace(char, ",")
    return _SPACES.sub(" ", text).strip()


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def _on_gpu(gpu_index: int | None) -> str:
    return f" on GPU {gpu_index}" if gpu_index is not None else ""


def _xid_text(e: XidEvidence) -> str:
    info = catalog.xid_info(e.xid)
    text = info.meaning if info else "Xid not in NVIDIA's catalog"
    if e.message:
        text += f" ({_clean(e.message, ';()')})"
    if e.recovery_action:
        known = catalog.RECOVERY_ACTIONS.get(e.recovery_action)
        return f"{text}, recovery action {e.recovery_action} ({known[1] if known else 'unknown'})"
    if catalog.nvlink5_nonfatal(e.xid, e.message):
        # NVIDIA's NVLink5 decode: a unit error the driver marks Nonfatal is IGNORE.
        action = _NVIDIA_ACTION_TEXT[catalog.NvidiaAction.IGNORE]
    else:
        action = _NVIDIA_ACTION_TEXT[info.action] if info else "quarantine and diagnose"
    return f"{text}, {action}"


def format_finding(item: Finding) -> str:
    """Write one finding in the message grammar (module docstring).

    Args:
        item: Xid, DCGM or EFA evidence, or a note. Other evidence kinds are
            not something the agent reports.

    Raises:
        ValueError: For evidence kinds the agent never writes (alerts, conditions, manual).
    """
    if isinstance(item, Note):
        text = _clean(item.text)
        # A note must never read as evidence: it would invent a code.
        return f"note: {text}" if any(p.match(text) for p in (_XID, _DCGM, _EFA)) else text
    if isinstance(item, XidEvidence):
        bus = _clean(item.pci_bus, ";()") if item.pci_bus else None
        return catalog.npd_xid_message(item.xid, item.gpu_index, bus, _xid_text(item))
    if isinstance(item, DcgmEvidence):
        head = f"DCGM error {item.error_id}" if item.error_id is not None else "DCGM failure"
        tag = " ".join(part for part in ("diag" if item.check == "diag" else "", item.test) if part)
        tag_text = f" [{_clean(tag, ';[]')}]" if tag else ""
        known = catalog.DCGM_ERRORS.get(item.error_id) if item.error_id is not None else None
        text = known[1] if known else _short(_clean(item.message) or "failure", 160)
        return f"{head}{_on_gpu(item.gpu_index)}{tag_text}: {text}"
    if isinstance(item, EfaEvidence):
        device = f" ({_clean(item.device, ';()')})" if item.device else ""
        text = _clean(item.message) or catalog.EFA_CHECKS[item.check][1]
        return f"EFA {_EFA_WORDS[item.check]}{device}: {_short(text, 200)}"
    raise ValueError(f"the agent does not report {item.kind} evidence")


@lru_cache(maxsize=1)
def _default_policy() -> Policy:
    from gpu_remediation.policy_loader import load_policy

    return load_policy()


def severity_rank(item: Finding, policy: Policy | None = None) -> tuple[int, int, int]:
    """How severe a finding is, higher first: the classifier's own choice of winner.

    Ranked like ``classifier.classify`` picks the class of an incident: classes
    that only notify rank lowest, then by the policy's start rung, then by the
    classifier's tie-break order. Notes rank by their fault class.
    """
    policy = policy or _default_policy()
    if isinstance(item, Note):
        fault_class = item.fault_class
        start = policy.fault_class(fault_class).start_rung
    else:
        verdict = classify([item], policy)
        fault_class, start = verdict.fault_class, verdict.start_rung
    return (
        0 if fault_class in SECONDARY_CLASSES else 1,
        start.order if start is not None else -1,
        TIE_BREAK_ORDER.index(fault_class),
    )


def format_message(
    findings: Sequence[Finding],
    *,
    max_bytes: int,
    trailer: Sequence[Note] = (),
    policy: Policy | None = None,
) -> str:
    """Write the condition message: most severe finding first, within ``max_bytes``.

    Args:
        findings: What the check found; sorted here by :func:`severity_rank`.
        max_bytes: NPD's ``max_output_length``: NPD cuts longer output, so
            whole findings are dropped from the end instead and counted in a
            ``+N more`` item. The first finding is shortened if it alone is too long.
        trailer: Notes written after the findings whatever their rank (e.g. a
            tool that hung while the kernel log still named the fault).
        policy: Policy used to rank; the packaged defaults when None.

    Raises:
        ValueError: ``max_bytes`` below 40 or nothing to write.
    """
    if max_bytes < MIN_MESSAGE_BYTES:
        raise ValueError(f"max_bytes must be at least {MIN_MESSAGE_BYTES}, got {max_bytes}")
    ranked = sorted(findings, key=lambda f: severity_rank(f, policy), reverse=True)
    parts = [format_finding(f) for f in [*ranked, *trailer]]
    if not parts:
        raise ValueError("format_message needs at least one finding or note")
    # Each candidate's length from a running sum: joining every candidate to
    # measure it was quadratic in the number of findings (issue 35).
    before = [0]
    for part in parts:
        before.append(before[-1] + len(part))
    for keep in range(len(parts), 0, -1):
        dropped = len(parts) - keep
        marker = [f"+{dropped} more"] if dropped else []
        items = keep + len(marker)
        length = before[keep] + sum(len(m) for m in marker) + len(SEPARATOR) * (items - 1)
        if length <= max_bytes:
            return SEPARATOR.join(parts[:keep] + marker)
    # Even the first finding alone is too long: shorten its text, keep its head.
    more = f"{SEPARATOR}+{len(parts) - 1} more" if len(parts) > 1 else ""
    return _short(parts[0], max_bytes - len(more)) + more


def split_findings(message: str) -> list[str]:
    """The findings of a message, without the ``+N more`` marker."""
    items = [item.strip() for item in message.split(SEPARATOR)]
    return [item for item in items if item and not _MORE.match(item)]


_GPU = r"(?: on GPU (?P<gpu>\d{1,3}))?"
_XID = re.compile(r"^Xid (?P<xid>\d{1,4})" + _GPU + r"(?: \((?P<bus>[^()]*)\))?: (?P<text>.*)$")
_DCGM = re.compile(
    r"^DCGM (?:error (?P<id>\d{1,6})|failure)"
    + _GPU
    + r"(?: \[(?P<tag>[^\[\]]*)\])?: (?P<text>.*)$"
)
_EFA = re.compile(
    r"^EFA (?P<check>device count|provider|link|counters)"
    r"(?: \((?P<device>[^()]*)\))?: (?P<text>.*)$"
)
_RECOVERY = re.compile(r"recovery action (\d{1,2})\b")


def _parse_item(item: str, observed_at: datetime, source: str) -> Evidence | None:
    common = {"observed_at": observed_at, "source": source, "message": item[:4096]}
    if match := _XID.match(item):
        action = _RECOVERY.search(match["text"])
        return XidEvidence(
            **common,
            xid=int(match["xid"]),
            gpu_index=int(match["gpu"]) if match["gpu"] else None,
            pci_bus=match["bus"] or None,
            recovery_action=int(action.group(1)) if action else None,
        )
    if match := _DCGM.match(item):
        tag = match["tag"] or ""
        diag = tag == "diag" or tag.startswith("diag ")
        test = (tag[5:] if diag else tag).strip()
        return DcgmEvidence(
            **common,
            check="diag" if diag else "health",
            error_id=int(match["id"]) if match["id"] else None,
            gpu_index=int(match["gpu"]) if match["gpu"] else None,
            test=test or None,
        )
    if match := _EFA.match(item):
        return EfaEvidence(
            **common,
            check=_EFA_CHECKS[match["check"]],
            device=match["device"] or None,
        )
    return None


def parse_condition_message(
    message: str, *, observed_at: datetime, source: str = "node-problem-detector"
) -> list[Evidence]:
    """Read the evidence a ``GpuHealthProblem`` / ``EfaHealthProblem`` message carries.

    Notes (GPU count, a wedged driver, tool failures) and findings whose head
    does not parse or whose values are out of range (a GPU index above 63)
    carry no typed evidence; the condition itself still reports the problem.

    Args:
        message: The condition's message, as NPD wrote it (possibly cut short).
        observed_at: Stamped on every piece of evidence (when the condition was seen).
        source: The evidence source name.

    Returns:
        One piece of evidence per structured finding, in message order (most severe first).
    """
    evidence: list[Evidence] = []
    for item in split_findings(message):
        try:
            parsed = _parse_item(item, observed_at, source)
        except ValidationError:
            parsed = None  # out-of-range values: not evidence, the condition still is
        if parsed is not None:
            evidence.append(parsed)
    return evidence


def findings_text(findings: Iterable[Finding]) -> list[str]:
    """Each finding as its message item (for logs and tests)."""
    return [format_finding(f) for f in findings]
