"""Which worker did what for each incident, as the server recorded it in the histories.

``bench.workers`` judges how incidents spread over several workers from this:
the identity on each ``WorkflowTaskStarted`` and ``ActivityTaskStarted``
event, the one that completed the incident's last workflow task, workflow
task timeouts (a dead worker's tasks) and activities that needed another
attempt.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory


@dataclass
class IncidentTrace:
    """Which worker did what for one incident, from its history."""

    workflow_id: str
    closed_by: str | None
    """Identity of the worker that completed the last workflow task (None: still open)."""
    workflow_tasks: Counter[str] = field(default_factory=Counter)
    activities: Counter[str] = field(default_factory=Counter)
    workflow_task_timeouts: int = 0
    activities_retried: int = 0

    @property
    def workers(self) -> set[str]:
        """Every identity that ran a workflow task or an activity of it."""
        return set(self.workflow_tasks) | set(self.activities)


def trace(workflow_id: str, history: WorkflowHistory) -> IncidentTrace:
    """Read the identities of one incident's workflow tasks and activities from its history."""
    result = IncidentTrace(workflow_id=workflow_id, closed_by=None)
    last_task_completed_by: str | None = None
    for event in history.events:
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            result.workflow_tasks[event.workflow_task_started_event_attributes.identity] += 1
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            last_task_completed_by = event.workflow_task_completed_event_attributes.identity
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
            result.workflow_task_timeouts += 1
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            started = event.activity_task_started_event_attributes
            # Written when the attempt ends, with the identity of the attempt that ran last.
            result.activities[started.identity] += 1
            if started.attempt > 1:
                result.activities_retried += 1
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
            result.closed_by = last_task_completed_by
    return result


@dataclass
class WorkerShare:
    """One worker's part of a phase."""

    incidents_closed: int = 0
    incidents_touched: int = 0
    workflow_tasks: int = 0
    activities: int = 0


def shares(traces: Sequence[IncidentTrace]) -> dict[str, WorkerShare]:
    """Each identity's part of the incidents, by what the histories recorded."""
    out: dict[str, WorkerShare] = {}
    for item in traces:
        for identity in item.workers:
            share = out.setdefault(identity, WorkerShare())
            share.incidents_touched += 1
            share.workflow_tasks += item.workflow_tasks[identity]
            share.activities += item.activities[identity]
        if item.closed_by is not None:
            out.setdefault(item.closed_by, WorkerShare()).incidents_closed += 1
    return dict(sorted(out.items()))


def moved(traces: Sequence[IncidentTrace]) -> int:
    """Incidents whose workflow tasks ran on more than one worker."""
    return sum(len(item.workflow_tasks) > 1 for item in traces)
