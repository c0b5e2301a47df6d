"""The latency share: which round trips of a run's history count, their union, the warning."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent

from whatif.latency import (
    SHARE_LIMIT,
    IncidentLatency,
    LatencyShare,
    RoundTrip,
    incident_latency,
    latency_share,
    latency_warning,
    round_trips,
    spread,
    union,
)
from whatif.results import latency_text, latency_warnings
from whatif.runner import PolicyResult

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


class History:
    """Builds a run's history events with their real times (seconds after T0)."""

    def __init__(self) -> None:
        self.events: list[HistoryEvent] = []

    def add(self, kind: EventType.ValueType, seconds: float) -> HistoryEvent:
        event = HistoryEvent(event_id=len(self.events) + 1, event_type=kind)
        event.event_time.FromDatetime(at(seconds))
        self.events.append(event)
        return event

    def workflow_task(self, scheduled: float, completed: float) -> None:
        s = self.add(EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED, scheduled)
        started = self.add(EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED, scheduled)
        started.workflow_task_started_event_attributes.scheduled_event_id = s.event_id
        done = self.add(EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED, completed)
        done.workflow_task_completed_event_attributes.scheduled_event_id = s.event_id

    def activity(
        self, name: str, scheduled: float, started: float, closed: float, attempt: int = 1
    ) -> None:
        s = self.add(EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, scheduled)
        s.activity_task_scheduled_event_attributes.activity_type.name = name
        st = self.add(EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED, started)
        st.activity_task_started_event_attributes.scheduled_event_id = s.event_id
        st.activity_task_started_event_attributes.attempt = attempt
        done = self.add(EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED, closed)
        done.activity_task_completed_event_attributes.scheduled_event_id = s.event_id
        done.activity_task_completed_event_attributes.started_event_id = st.event_id

    def timer(self, started: float, duration: float, fired: float) -> None:
        t = self.add(EventType.EVENT_TYPE_TIMER_STARTED, started)
        t.timer_started_event_attributes.start_to_fire_timeout.FromTimedelta(
            timedelta(seconds=duration)
        )
        f = self.add(EventType.EVENT_TYPE_TIMER_FIRED, fired)
        f.timer_fired_event_attributes.started_event_id = t.event_id


def spans(trips: list[RoundTrip]) -> list[tuple[str, float, float]]:
    return [(t.kind, (t.start - T0).total_seconds(), (t.end - T0).total_seconds()) for t in trips]


def test_round_trips_count_workflow_tasks_dispatch_calls_and_late_timers_not_world_waits() -> None:
    h = History()
    h.workflow_task(0.0, 0.02)
    h.activity("quarantine_node", 0.02, 0.03, 0.08)  # a call: dispatch and execution
    h.workflow_task(0.08, 0.1)
    h.activity("reboot_node", 0.1, 0.12, 5.0)  # waits for the world: dispatch only
    h.workflow_task(5.0, 5.01)
    h.activity("run_rung_something_new", 5.01, 5.02, 7.0)  # a rung's own step waits too
    h.timer(7.0, 2.0, 9.05)  # 0.05 s late
    h.timer(9.05, 1.0, 10.0)  # early by the clock's rounding: nothing
    h.activity("record_step", 10.0, 10.5, 10.6, attempt=2)  # a retry: no dispatch, the call
    assert spans(round_trips(h.events)) == [
        ("workflow_task", 0.0, 0.02),
        ("dispatch", 0.02, 0.03),
        ("call", 0.03, 0.08),
        ("workflow_task", 0.08, 0.1),
        ("dispatch", 0.1, 0.12),
        ("workflow_task", 5.0, 5.01),
        ("dispatch", 5.01, 5.02),
        ("timer_late", 9.0, 9.05),
        ("call", 10.5, 10.6),
    ]


def test_union_merges_overlaps_and_clips_to_the_span() -> None:
    intervals = [(at(0), at(2)), (at(1), at(3)), (at(5), at(6)), (at(9), at(12)), (at(20), at(21))]
    assert union(intervals, at(0.5), at(10)) == [(at(0.5), at(3)), (at(5), at(6)), (at(9), at(10))]


