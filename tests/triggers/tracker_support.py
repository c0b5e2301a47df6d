"""Shared by the condition tracker tests: a trigger policy, times and conditions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gpu_remediation.policy import ConditionRule, TriggerPolicy
from triggers.condition_tracker import ObservedCondition

T0 = datetime(2025, 1, 1, tzinfo=UTC)
NODE = "gpu-1"

TRIGGERS = TriggerPolicy(
    conditions=[
        ConditionRule(type="Ready", problem_statuses=["False", "Unknown"], grace="5m"),  # type: ignore[arg-type]
        ConditionRule(
            type="AcceleratedHardwareReady",
            problem_statuses=["False"],
            reason_pattern=r"^NvidiaXID(48|79)Error$",
            grace="1m",  # type: ignore[arg-type]
        ),
        ConditionRule(type="GpuHealthProblem", problem_statuses=["True"], grace="0s"),  # type: ignore[arg-type]
    ]
)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def cond(
    type_: str,
    status: str,
    *,
    since: datetime | None = None,
    reason: str = "",
    message: str = "",
) -> ObservedCondition:
    return ObservedCondition.model_validate(
        {
            "type": type_,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": since.isoformat() if since else None,
        }
    )


def ready(status: str, since: datetime) -> list[ObservedCondition]:
    return [cond("Ready", status, since=since, reason="KubeletNotReady")]
