"""What the test server has to do, read from a run's history (whatif.server_work)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.workflow.v1 import WorkflowExecutionInfo

from whatif.server_work import NEVER, Run, RunWork, ServerWork, read_run

E = EventType
T0 = datetime(2026, 12, 7, tzinfo=UTC)


class _History:
    """Builds a run's history event by event, numbering them."""

    def __init__(self, *, run_timeout: timedelta | None = None) -> None:
        self.events: list[HistoryEvent] = []
        started = self.add(E.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED)
        if run_timeout is not None:
            started.workflow_execution_started_event_attributes.workflow_run_timeout.FromTimedelta(
                run_timeout
            )
        self.task()

    def add(self, kind: int, at: datetime = T0, **fields: Any) -> HistoryEvent:
        event = HistoryEvent(event_id=len(self.events) + 1, event_type=kind)  # type: ignore[arg-type]
        event.event_time.FromDatetime(at)
        # Each event type's attributes field is named after it.
        name = E.Name(kind).removeprefix("EVENT_TYPE_").lower() + "_event_attributes"  # type: ignore[arg-type]
        attributes = getattr(event, name)
        attributes.SetInParent()
        for field, value in fields.items():
            setattr(attributes, field, value)
        self.events.append(event)
        return event

    def task(self, *, done: bool = True) -> None:
        scheduled = self.add(E.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED)
        if done:
            self.add(E.EVENT_TYPE_WORKFLOW_TASK_STARTED, scheduled_event_id=scheduled.event_id)
            self.add(E.EVENT_TYPE_WORKFLOW_TASK_COMPLETED, scheduled_event_id=scheduled.event_id)

    def timer(self, timer_id: str, lasts: timedelta) -> None:
        started = self.add(E.EVENT_TYPE_TIMER_STARTED, timer_id=timer_id)
        started.timer_started_event_attributes.start_to_fire_timeout.FromTimedelta(lasts)

    def read(self) -> RunWork:
        return read_run(self.events)


@pytest.mark.unit
def test_a_run_whose_task_is_done_and_has_no_timer_waits_for_a_write() -> None:
    work = _History().read()
    assert (work.busy, work.next_deadline, work.events) == (False, None, 4)


@pytest.mark.unit
def test_a_workflow_task_not_yet_completed_is_busy() -> None:
    history = _History()
    history.add(E.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED, signal_name="go")
    history.task(done=False)
    assert history.read().busy
    history.add(E.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT, scheduled_event_id=6)
    assert not history.read().busy


@pytest.mark.unit
def test_a_pending_timer_is_the_runs_next_deadline_and_an_ended_one_is_not() -> None:
    history = _History()
    history.timer("1", timedelta(minutes=45))
    history.timer("2", timedelta(hours=4))
    assert history.read() == RunWork(
        events=6, busy=False, next_deadline=T0 + timedelta(minutes=45), children=frozenset()
    )
    history.add(E.EVENT_TYPE_TIMER_FIRED, timer_id="1")
    assert history.read().next_deadline == T0 + timedelta(hours=4)
    history.add(E.EVENT_TYPE_TIMER_CANCELED, timer_id="2")
    assert history.read().next_deadline is None


@pytest.mark.unit
def test_the_run_timeout_is_a_deadline_too() -> None:
    history = _History(run_timeout=timedelta(hours=2))
    assert history.read().next_deadline == T0 + timedelta(hours=2)
    history.timer("1", timedelta(hours=3))
    assert history.read().next_deadline == T0 + timedelta(hours=2)


@pytest.mark.unit
@pytest.mark.parametrize(
    "end",
    [
        E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED,
        E.EVENT_TYPE_ACTIVITY_TASK_FAILED,
        E.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT,
        E.EVENT_TYPE_ACTIVITY_TASK_CANCELED,
    ],
)
def test_an_activity_is_busy_until_it_ends_in_any_way(end: int) -> None:
    history = _History()
    scheduled = history.add(E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, activity_id="1")
    history.add(E.EVENT_TYPE_ACTIVITY_TASK_STARTED, scheduled_event_id=scheduled.event_id)
    assert history.read().busy
    history.add(E.EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED, scheduled_event_id=scheduled.event_id)
    assert history.read().busy  # asked to stop is not stopped
    history.add(end, scheduled_event_id=scheduled.event_id)
    history.task()
    assert not history.read().busy


