"""The metrics the workflows record, in one place (names, labels, buckets, helpers).

Recorded through ``workflow.metric_meter()``, which is replay-safe: the SDK
drops what a workflow records while it replays history, so a worker restart
or a cache eviction never counts an incident twice. The worker exports them
with the SDK's runtime metrics on its Prometheus endpoint
(``GPU_REMEDIATION_METRICS_BIND``); the meter adds ``namespace``,
``task_queue`` and ``workflow_type`` to every series.

Gauges hold the last value a worker recorded. With several workers each one
exports the value it last saw, so dashboards take ``max`` over workers (the
semaphore and the breaker change rarely; a stale value lasts until the
workflow's next task on that worker).

Labels are bounded: fault class, outcome, rung, node pool, semaphore id.
Never the node (a fleet has thousands).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from gpu_remediation.models import Outcome, Rung
    from gpu_remediation.workflow_models import RungAttempt
    from workflows import admission_metrics

PREFIX = "gpu_remediation_"
INCIDENTS = PREFIX + "incidents_total"
INCIDENT_DURATION = PREFIX + "incident_duration_seconds"
TIME_TO_REPAIR = PREFIX + "time_to_repair_seconds"
RUNG_DURATION = PREFIX + "rung_duration_seconds"
ESCALATIONS = PREFIX + "escalations_total"
BREAKER_OPEN = PREFIX + "breaker_open"
POOL_UNHEALTHY_RATIO = PREFIX + "pool_unhealthy_ratio"
BREAKER_BLOCKED = PREFIX + "breaker_blocked_total"
REPLACEMENTS_IN_FLIGHT = PREFIX + "replacements_in_flight"
REPLACEMENTS_WAITING = PREFIX + "replacements_waiting"
REPLACEMENT_CAPACITY = PREFIX + "replacement_capacity"

WORKFLOW_METRICS = (
    INCIDENTS,
    INCIDENT_DURATION,
    TIME_TO_REPAIR,
    RUNG_DURATION,
    ESCALATIONS,
    BREAKER_OPEN,
    POOL_UNHEALTHY_RATIO,
    BREAKER_BLOCKED,
    REPLACEMENTS_IN_FLIGHT,
    REPLACEMENTS_WAITING,
    REPLACEMENT_CAPACITY,
)

# Seconds. Rungs take from seconds (a reset) to an hour (a replacement);
# incidents from seconds (transient) to days (escalated, waiting for people).
_MINUTES = (1, 2, 5, 10, 15, 30, 45)
RUNG_BUCKETS = [1.0, 5.0, 15.0, 30.0] + [m * 60.0 for m in _MINUTES] + [3600.0, 7200.0, 14400.0]
INCIDENT_BUCKETS = (
    [10.0, 30.0]
    + [m * 60.0 for m in _MINUTES]
    + [h * 3600.0 for h in (1, 2, 4, 8, 12, 24, 48, 96, 168)]
)
HISTOGRAM_BUCKETS: dict[str, list[float]] = {
    admission_metrics.READY_TO_SCHEDULABLE: admission_metrics.READY_BUCKETS,
    RUNG_DURATION: RUNG_BUCKETS,
    TIME_TO_REPAIR: INCIDENT_BUCKETS,
    INCIDENT_DURATION: INCIDENT_BUCKETS,
}
"""Bucket boundaries for the worker's Prometheus exporter (``gpu_remediation.telemetry``)."""

BACK_IN_SERVICE = (Outcome.REPAIRED, Outcome.RECOVERED, Outcome.NO_FAULT_FOUND, Outcome.REPLACED)


def _pool(node_pool: str | None) -> str:
    return node_pool or "none"


def _seconds_since(started: datetime) -> float:
    return max((workflow.now() - started).total_seconds(), 0.0)


