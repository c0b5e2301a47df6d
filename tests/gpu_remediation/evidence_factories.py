"""Small builders of evidence for classifier tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from gpu_remediation.models import (
    AlertEvidence,
    ConditionEvidence,
    DcgmEvidence,
    EfaEvidence,
    ManualEvidence,
    StragglerEvidence,
    XidEvidence,
)

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


def xid(code: int, gpu: int | None = 0, **kw: Any) -> XidEvidence:
    kw.setdefault("observed_at", T0)
    return XidEvidence(source="kernel-log", xid=code, gpu_index=gpu, **kw)


def dcgm(error_id: int | None, severity: int | None = None, **kw: Any) -> DcgmEvidence:
    kw.setdefault("gpu_index", 0)
    kw.setdefault("check", "health")
    return DcgmEvidence(observed_at=T0, source="dcgm", error_id=error_id, severity=severity, **kw)


def efa(check: str, **kw: Any) -> EfaEvidence:
    return EfaEvidence(observed_at=T0, source="efa-check", check=check, **kw)


def condition(type_: str, status: str, reason: str = "", message: str = "") -> ConditionEvidence:
    return ConditionEvidence(
        observed_at=T0,
        source="watcher",
        type=type_,
        status=status,
        reason=reason,
        message=message,
    )


def alert(**labels: str) -> AlertEvidence:
    return AlertEvidence(observed_at=T0, source="alertmanager", labels=labels)


def manual(runbook: str, **kw: Any) -> ManualEvidence:
    return ManualEvidence(observed_at=T0, source="cli", runbook=runbook, **kw)


def straggler(*, cleared: bool = False, observed_at: datetime = T0) -> StragglerEvidence:
    """What the relay's detector raises for rank 2 of job ml/llm, 30% slower than its gang."""
    return StragglerEvidence(
        observed_at=observed_at,
        source="straggler-detector",
        job="ml/llm",
        pod="ml/llm-2",
        slower_by=0.3,
        steps=400,
        gang=8,
        cleared=cleared,
    )
