"""The simulated time the system's own real latency adds to each incident (issue 40).

A comparison is a real-time co-simulation: the fleet runs ``time_factor`` times
faster than real time, Temporal and the APIs do not, so every real second of
their round trips costs ``time_factor`` simulated seconds of MTTR. This module
measures those round trips, per incident, from the incident's own Temporal
history, and puts the simulated time they added next to the MTTR.

What is measured, for each incident counted in MTTR (outcome repaired,
recovered or replaced) over its resolution span (the run's start to its last
decision, the span MTTR measures):

- **workflow tasks**: each ``WorkflowTaskScheduled`` to its
  ``WorkflowTaskCompleted`` (or failed, timed out): the server handing the
  workflow's next decision to the worker and the worker's answer;
- **dispatch**: ``ActivityTaskScheduled`` to ``ActivityTaskStarted`` of an
  activity's first attempt (a retried activity's gap holds its earlier
  attempts and backoff, which are not latency: not counted);
- **calls**: the execution (``ActivityTaskStarted`` to its close) of every
  activity that does not wait for the world (all but :data:`WORLD_WAITS`):
  quarantine, release, record, escalate, breaker check, NodeClaim deletion,
  history and job look-ups, checkpoint requests: Kubernetes, EC2/SSM and
  Temporal API round trips;
- **timer lateness**: a ``TimerFired`` after its ``TimerStarted`` plus the
  timer's duration (the server's timer queue).

The union of these intervals within the span (round trips that overlap count
once) is the incident's latency in real seconds; mapped through the
simulator's clock (``SimClock.sim_at``, as ``mttr_clock_*`` is) it is the
simulated time that latency added: the ``factor x latency`` of ``MTTR = work +
factor x latency``. Not measured, so the figure is a lower bound: API calls and
poll intervals inside the activities that wait for the world (reboot, reset,
diagnostic, drain, replacement), signal round trips (replacement permits,
checkpoint answers) and the watcher's detection (before the run starts, so
not part of MTTR either). The strict factor check (``whatif.factor_check``)
sees all of it: two factors 4x apart move MTTR by 3x whatever latency there is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client
from temporalio.service import RPCError

from demo.incidents import Incident
from demo.summary import RESOLVED, percentile
from gpu_remediation.ids import Activities

SHARE_LIMIT = 0.01
"""A run warns when latency's simulated time exceeds this share of a policy's MTTR p50."""

MAX_INCIDENTS = 400
"""Incidents whose history is read per policy (evenly spread over the resolved ones)."""

FETCH_CONCURRENCY = 8

WORLD_WAITS = frozenset(
    {
        Activities.DRAIN_GPU_PODS,
        Activities.RESET_GPUS,
        Activities.REBOOT_NODE,
        Activities.RUN_DIAGNOSTIC,
        Activities.RUN_EFA_LOOPBACK,
        Activities.WAIT_FOR_REPLACEMENT,
        Activities.CHECK_EFA,
        Activities.RUN_NCCL_CHECK,
        Activities.HOLD_FOR_ADMISSION,
    }
)
"""Activities that wait for the simulated world (a rung's own ``run_rung_*`` too)."""

KINDS = ("workflow_task", "dispatch", "call", "timer_late")

_WT_CLOSE = {
    EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED: "workflow_task_completed_event_attributes",
    EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED: "workflow_task_failed_event_attributes",
    EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT: "workflow_task_timed_out_event_attributes",
}
_ACTIVITY_CLOSE = {
    EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED: "activity_task_completed_event_attributes",
    EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED: "activity_task_failed_event_attributes",
    EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT: "activity_task_timed_out_event_attributes",
    EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED: "activity_task_canceled_event_attributes",
}


@dataclass(frozen=True)
class RoundTrip:
    """One interval of real time the system spent on its own round trip."""

    kind: str
    start: datetime
    end: datetime


def waits_for_world(activity_type: str) -> bool:
    """Whether an activity waits for the simulated world (its time is not latency)."""
    return activity_type in WORLD_WAITS or activity_type.startswith(Activities.rung_step(""))


def _at(event: HistoryEvent) -> datetime:
    return event.event_time.ToDatetime(tzinfo=UTC)


def round_trips(events: Iterable[HistoryEvent]) -> list[RoundTrip]:
    """The round trips of one run's history (see the module's definitions).

    Args:
        events: The run's history events, in order.
    """
    by_id: dict[int, HistoryEvent] = {}
    trips: list[RoundTrip] = []
    for event in events:
        by_id[event.event_id] = event
        at = _at(event)
        kind = event.event_type
        if kind in _WT_CLOSE:
            attrs = getattr(event, _WT_CLOSE[kind])
            scheduled = by_id.get(attrs.scheduled_event_id)
            if scheduled is not None:
                trips.append(RoundTrip("workflow_task", _at(scheduled), at))
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attrs = event.activity_task_started_event_attributes
            scheduled = by_id.get(attrs.scheduled_event_id)
            if scheduled is not None and attrs.attempt <= 1:
                trips.append(RoundTrip("dispatch", _at(scheduled), at))
        elif kind in _ACTIVITY_CLOSE:
            attrs = getattr(event, _ACTIVITY_CLOSE[kind])
            scheduled = by_id.get(attrs.scheduled_event_id)
            started = by_id.get(attrs.started_event_id)
            if scheduled is None or started is None:
                continue  # cancelled before it started: nothing ran
            name = scheduled.activity_task_scheduled_event_attributes.activity_type.name
            if not waits_for_world(name):
                trips.append(RoundTrip("call", _at(started), at))
        elif kind == EventType.EVENT_TYPE_TIMER_FIRED:
            timer = by_id.get(event.timer_fired_event_attributes.started_event_id)
            if timer is not None:
                due = (
                    _at(timer)
                    + timer.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta()
                )
                if at > due:
                    trips.append(RoundTrip("timer_late", due, at))
    return trips


def union(
    intervals: Iterable[tuple[datetime, datetime]], start: datetime, end: datetime
) -> list[tuple[datetime, datetime]]:
    """The intervals clipped to ``[start, end]`` and merged where they overlap, in order."""
    clipped = sorted((max(a, start), min(b, end)) for a, b in intervals)
    merged: list[tuple[datetime, datetime]] = []
    for a, b in clipped:
        if b <= a:
            continue
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


@dataclass(frozen=True)
class IncidentLatency:
    """One incident's latency over its resolution span.

    Attributes:
        real_s: Real seconds of the union of its round trips.
        sim_s: The same intervals on the simulator's clock: the simulated time they added.
        by_kind_real_s: Real seconds of each kind's own union (kinds can overlap).
    """

    real_s: float
    sim_s: float
    by_kind_real_s: dict[str, float]


def incident_latency(
    trips: Sequence[RoundTrip],
    start: datetime,
    end: datetime,
    sim_time: Callable[[datetime], float],
) -> IncidentLatency:
    """Measure one incident's round trips within ``[start, end]``.

    Args:
        trips: The run's round trips (:func:`round_trips`).
        start: The span's start (the run's start, as MTTR's).
        end: The span's end (the last decision, as MTTR's).
        sim_time: Real moment to the simulator's clock (``SimClock.sim_at``).
    """
    merged = union(((t.start, t.end) for t in trips), start, end)
    real = sum((b - a).total_seconds() for a, b in merged)
    sim = sum(max(0.0, sim_time(b) - sim_time(a)) for a, b in merged)
    by_kind = {
        kind: sum(
            (b - a).total_seconds()
            for a, b in union(((t.start, t.end) for t in trips if t.kind == kind), start, end)
        )
        for kind in KINDS
    }
    return IncidentLatency(real_s=real, sim_s=sim, by_kind_real_s=by_kind)


class LatencyShare(BaseModel):
    """A policy's latency figures, next to its MTTR (the JSON's ``latency``).

    Attributes:
        incidents_measured: Resolved incidents whose history was read.
        incidents_resolved: Resolved incidents in all (MTTR's).
        real_p50_s: Per-incident latency, real seconds, p50.
        real_p95_s: The same, p95.
        real_mean_s: The same, mean.
        added_sim_p50_s: Simulated time it added per incident (simulator's clock), p50.
        added_sim_p95_s: The same, p95.
        added_sim_mean_s: The same, mean.
        added_at_factor_p50_s: ``real_p50_s`` x the requested factor (no clock holds).
        by_kind_mean_real_s: Mean real seconds per incident of each kind of round trip.
        mttr_clock_p50_s: The policy's MTTR p50 on the simulator's clock.
        share_of_mttr_p50: ``added_sim_p50_s / mttr_clock_p50_s`` (None: no MTTR).
        limit: :data:`SHARE_LIMIT`.
        over_limit: The share is above the limit: the run warns.
    """

    model_config = ConfigDict(frozen=True)

    incidents_measured: int
    incidents_resolved: int
    real_p50_s: float | None
    real_p95_s: float | None
    real_mean_s: float | None
    added_sim_p50_s: float | None
    added_sim_p95_s: float | None
    added_sim_mean_s: float | None
    added_at_factor_p50_s: float | None
    by_kind_mean_real_s: dict[str, float]
    mttr_clock_p50_s: float | None
    share_of_mttr_p50: float | None
    limit: float = SHARE_LIMIT
    over_limit: bool


def _r(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def latency_share(
    measured: Sequence[IncidentLatency],
    *,
    resolved: int,
    mttr_clock_p50_s: float | None,
    time_factor: float,
) -> LatencyShare:
    """Summarize the incidents' latencies against the policy's MTTR p50.

    Args:
        measured: The measured incidents (:func:`incident_latency`).
        resolved: Resolved incidents in all.
        mttr_clock_p50_s: MTTR p50 on the simulator's clock.
        time_factor: The requested factor.
    """
    real = [m.real_s for m in measured]
    sim = [m.sim_s for m in measured]
    real_p50 = percentile(real, 50)
    sim_p50 = percentile(sim, 50)
    share = sim_p50 / mttr_clock_p50_s if sim_p50 is not None and mttr_clock_p50_s else None
    n = len(measured)
    return LatencyShare(
        incidents_measured=n,
        incidents_resolved=resolved,
        real_p50_s=_r(real_p50, 4),
        real_p95_s=_r(percentile(real, 95), 4),
        real_mean_s=_r(sum(real) / n if n else None, 4),
        added_sim_p50_s=_r(sim_p50, 1),
        added_sim_p95_s=_r(percentile(sim, 95), 1),
        added_sim_mean_s=_r(sum(sim) / n if n else None, 1),
        added_at_factor_p50_s=_r(None if real_p50 is None else real_p50 * time_factor, 1),
        by_kind_mean_real_s={
            k: round(sum(m.by_kind_real_s.get(k, 0.0) for m in measured) / n, 4) if n else 0.0
            for k in KINDS
        },
        mttr_clock_p50_s=mttr_clock_p50_s,
        share_of_mttr_p50=_r(share, 5),
        over_limit=share is not None and share > SHARE_LIMIT,
    )


def latency_warning(policy: str, share: LatencyShare | None) -> str | None:
    """The run's warning for ``policy`` when latency is above the limit, else None."""
    if share is None or not share.over_limit or share.share_of_mttr_p50 is None:
        return None
    return (
        f"warning: {policy}: real latency added {share.added_sim_p50_s:g} simulated s per "
        f"incident (p50; {share.real_p50_s:g} real s), {share.share_of_mttr_p50:.1%} of its "
        f"MTTR p50 ({share.mttr_clock_p50_s:g} s), above {share.limit:.0%}: its MTTR and "
        "availability carry the comparison's own clock; use a lower --time-factor"
    )


def resolution_span(incident: Incident) -> tuple[datetime, datetime] | None:
    """The span MTTR measures (``demo.summary``): the run's start to its last decision."""
    state = incident.state
    if state is None or incident.result not in RESOLVED or not state.decisions:
        return None
    return state.started_at, state.decisions[-1].at


def spread(items: Sequence[Incident], limit: int) -> list[Incident]:
    """At most ``limit`` of ``items``, evenly spread over them (all when fewer)."""
    if len(items) <= limit:
        return list(items)
    step = len(items) / limit
    return [items[int(i * step)] for i in range(limit)]


async def measure(
    client: Client,
    incidents: Iterable[Incident],
    *,
    sim_time: Callable[[datetime], float],
    mttr_clock_p50_s: float | None,
    time_factor: float,
    limit: int = MAX_INCIDENTS,
) -> LatencyShare:
    """Read the resolved incidents' histories and measure their latency.

    Args:
        client: A client of the server the incidents ran on.
        incidents: The policy's incidents.
        sim_time: Real moment to the simulator's clock (``SimClock.sim_at``).
        mttr_clock_p50_s: The policy's MTTR p50 on the simulator's clock.
        time_factor: The requested factor.
        limit: Histories read at most (:data:`MAX_INCIDENTS`).
    """
    resolved = [(i, s) for i in incidents if (s := resolution_span(i)) is not None]
    chosen = spread([i for i, _ in resolved], limit)
    spans = dict((i.key, s) for i, s in resolved)
    gate = asyncio.Semaphore(FETCH_CONCURRENCY)

    async def one(incident: Incident) -> IncidentLatency | None:
        async with gate:
            handle = client.get_workflow_handle(incident.workflow_id, run_id=incident.run_id)
            try:
                history = await handle.fetch_history()
            except RPCError:
                return None  # counted out: incidents_measured says how many were read
        start, end = spans[incident.key]
        return incident_latency(round_trips(history.events), start, end, sim_time)

    got = await asyncio.gather(*(one(i) for i in chosen))
    return latency_share(
        [m for m in got if m is not None],
        resolved=len(resolved),
        mttr_clock_p50_s=mttr_clock_p50_s,
        time_factor=time_factor,
    )
