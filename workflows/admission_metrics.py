"""The metrics node admission records (replay-safe, through ``workflow.metric_meter()``).

Labels are bounded: node pool, instance type, zone, outcome, check. Never the
node. The dead-on-arrival rate per pool, instance type or zone is
``dead_on_arrival_total / (admitted + dead_on_arrival)`` over the same labels
(see deploy/grafana/gpu-remediation.json).
"""

from __future__ import annotations

from temporalio import workflow

PREFIX = "gpu_remediation_"
ADMISSIONS = PREFIX + "admissions_total"
NODES_ADMITTED = PREFIX + "nodes_admitted_total"
DEAD_ON_ARRIVAL = PREFIX + "dead_on_arrival_total"
BURN_IN_FAILURES = PREFIX + "burn_in_failures_total"
READY_TO_SCHEDULABLE = PREFIX + "ready_to_schedulable_seconds"

ADMISSION_METRICS = (
    ADMISSIONS,
    NODES_ADMITTED,
    DEAD_ON_ARRIVAL,
    BURN_IN_FAILURES,
    READY_TO_SCHEDULABLE,
)
# A burn-in takes minutes (diag level 2) to about half an hour (level 3 + EFA).
READY_BUCKETS = [5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1200.0, 1800.0, 3600.0]


def _node_labels(pool: str | None, instance_type: str | None, zone: str | None) -> dict[str, str]:
    return {
        "node_pool": pool or "none",
        "instance_type": instance_type or "unknown",
        "zone": zone or "unknown",
    }


def admission_closed(
    outcome: str, pool: str | None, instance_type: str | None, zone: str | None
) -> None:
    """Count an admission by how it ended."""
    workflow.metric_meter().create_counter(ADMISSIONS, "Node admissions by outcome.").add(
        1, {**_node_labels(pool, instance_type, zone), "outcome": outcome}
    )


def node_admitted(
    how: str,
    pool: str | None,
    instance_type: str | None,
    zone: str | None,
    ready_to_schedulable_s: float | None,
) -> None:
    """Count a node whose startup taint came off, and how long it was Ready but gated."""
    meter = workflow.metric_meter()
    labels = _node_labels(pool, instance_type, zone)
    meter.create_counter(NODES_ADMITTED, "Nodes admitted (startup taint removed).").add(
        1, {**labels, "how": how}
    )
    if ready_to_schedulable_s is not None:
        meter.create_histogram_float(
            READY_TO_SCHEDULABLE, "Time from a node's Ready to its admission.", "s"
        ).record(max(ready_to_schedulable_s, 0.0), {"node_pool": labels["node_pool"]})


def burn_in_failed(
    check: str,
    dead_on_arrival: bool,
    pool: str | None,
    instance_type: str | None,
    zone: str | None,
) -> None:
    """Count a failed burn-in (and a dead-on-arrival node, if it was the first boot)."""
    meter = workflow.metric_meter()
    labels = _node_labels(pool, instance_type, zone)
    meter.create_counter(BURN_IN_FAILURES, "Burn-ins failed, by check.").add(
        1, {**labels, "check": check}
    )
    if dead_on_arrival:
        meter.create_counter(DEAD_ON_ARRIVAL, "Nodes that failed burn-in on their first boot.").add(
            1, labels
        )