def test_an_incidents_latency_is_the_union_on_the_simulators_clock() -> None:
    trips = [
        RoundTrip("workflow_task", at(0), at(0.1)),
        RoundTrip("call", at(0.05), at(0.3)),  # overlaps: counted once
        RoundTrip("dispatch", at(1.0), at(1.2)),
        RoundTrip("workflow_task", at(50), at(51)),  # after the last decision: not MTTR's
    ]

    # The clock ran at 600x, but stood still between 1.1 s and 1.2 s real.
    def sim_time(moment: datetime) -> float:
        real = (moment - T0).total_seconds()
        return 600 * min(real, 1.1) + 600 * max(0.0, real - 1.2)

    measured = incident_latency(trips, at(0), at(10), sim_time)
    assert measured.real_s == pytest.approx(0.5)
    assert measured.sim_s == pytest.approx(600 * 0.4)  # held clock time added nothing
    assert measured.by_kind_real_s == pytest.approx(
        {"workflow_task": 0.1, "dispatch": 0.2, "call": 0.25, "timer_late": 0.0}
    )


def measured(*sim: float) -> list[IncidentLatency]:
    return [
        IncidentLatency(real_s=s / 1000, sim_s=s, by_kind_real_s={"call": s / 1000}) for s in sim
    ]


def test_latency_above_one_percent_of_mttr_p50_warns() -> None:
    share = latency_share(
        measured(20, 30, 40), resolved=3, mttr_clock_p50_s=1000.0, time_factor=1000
    )
    assert share.added_sim_p50_s == 30
    assert share.real_p50_s == pytest.approx(0.03)
    assert share.added_at_factor_p50_s == pytest.approx(30)
    assert share.share_of_mttr_p50 == pytest.approx(0.03)
    assert share.over_limit
    warning = latency_warning("graded", share)
    assert warning is not None
    assert warning.startswith("warning: graded: real latency added 30 simulated s")
    assert "3.0% of its MTTR p50 (1000 s), above 1%" in warning


def test_latency_at_or_under_one_percent_does_not_warn() -> None:
    share = latency_share(measured(5, 10, 12), resolved=3, mttr_clock_p50_s=1000.0, time_factor=1)
    assert share.share_of_mttr_p50 == pytest.approx(SHARE_LIMIT)
    assert not share.over_limit
    assert latency_warning("graded", share) is None


def test_without_mttr_there_is_no_share_and_no_warning() -> None:
    share = latency_share([], resolved=0, mttr_clock_p50_s=None, time_factor=600)
    assert (share.incidents_measured, share.share_of_mttr_p50, share.over_limit) == (0, None, False)
    assert latency_warning("no-automation", share) is None


def test_the_run_warns_per_policy_over_the_limit_and_the_table_marks_it() -> None:
    over = latency_share(measured(50), resolved=1, mttr_clock_p50_s=1000.0, time_factor=600)
    under = latency_share(measured(1), resolved=1, mttr_clock_p50_s=1000.0, time_factor=600)
    results = [
        PolicyResult.model_construct(name="graded", latency=over),
        PolicyResult.model_construct(name="replace-always", latency=under),
        PolicyResult.model_construct(name="old-run", latency=None),
    ]
    warnings = latency_warnings(results)
    assert len(warnings) == 1
    assert warnings[0].startswith("warning: graded:")
    assert latency_text(results[0]) == "50s (5.0% !)"
    assert latency_text(results[1]) == "1s (0.1%)"
    assert latency_text(results[2]) == "-"


def test_the_report_section_gives_the_figures_and_the_warning() -> None:
    from whatif.report import _latency_section

    over = latency_share(measured(50), resolved=4, mttr_clock_p50_s=1000.0, time_factor=600)
    page = _latency_section([PolicyResult.model_construct(name="graded", latency=over)])
    assert "<strong>warning: graded: real latency added 50 simulated s" in page
    assert "1 / 4" in page  # incidents read / resolved
    assert "5.00% (over the limit)" in page


def test_at_most_the_limit_of_incidents_is_read_evenly_spread() -> None:
    assert spread(list(range(10)), 20) == list(range(10))
    assert spread(list(range(10)), 5) == [0, 2, 4, 6, 8]


def test_the_json_carries_the_latency_share() -> None:
    share = LatencyShare.model_validate(
        latency_share(
            measured(50), resolved=1, mttr_clock_p50_s=1000.0, time_factor=600
        ).model_dump(mode="json")
    )
    assert share.over_limit
    assert share.limit == SHARE_LIMIT
