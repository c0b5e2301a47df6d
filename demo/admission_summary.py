"""The admission part of the demo's summary.

Nodes admitted, dead on arrival, burn-in failures, and how long Ready nodes
waited behind the startup taint.

Read from the admissions' results (closed runs of ``NodeAdmission`` in the
demo's cluster). Times are simulated seconds (the workflows' real seconds
times the time factor), like the summary's MTTR.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from pydantic import BaseModel, ConfigDict
from temporalio.client import Client

from gpu_remediation.admission_models import (
    ADMITTED_OUTCOMES,
    FAILED_OUTCOMES,
    AdmissionOutcome,
    AdmissionResult,
)
from gpu_remediation.ids import admissions_query
from gpu_remediation.visibility import ServerVisibility, Visibility


class ArrivalGroup(BaseModel):
    """First boots of one pool, instance type and zone: how many were dead on arrival."""

    model_config = ConfigDict(frozen=True)

    node_pool: str
    instance_type: str
    zone: str
    arrivals: int
    """First boots whose burn-in ended (admitted or dead on arrival)."""
    dead_on_arrival: int
    dead_on_arrival_rate: float


class AdmissionSummary(BaseModel):
    """``admission`` in ``remediate demo --json``."""

    model_config = ConfigDict(frozen=True)

    nodes_admitted: int
    dead_on_arrival: int
    burn_in_failures: int
    ready_to_schedulable_p50_s: float | None
    ready_to_schedulable_p95_s: float | None
    running: int = 0
    """Admissions still under way when the summary was taken."""
    by_arrival_group: list[ArrivalGroup] = []
    """Dead-on-arrival rate by pool, instance type and zone (the metrics' labels)."""


async def admission_results(
    client: Client, cluster: str, visibility: Visibility | None = None
) -> tuple[list[AdmissionResult], int]:
    """The closed admissions of ``cluster`` (oldest first) and how many still run.

    ``visibility`` lists the runs (None: the server's visibility).
    """
    results: list[AdmissionResult] = []
    running = 0
    listing = visibility or ServerVisibility(client)
    async for execution in listing.list(admissions_query(cluster)):
        if execution.close_time is None:
            running += 1
            continue
        handle = client.get_workflow_handle(
            execution.id, run_id=execution.run_id, result_type=AdmissionResult
        )
        results.append(await handle.result())
    return sorted(results, key=lambda r: r.started_at), running


def _percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summarize_admissions(
    results: Iterable[AdmissionResult], *, time_factor: float, running: int = 0
) -> AdmissionSummary:
    """Count the outcomes; Ready-to-schedulable percentiles in simulated seconds."""
    items = list(results)
    waits = [
        r.ready_to_schedulable_s * time_factor
        for r in items
        if r.outcome in ADMITTED_OUTCOMES and r.ready_to_schedulable_s is not None
    ]
    p50, p95 = _percentile(waits, 50), _percentile(waits, 95)
    groups: dict[tuple[str, str, str], list[bool]] = {}
    for r in items:
        doa = r.outcome == AdmissionOutcome.DEAD_ON_ARRIVAL
        if r.first_boot and (doa or r.outcome in ADMITTED_OUTCOMES):
            key = (r.node_pool or "none", r.instance_type or "unknown", r.zone or "unknown")
            groups.setdefault(key, []).append(doa)
    by_group = [
        ArrivalGroup(
            node_pool=pool,
            instance_type=instance_type,
            zone=zone,
            arrivals=len(flags),
            dead_on_arrival=sum(flags),
            dead_on_arrival_rate=round(sum(flags) / len(flags), 4),
        )
        for (pool, instance_type, zone), flags in sorted(groups.items())
    ]
    return AdmissionSummary(
        nodes_admitted=sum(r.outcome in ADMITTED_OUTCOMES for r in items),
        dead_on_arrival=sum(r.outcome == AdmissionOutcome.DEAD_ON_ARRIVAL for r in items),
        burn_in_failures=sum(r.outcome in FAILED_OUTCOMES for r in items),
        ready_to_schedulable_p50_s=None if p50 is None else round(p50, 1),
        ready_to_schedulable_p95_s=None if p95 is None else round(p95, 1),
        running=running,
        by_arrival_group=by_group,
    )


def admission_text(summary: AdmissionSummary, duration: Callable[[float | None], str]) -> str:
    """One line for the terminal summary (``duration`` formats seconds)."""
    text = (
        f"{summary.nodes_admitted} admitted after burn-in, {summary.dead_on_arrival} dead on "
        f"arrival caught, {summary.burn_in_failures} burn-in failures; Ready to schedulable "
        f"p50 {duration(summary.ready_to_schedulable_p50_s)} / "
        f"p95 {duration(summary.ready_to_schedulable_p95_s)} simulated"
    )
    rates = [
        f"{g.node_pool}/{g.instance_type}/{g.zone} {g.dead_on_arrival}/{g.arrivals}"
        for g in summary.by_arrival_group
        if g.dead_on_arrival
    ]
    if rates:
        text += "; dead on arrival of first boots: " + ", ".join(rates)
    return text + (f" ({summary.running} still running)" if summary.running else "")