@pytest.mark.unit
@pytest.mark.parametrize(
    ("initiated", "ended"),
    [
        (
            E.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED,
            E.EVENT_TYPE_EXTERNAL_WORKFLOW_EXECUTION_SIGNALED,
        ),
        (
            E.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED,
            E.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_FAILED,
        ),
        (
            E.EVENT_TYPE_REQUEST_CANCEL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED,
            E.EVENT_TYPE_EXTERNAL_WORKFLOW_EXECUTION_CANCEL_REQUESTED,
        ),
        (
            E.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED,
            E.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_FAILED,
        ),
    ],
)
def test_a_signal_cancel_or_child_start_under_way_is_busy(initiated: int, ended: int) -> None:
    history = _History()
    sent = history.add(initiated)
    assert history.read().busy
    history.add(ended, initiated_event_id=sent.event_id)
    history.task()
    assert not history.read().busy


@pytest.mark.unit
def test_a_started_child_is_counted_until_its_close_is_recorded() -> None:
    history = _History()
    initiated = history.add(E.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED)
    child = history.add(
        E.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED, initiated_event_id=initiated.event_id
    )
    child.child_workflow_execution_started_event_attributes.workflow_execution.workflow_id = "guard"
    history.task()
    assert history.read().children == frozenset({"guard"})
    assert not history.read().busy
    history.add(
        E.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED, initiated_event_id=initiated.event_id
    )
    history.task()
    assert history.read().children == frozenset()


class _Canned(ServerWork):
    """ServerWork reading canned histories instead of the server's."""

    def __init__(self, histories: dict[Run, RunWork]) -> None:
        super().__init__(client=None)  # type: ignore[arg-type]
        self.histories = histories

    async def _read(self, run: Run) -> RunWork:
        self.histories_read += 1
        return self.histories[run]


def _listed(workflow_id: str, events: int) -> WorkflowExecutionInfo:
    info = WorkflowExecutionInfo(history_length=events)
    info.execution.workflow_id = workflow_id
    info.execution.run_id = f"{workflow_id}-run"
    return info


def _waiting(events: int, deadline: datetime | None = None, *children: str) -> RunWork:
    return RunWork(events=events, busy=False, next_deadline=deadline, children=frozenset(children))


@pytest.mark.unit
async def test_the_servers_next_deadline_is_its_runs_earliest_and_histories_are_read_once() -> None:
    work = _Canned(
        {
            ("incident", "incident-run"): _waiting(9, T0 + timedelta(hours=1), "guard"),
            ("guard", "guard-run"): _waiting(4),
            ("semaphore", "semaphore-run"): _waiting(20, T0 + timedelta(hours=2)),
        }
    )
    listed = [_listed("incident", 9), _listed("guard", 4), _listed("semaphore", 20)]
    assert await work.next_deadline(listed) == T0 + timedelta(hours=1)
    assert await work.next_deadline(listed) == T0 + timedelta(hours=1)
    assert work.histories_read == 3  # unchanged histories are not read again
    assert work.unchanged(listed)
    assert not work.unchanged(listed[:2])
    assert not work.unchanged([_listed("incident", 10), *listed[1:]])


@pytest.mark.unit
async def test_nothing_to_time_is_never() -> None:
    work = _Canned({("guard", "guard-run"): _waiting(4)})
    assert await work.next_deadline([_listed("guard", 4)]) == NEVER
    assert await work.next_deadline([]) == NEVER


@pytest.mark.unit
async def test_a_busy_run_a_run_that_moved_or_a_child_closing_makes_the_server_busy() -> None:
    busy = RunWork(events=5, busy=True, next_deadline=None, children=frozenset())
    assert await _Canned({("a", "a-run"): busy}).next_deadline([_listed("a", 5)]) is None
    # Listed at 4 events, 5 when read: it moved in between.
    moved = _Canned({("a", "a-run"): _waiting(5)})
    assert await moved.next_deadline([_listed("a", 4)]) is None
    # The guard closed, its parent has not recorded it yet: the report is under way.
    parent = _Canned({("incident", "incident-run"): _waiting(9, None, "guard")})
    assert await parent.next_deadline([_listed("incident", 9)]) is None
