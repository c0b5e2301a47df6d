"""A comparison's output: one row per policy, as a rich table and as JSON.

The JSON object per policy is the demo's summary (``demo.summary.DemoSummary``,
so ``availability``, ``replacements``, ``job_runs`` mean the same everywhere)
plus the comparison's own fields: ``policy_source``, ``escalations``,
``resets`` (GPU reset attempts), ``nodes_replaced`` (every node the fleet
terminated: the remediation's replacements and the operator's RMAs),
``gpu_hours_lost`` (unavailable node-hours times GPUs per node, simulated),
``faults_skipped`` (planned faults whose slot had no running node),
``operator`` (the human operator model's counters), ``timeline`` (the planned
faults and their digest: equal for every policy), ``settled``, ``clock``
(achieved vs requested time factor and how late the simulator's events ran) and
``timing`` (real seconds of the run's phases), ``latency`` (the simulated time
the system's real latency added per incident, next to MTTR p50, and its share of
it: ``whatif.latency.LatencyShare``) and, with ``--chaos``, ``chaos``
(the demo's shape: ``faults_injected`` by kind, ``faults``, ``invariants``,
``violations``; ``whatif.chaos``), ``capacity`` (launches, launch attempts that found
no capacity, Capacity Block waits, node-hours short and overlap instance-hours at the
window's end: ``simulator.fleet.capacity``; null in older lane files). The table's MTTR
is on the
simulator's clock (``mttr_clock_*_s``; ``mttr_*_s`` is real duration x requested
factor, the demo's definition).
"""

from __future__ import annotations

from typing import Any

from rich.table import Table

from demo.summary import DemoSummary, duration_text
from whatif.chaos import chaos_cell
from whatif.latency import latency_warning
from whatif.runner import PolicyResult


def policy_json(result: PolicyResult) -> dict[str, Any]:
    """The JSON object of one policy: the demo summary's keys plus the comparison's."""
    summary = result.summary
    return {
        **summary.model_dump(mode="json"),
        "policy_source": result.source,
        "escalations": result.escalations,
        "resets": summary.rung_attempts.get("gpu_reset", 0),
        "nodes_replaced": result.nodes_replaced,
        "gpu_hours_lost": result.gpu_hours_lost,
        "faults_skipped": result.faults_skipped,
        "operator": result.operator,
        "faulty_arrivals": result.faulty_arrivals,
        "timeline": result.timeline.model_dump(mode="json"),
        "settled": result.settled,
        "clock": result.clock,
        "timing": result.timing,
        "latency": result.latency.model_dump(mode="json") if result.latency is not None else None,
        "capacity": (
            result.capacity.model_dump(mode="json") if result.capacity is not None else None
        ),
        **({"chaos": result.chaos.model_dump(mode="json")} if result.chaos is not None else {}),
    }


def mttr_text(summary: DemoSummary) -> tuple[str, str]:
    """MTTR p50 and p95 on the simulator's clock (real x requested factor without one)."""
    if summary.mttr_clock_p50_s is not None:
        return duration_text(summary.mttr_clock_p50_s), duration_text(summary.mttr_clock_p95_s)
    return duration_text(summary.mttr_p50_s), duration_text(summary.mttr_p95_s)


def latency_text(result: PolicyResult) -> str:
    """Latency's simulated time per incident (p50) and its share of MTTR p50, or ``-``."""
    share = result.latency
    if share is None or share.added_sim_p50_s is None:
        return "-"
    text = duration_text(share.added_sim_p50_s)
    if share.share_of_mttr_p50 is not None:
        text += f" ({share.share_of_mttr_p50:.1%}{' !' if share.over_limit else ''})"
    return text


def latency_warnings(results: list[PolicyResult]) -> list[str]:
    """The run's warnings: policies whose latency is above its limit share of MTTR p50."""
    return [w for r in results if (w := latency_warning(r.name, r.latency)) is not None]


def comparison_json(results: list[PolicyResult]) -> dict[str, Any]:
    """``{"policies": {NAME: {...}}}``, in the order the policies ran."""
    return {"policies": {r.name: policy_json(r) for r in results}}


def _percent(value: float) -> str:
    return f"{value * 100:.3f}%"


