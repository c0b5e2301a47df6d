"""The words an incident is summed up in, shared by the Temporal UI and ``remediate status``.

One function builds the one-line summary (:func:`summary_line`): the static
summary set when a trigger starts the incident, the heading of the current
details the workflow keeps, and the ``summary`` column of ``remediate
status`` are all its output, so an operator reads the same words in the UI's
incident page and in the terminal. Pure and free of Temporal imports: the
workflow (inside its sandbox), the triggers and the CLI all call it.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpu_remediation.classifier import classify
from gpu_remediation.models import (
    AlertEvidence,
    ConditionEvidence,
    DcgmEvidence,
    EfaEvidence,
    Evidence,
    ManualEvidence,
    NvSentinelEvidence,
    StragglerEvidence,
    XidEvidence,
)
from gpu_remediation.policy import Policy

MAX_DETAIL_ITEMS = 10
"""Evidence items listed in an incident's static details (the rest are counted)."""
MAX_DETAIL_MESSAGE = 200
"""Characters of each evidence message kept in the static details."""


def summary_line(
    node: str,
    pool: str | None,
    fault_class: str | None,
    *,
    rung: str | None = None,
    outcome: str | None = None,
    start_rung: str | None = None,
    in_service: bool = False,
) -> str:
    """The incident in one line: node, pool, fault class, and where its ladder stands.

    Examples: ``gpu-0001 (pool h100): gpu_fallen_off_bus, ladder from gpu_reset``
    (just started), ``... gpu_fallen_off_bus, at reboot`` (running),
    ``... gpu_fallen_off_bus, repaired after reboot`` (with its outcome).

    Args:
        node: Kubernetes node name.
        pool: The node's pool, None while unknown (before triage read the node).
        fault_class: The incident's fault class, None before it is classified.
        rung: The rung the ladder is on (or ended on).
        outcome: How the incident ended, when it has.
        start_rung: Where the policy starts the ladder for this fault class
            (shown while no rung has run yet).
        in_service: The class never touches the node (no ladder).
    """
    text = node + (f" (pool {pool})" if pool else "") + f": {fault_class or 'unclassified'}"
    if outcome:
        return text + f", {outcome}" + (f" after {rung}" if rung else "")
    if rung:
        return text + f", at {rung}"
    if start_rung:
        return text + f", ladder from {start_rung}"
    if in_service:
        return text + ", node stays in service"
    return text


def start_summary(
    node: str, evidence: Sequence[Evidence], policy: Policy, pool: str | None = None
) -> tuple[str, str]:
    """The static summary and details of an incident a report starts.

    The evidence is classified as the workflow will classify it in triage, so
    the summary names the first fault class and the rung the policy starts
    that class at (a repeat offender may start higher: the workflow's decision
    log and current details say so).

    Args:
        node: Kubernetes node name.
        evidence: The first report's evidence.
        policy: The policy the incident runs under.
        pool: The node's pool when the trigger knows it.

    Returns:
        ``(summary, details)``: one line, and markdown listing the first evidence.
    """
    classification = classify(evidence, policy)
    start = classification.start_rung
    summary = summary_line(
        node,
        pool,
        classification.fault_class.value,
        start_rung=start.value if start else None,
        in_service=start is None,
    )
    return summary, evidence_details(evidence)


def evidence_details(evidence: Sequence[Evidence]) -> str:
    """Markdown: the evidence that opened the incident, one item a line."""
    lines = ["**First evidence**", ""]
    for item in evidence[:MAX_DETAIL_ITEMS]:
        text = evidence_text(item, max_message=MAX_DETAIL_MESSAGE)
        cleared = ", cleared" if item.cleared else ""
        lines.append(f"- {text} ({item.source}, {item.observed_at:%Y-%m-%d %H:%M:%S %Z}{cleared})")
    if len(evidence) > MAX_DETAIL_ITEMS:
        lines.append(f"- ... and {len(evidence) - MAX_DETAIL_ITEMS} more")
    return "\n".join(lines)


def evidence_text(item: Evidence, *, max_message: int | None = None) -> str:
    """What one piece of evidence says, in a line of plain text.

    Args:
        item: The evidence.
        max_message: Cut its message to this many characters (None: keep it whole).
    """
    if isinstance(item, XidEvidence):
        text = f"Xid {item.xid}"
        if item.gpu_index is not None:
            text += f" on GPU {item.gpu_index}"
        if item.recovery_action is not None:
            text += f" (recovery action {item.recovery_action})"
    elif isinstance(item, DcgmEvidence):
        text = f"DCGM {item.check} error {item.error_id if item.error_id is not None else '?'}"
        if item.gpu_index is not None:
            text += f" on GPU {item.gpu_index}"
    elif isinstance(item, EfaEvidence):
        text = f"EFA {item.check} check" + (f" on {item.device}" if item.device else "")
    elif isinstance(item, ConditionEvidence):
        text = f"condition {item.type}={item.status}" + (f" ({item.reason})" if item.reason else "")
    elif isinstance(item, AlertEvidence):
        text = f"alert {item.labels.get('alertname', item.fingerprint or '?')}"
    elif isinstance(item, ManualEvidence):
        text = f"runbook {item.runbook} by {item.requested_by or '?'}"
        if item.force:
            text += " (forced)"
    elif isinstance(item, StragglerEvidence):
        text = (
            f"straggler in job {item.job}: {item.slower_by:.0%} slower than its gang's median "
            f"for {item.steps} steps ({item.gang} pods compared)"
        )
    elif isinstance(item, NvSentinelEvidence):
        text = f"NVSentinel request {item.request}"
        if item.check_name:
            text += f" ({item.check_name}, {item.recommended_action or 'no action'})"
    else:  # pragma: no cover - the union is closed
        text = item.key
    if item.message:
        message = item.message
        if max_message is not None and len(message) > max_message:
            message = message[: max_message - 3] + "..."
        text += f": {message}"
    return text
