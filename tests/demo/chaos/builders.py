"""Small builders of run facts for the invariant tests (plain data, no servers)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from demo.chaos.facts import (
    ActivityRecord,
    ActivityStatus,
    BootChange,
    NodeRecord,
    ProblemEpisode,
    RunFacts,
    RunRecord,
    RunStatus,
)
from gpu_remediation.ids import NODE_WORKFLOW_TYPE

T0 = datetime(2026, 12, 5, 9, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    """T0 plus ``seconds``."""
    return T0 + timedelta(seconds=seconds)


def activity(
    name: str,
    start: float,
    end: float | None = None,
    *,
    status: ActivityStatus = "completed",
    result: dict[str, Any] | None = None,
    **input: Any,
) -> ActivityRecord:
    return ActivityRecord(
        name=name,
        scheduled_at=at(start),
        closed_at=at(end) if end is not None else None,
        status=status if end is not None else "open",
        attempts=1,
        input=input,
        result=result,
    )


def incident(
    node: str,
    start: float,
    end: float | None = None,
    *,
    run_id: str = "r1",
    status: RunStatus | None = None,
    outcome: str | None = "repaired",
    settled: bool = True,
    activities: list[ActivityRecord] | None = None,
    task_failures: list[str] | None = None,
    workflow_type: str = NODE_WORKFLOW_TYPE,
) -> RunRecord:
    return RunRecord(
        workflow_id=f"gpu-remediation/demo/{node}",
        run_id=run_id,
        workflow_type=workflow_type,
        node=node,
        status=status or ("running" if end is None else "completed"),
        started_at=at(start),
        closed_at=at(end) if end is not None else None,
        outcome=outcome,
        settled=settled,
        activities=activities or [],
        task_failures=task_failures or [],
    )


def node(
    name: str,
    *,
    boots: Sequence[tuple[float, str]] | None = None,
    episodes: Sequence[tuple[str, float, float | None, float]] | None = None,
    **fields: Any,
) -> NodeRecord:
    return NodeRecord(
        name=name,
        boot_ids=[BootChange(at=at(s), boot_id=b) for s, b in boots or [(0, "boot-0")]],
        episodes=[
            ProblemEpisode(
                condition=c, start=at(s), end=at(e) if e is not None else None, grace_s=g
            )
            for c, s, e, g in episodes or []
        ],
        **fields,
    )


def facts(
    nodes: list[NodeRecord], runs: list[RunRecord], *, end: float = 600, **fields: Any
) -> RunFacts:
    fields.setdefault("replacement_cap", 2)
    return RunFacts(
        collected_at=at(end),
        nodes={n.name: n for n in nodes},
        runs=runs,
        detection_slack_s=fields.pop("detection_slack_s", 10.0),
        delivery_slack_s=fields.pop("delivery_slack_s", 30.0),
        **fields,
    )
