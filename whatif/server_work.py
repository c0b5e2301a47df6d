"""What the time-skipping test server has to do, and when: read from its open runs' histories.

The clock-free comparison (ADR 018, 020, 024) steps the fleet alone while the
server has nothing to time. "Nothing" used to mean that only the semaphores were
open; with an incident open both clocks stepped, every 15 simulated seconds, even
while the incident only waited on a timer (an operator's ticket, a grace period,
a burn-in window). Each such step is an ``UnlockTimeSkippingWithSleep`` call, and
that call gets slower with every one the server answered (docs/scaling.md), so a
month at ten times the fault rate no longer fit a session.

A run needs the server's time now (it is **busy**) while it has anything under way
that the server hands to a worker or to another run: a workflow task, an activity,
a child being started, a signal or a cancel request to another run being sent.
Otherwise it can only move when a gated write reaches it (``WriteGate``) or when
one of its timers (or its own run timeout) fires. So when no open run is busy, the
fleet may step alone until the earliest of those deadlines: :func:`read_run` reads
one run's history, :class:`ServerWork` all open runs', and keeps what it read
while a run's history did not grow.

A child that closed while its parent has not yet recorded it is in flight between
them (the test server reports it to the parent after the child's close), so a
parent whose started child is not open any more counts as busy.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.workflow.v1 import WorkflowExecutionInfo
from temporalio.client import Client

Run = tuple[str, str]
"""A workflow run: its workflow id and run id."""

NEVER = datetime.max.replace(tzinfo=UTC)
"""The deadline of a server whose open runs have no timer: only a write wakes them."""

_E = EventType

_ENDS_WORKFLOW_TASK = {
    _E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED,
    _E.EVENT_TYPE_WORKFLOW_TASK_FAILED,
    _E.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT,
}
_ENDS_ACTIVITY = {
    _E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED,
    _E.EVENT_TYPE_ACTIVITY_TASK_FAILED,
    _E.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT,
    _E.EVENT_TYPE_ACTIVITY_TASK_CANCELED,
}
_ENDS_TIMER = {_E.EVENT_TYPE_TIMER_FIRED, _E.EVENT_TYPE_TIMER_CANCELED}
_INITIATES = {
    _E.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED,
    _E.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED,
    _E.EVENT_TYPE_REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED,
}
_ENDS_INITIATED = {
    # A child start, a signal sent, a cancel requested: each ends by naming the
    # event that initiated it.
    _E.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED,
    _E.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_FAILED,
    _E.EVENT_TYPE_EXTERNAL_WORKFLOW_EXECUTION_SIGNALED,
    _E.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_FAILED,
    _E.EVENT_TYPE_EXTERNAL_WORKFLOW_EXECUTION_CANCEL_REQUESTED,
    _E.EVENT_TYPE_REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_FAILED,
}
_ENDS_CHILD = {
    _E.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED,
    _E.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_FAILED,
    _E.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_CANCELED,
    _E.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_TIMED_OUT,
    _E.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_TERMINATED,
}


@dataclass(frozen=True)
class RunWork:
    """What one run has outstanding on the server, as of its history's last event.

    Attributes:
        events: How many events the history had when read.
        busy: Something is under way that the server hands out now (see the module).
        next_deadline: The earliest of its pending timers and its run timeout, on
            the server's clock; None when it has none.
        children: Workflow ids of the children it started that have not closed in
            its history (each must still be open, or its close is in flight).
    """

    events: int
    busy: bool
    next_deadline: datetime | None
    children: frozenset[str]


def read_run(events: Iterable[HistoryEvent]) -> RunWork:
    """What a run has outstanding, from its whole history (linear in its length)."""
    count = 0
    workflow_tasks: set[int] = set()
    activities: set[int] = set()
    initiated: set[int] = set()
    timers: dict[str, datetime] = {}
    children: dict[int, str] = {}  # initiated event id -> child workflow id
    timeout: datetime | None = None
    for event in events:
        count += 1
        kind = event.event_type
        if kind == _E.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            timeout = _run_deadline(event)
        elif kind == _E.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
            workflow_tasks.add(event.event_id)
        elif kind in _ENDS_WORKFLOW_TASK:
            workflow_tasks.discard(_attributes(event).scheduled_event_id)
        elif kind == _E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            activities.add(event.event_id)
        elif kind in _ENDS_ACTIVITY:
            activities.discard(_attributes(event).scheduled_event_id)
        elif kind == _E.EVENT_TYPE_TIMER_STARTED:
            started = event.timer_started_event_attributes
            timers[started.timer_id] = _at(event) + started.start_to_fire_timeout.ToTimedelta()
        elif kind in _ENDS_TIMER:
            timers.pop(_attributes(event).timer_id, None)
        elif kind in _INITIATES:
            initiated.add(event.event_id)
        elif kind in _ENDS_INITIATED:
            ended = _attributes(event)
            initiated.discard(ended.initiated_event_id)
            if kind == _E.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED:
                children[ended.initiated_event_id] = ended.workflow_execution.workflow_id
        elif kind in _ENDS_CHILD:
            children.pop(_attributes(event).initiated_event_id, None)
    deadlines = [*timers.values(), *([timeout] if timeout is not None else [])]
    return RunWork(
        events=count,
        busy=bool(workflow_tasks or activities or initiated),
        next_deadline=min(deadlines) if deadlines else None,
        children=frozenset(children.values()),
    )


def _attributes(event: HistoryEvent) -> Any:
    # The event's own attributes message (the history event's oneof).
    return getattr(event, event.WhichOneof("attributes") or "")


def _run_deadline(started: HistoryEvent) -> datetime | None:
    attributes = started.workflow_execution_started_event_attributes
    limits = [
        d.ToTimedelta()
        for d in (attributes.workflow_run_timeout, attributes.workflow_execution_timeout)
        if d.seconds or d.nanos
    ]
    if not limits:
        return None
    return _at(started) + min(limits)


def _at(event: HistoryEvent) -> datetime:
    return event.event_time.ToDatetime().replace(tzinfo=UTC)


class ServerWork:
    """Reads, for every open run, what it has outstanding; keeps it while its history holds.

    Args:
        client: A client of the test server.
    """

    def __init__(self, client: Client) -> None:
        self._client = client
        self._runs: dict[Run, RunWork] = {}
        self.histories_read = 0
        """Histories fetched (a run's is fetched again only once it grew)."""

    async def next_deadline(self, executions: Sequence[WorkflowExecutionInfo]) -> datetime | None:
        """When the server next has something to do, given every open run (listed just now).

        Returns:
            The earliest pending timer or run timeout (the server's clock);
            :data:`NEVER` when no run has any; None when something is busy now, or a
            run changed while its history was read (the caller looks again later).
        """
        open_ids = {e.execution.workflow_id for e in executions}
        seen: dict[Run, RunWork] = {}
        deadline = NEVER
        for execution in executions:
            run: Run = (execution.execution.workflow_id, execution.execution.run_id)
            work = self._runs.get(run)
            if work is None or work.events != execution.history_length:
                work = await self._read(run)
                if work.events != execution.history_length:
                    # It moved since the listing: something is happening there.
                    self._runs[run] = work
                    return None
            seen[run] = work
            if work.busy or not work.children <= open_ids:
                self._runs.update(seen)
                return None
            if work.next_deadline is not None:
                deadline = min(deadline, work.next_deadline)
        self._runs = seen  # closed runs drop out
        return deadline

    def unchanged(self, executions: Sequence[WorkflowExecutionInfo]) -> bool:
        """Whether ``executions`` are exactly the runs last read, each with the history read."""
        listed = {
            (e.execution.workflow_id, e.execution.run_id): e.history_length for e in executions
        }
        return listed == {run: work.events for run, work in self._runs.items()}

    async def _read(self, run: Run) -> RunWork:
        self.histories_read += 1
        handle = self._client.get_workflow_handle(run[0], run_id=run[1])
        events = [event async for event in handle.fetch_history_events()]
        return read_run(events)
