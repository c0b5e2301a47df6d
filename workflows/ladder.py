"""Pure ladder decisions, shared by the node workflow and the policy tools.

Nothing here does I/O or reads the clock: the workflow passes ``now`` in, so
these functions are deterministic and unit-testable without a server.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from gpu_remediation.models import Classification, Rung
from gpu_remediation.policy import Policy
from gpu_remediation.workflow_models import RungAttempt

# Preparation rungs run once per incident, before the first rung that needs them.
PREPARATION = (Rung.QUARANTINE, Rung.STOP_GPU_WORK)


def starting_point(
    classification: Classification, policy: Policy, prior_incidents: int
) -> tuple[Rung | None, Rung, str]:
    """Return the first rung, the highest rung allowed and why.

    A repeat offender (the Nth incident within the policy's window) starts at
    the repeat-offender rung, but never above the fault class's ceiling: a
    class that must not replace on its own (unknown evidence) does not start
    replacing because a buggy rule fired on the node three times.

    Args:
        classification: The classifier's verdict on the evidence.
        policy: The policy in force.
        prior_incidents: Incidents of this node already in the window.
    """
    start, ceiling = classification.start_rung, classification.max_rung
    if start is None:
        return None, ceiling, f"{classification.fault_class}: node is not touched"
    rule = policy.repeat_offender
    if (
        rule.enabled
        and prior_incidents + 1 >= rule.incidents
        and rule.start_rung.order > start.order
    ):
        target = rule.start_rung if rule.start_rung.order <= ceiling.order else ceiling
        reason = (
            f"repeat offender: incident {prior_incidents + 1} within {rule.window}, "
            f"starting at {target} instead of {start}"
        )
        return first_working_rung(target), ceiling, reason
    return first_working_rung(start), ceiling, f"{classification.fault_class}: start at {start}"


def first_working_rung(rung: Rung) -> Rung:
    """Map a preparation rung to the first rung above preparation."""
    return Rung.DIAGNOSE if rung in PREPARATION else rung


def climb(current: Rung, classification: Classification) -> Rung:
    """Return the rung after ``current`` failed, honouring a stronger classification.

    New evidence (a failed diagnostic, a fresh Xid) may call for a higher
    rung than the next one; the ladder never goes down.
    """
    candidate = first_working_rung(current.next())
    start = classification.start_rung
    if start is not None and start.order > candidate.order:
        candidate = first_working_rung(start)
    return candidate


def attempts_in_window(
    attempts: Sequence[RungAttempt], rung: Rung, now: datetime, policy: Policy
) -> int:
    """Count the attempts of ``rung`` within its policy window ending at ``now``.

    An attempt that did nothing to the node (``ran`` False) spends no budget.
    """
    window = policy.rung(rung).window
    return sum(1 for a in attempts if a.rung == rung and a.ran and a.started_at >= now - window)


def blocked_by_policy(
    rung: Rung,
    ceiling: Rung,
    attempts: Sequence[RungAttempt],
    now: datetime,
    policy: Policy,
) -> str | None:
    """Return why policy forbids running ``rung`` now, or None if it may run.

    Escalation is never blocked: it is the floor every path ends on.
    """
    if rung == Rung.ESCALATE:
        return None
    if rung.order > ceiling.order:
        return f"{rung} is above this fault's ceiling ({ceiling})"
    rung_policy = policy.rung(rung)
    if not rung_policy.enabled:
        return f"{rung} is disabled by policy"
    used = attempts_in_window(attempts, rung, now, policy)
    if used >= rung_policy.max_attempts:
        limit = rung_policy.max_attempts
        return f"{rung} attempt limit reached ({used}/{limit} in {rung_policy.window})"
    return None