def runs_text(succeeded: int, failed: int) -> str:
    """Job runs that succeeded of those that finished, and the share (``-``: none finished)."""
    done = succeeded + failed
    return f"{succeeded} / {done} ({succeeded / done:.2%})" if done else "-"


def _jobs(result: PolicyResult) -> str:
    runs = result.summary.job_runs
    if runs is None:
        return "-"
    return runs_text(runs.get("succeeded", 0), runs.get("failed", 0))


def table(results: list[PolicyResult], *, title: str) -> Table:
    """The comparison table: one row per policy (with ``--chaos``: its violations too).

    ``latency``: the simulated time the system's real latency added per incident
    (p50) and its share of MTTR p50, ``!`` above the limit (``whatif.latency``).
    """
    grid = Table(title=title, title_justify="left")
    chaos = any(r.chaos is not None for r in results)
    for header in (
        "policy",
        "avail.",
        "working",
        "replaced",
        "reboots",
        "resets",
        "escal.",
        "MTTR p50",
        "MTTR p95",
        "latency",
        "GPU-h lost",
        "jobs ok/done",
        "breaker",
        "max repl.",
        "factor",
        *(("chaos viol.",) if chaos else ()),
    ):
        grid.add_column(header, justify="left" if header == "policy" else "right")
    for r in results:
        s = r.summary
        grid.add_row(
            r.name,
            _percent(s.availability),
            _percent(s.availability_working) if s.availability_working is not None else "-",
            str(r.nodes_replaced),
            str(s.reboots),
            str(s.rung_attempts.get("gpu_reset", 0)),
            str(r.escalations),
            *mttr_text(s),
            latency_text(r),
            f"{r.gpu_hours_lost:,.1f}",
            _jobs(r),
            str(s.breaker_trips),
            str(s.max_nodes_terminating),
            f"{r.clock.get('achieved_factor', 0):,.0f}/{r.clock.get('requested_factor', 0):,.0f}",
            *((chaos_cell(r.chaos),) if chaos else ()),
        )
    return grid


def admission_table(results: list[PolicyResult]) -> Table | None:
    """Burn-in figures per policy, when at least one policy has the admission gate on."""
    if all(r.summary.admission is None for r in results):
        return None
    grid = Table(title="Node admission (burn-in before work)", title_justify="left")
    for header in (
        "policy",
        "faulty: launch+reboot",
        "admitted",
        "DOA",
        "burn-in failed",
        "wait p50/p95",
    ):
        grid.add_column(header, justify="left" if header == "policy" else "right")
    for r in results:
        a = r.summary.admission
        arrivals = (
            f"{r.faulty_arrivals.get('arrival', 0)}+{r.faulty_arrivals.get('reboot_arrival', 0)}"
        )
        if a is None:
            grid.add_row(r.name, arrivals, "gate off", "-", "-", "-")
            continue
        grid.add_row(
            r.name,
            arrivals,
            str(a.nodes_admitted),
            str(a.dead_on_arrival),
            str(a.burn_in_failures),
            f"{duration_text(a.ready_to_schedulable_p50_s)}/"
            f"{duration_text(a.ready_to_schedulable_p95_s)}",
        )
    return grid


def capacity_cells(result: PolicyResult) -> tuple[str, str, str, str]:
    """Launches, attempts without capacity, node-hours short, overlap instance-hours."""
    c = result.capacity
    if c is None:
        return ("-", "-", "-", "-")
    shortages = f"{c.insufficient_capacity:,}"
    if c.capacity_block_waits:
        shortages += f" (+{c.capacity_block_waits:,} block waits)"
    return (
        f"{c.launches:,}",
        shortages,
        f"{c.node_hours_short:,.1f}",
        f"{c.overlap_instance_hours:,.1f}",
    )


def capacity_table(results: list[PolicyResult]) -> Table:
    """Per policy: what its replacements cost in launches and overlap, and capacity short.

    ``node-h short``: node-hours launches waited for capacity; ``overlap inst-h``:
    instance-hours an old instance ran beside its replacement's (definitions:
    ``simulator.fleet.capacity.CapacityLedger``).
    """
    grid = Table(title="Capacity and what replacements cost", title_justify="left")
    for header in ("policy", "launches", "no capacity", "node-h short", "overlap inst-h"):
        grid.add_column(header, justify="left" if header == "policy" else "right")
    for r in results:
        grid.add_row(r.name, *capacity_cells(r))
    return grid