def incident_closed(
    fault_class: str, outcome: Outcome, node_pool: str | None, started: datetime
) -> None:
    """Count a closed incident and how long it was open (cooldown included)."""
    labels = {"fault_class": fault_class, "outcome": outcome.value, "node_pool": _pool(node_pool)}
    meter = workflow.metric_meter()
    meter.create_counter(INCIDENTS, "Closed incidents by fault class and outcome.").add(1, labels)
    meter.create_histogram_float(
        INCIDENT_DURATION, "Time from an incident's start to its close (cooldown included).", "s"
    ).record(_seconds_since(started), labels)


def back_in_service(fault_class: str, outcome: Outcome, started: datetime) -> None:
    """Record the time to repair, if ``outcome`` put the node (or its replacement) back.

    Measured from the incident's start, so a relapse repaired in cooldown counts
    the whole incident.
    """
    if outcome not in BACK_IN_SERVICE:
        return
    workflow.metric_meter().create_histogram_float(
        TIME_TO_REPAIR, "Time from an incident's start until the node is back in service.", "s"
    ).record(_seconds_since(started), {"fault_class": fault_class, "outcome": outcome.value})


def attempt_finished(
    attempts: Sequence[RungAttempt], rung: Rung, outcome: Outcome | None, abort: object | None
) -> None:
    """Record the duration of the attempt of ``rung`` that just ended, verification included.

    Nothing is recorded when ``rung`` ran no attempt (a dry run only plans).
    The ``result`` label: ``fixed`` (the node is back in service), ``aborted``
    or ``climbed`` (it did not fix the node).

    Args:
        attempts: The incident's attempts; the last one is the rung's.
        rung: The rung that ran.
        outcome: The incident's outcome after the rung, if it closed.
        abort: The operator's abort request, if any.
    """
    if not attempts or attempts[-1].rung != rung:
        return
    if abort is not None:
        result = "aborted"
    else:
        result = "fixed" if outcome in BACK_IN_SERVICE else "climbed"
    workflow.metric_meter().create_histogram_float(
        RUNG_DURATION, "Duration of one rung attempt, verification included.", "s"
    ).record(_seconds_since(attempts[-1].started_at), {"rung": rung.value, "result": result})


def escalated(fault_class: str, node_pool: str | None) -> None:
    """Count a hand-over to people (the incident then waits for an operator)."""
    workflow.metric_meter().create_counter(ESCALATIONS, "Incidents handed over to people.").add(
        1, {"fault_class": fault_class, "node_pool": _pool(node_pool)}
    )


def breaker_checked(
    node_pool: str | None, is_open: bool, unhealthy: int, total: int, rung: Rung
) -> None:
    """Publish a pool's breaker state as last checked, and count blocked rungs."""
    meter = workflow.metric_meter()
    pool = {"node_pool": _pool(node_pool)}
    meter.create_gauge(BREAKER_OPEN, "1 while the pool's breaker is open (last check).").set(
        int(is_open), pool
    )
    meter.create_gauge_float(
        POOL_UNHEALTHY_RATIO, "Unhealthy fraction of the pool at the last breaker check."
    ).set(unhealthy / total if total else 0.0, pool)
    if is_open:
        meter.create_counter(BREAKER_BLOCKED, "Disruptive rungs blocked by an open breaker.").add(
            1, {**pool, "rung": rung.value}
        )


def semaphore_state(semaphore: str, capacity: int, holders: int, waiters: int) -> None:
    """Publish the replacement semaphore's capacity, holders and waiters."""
    meter = workflow.metric_meter()
    labels = {"semaphore": semaphore}
    meter.create_gauge(REPLACEMENTS_IN_FLIGHT, "Replacement permits held.").set(holders, labels)
    meter.create_gauge(REPLACEMENTS_WAITING, "Incidents waiting for a replacement permit.").set(
        waiters, labels
    )
    meter.create_gauge(REPLACEMENT_CAPACITY, "Replacement semaphore capacity.").set(
        capacity, labels
    )
