"""The comparison as one self-contained HTML file that opens offline.

Charts (matplotlib SVG inline, no JavaScript), the table, the fault timeline, the time
factor, and what the simulator models and what it does not. Nothing is fetched.
"""

from __future__ import annotations

import html
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from demo.summary import duration_text
from simulator.fleet.assumptions import load_model
from simulator.fleet.operator_config import LogNormal
from whatif.chaos import html_section as chaos_section
from whatif.charts import charts as svg_charts
from whatif.factor_check import FactorCheck, html_section
from whatif.latency import KINDS, SHARE_LIMIT
from whatif.results import (
    capacity_cells,
    latency_text,
    latency_warnings,
    mttr_text,
    policy_json,
    runs_text,
)

if TYPE_CHECKING:
    from simulator.fleet import FleetConfig
    from whatif.options import CompareOptions
    from whatif.runner import CompareRun, PolicyResult

MODELS = (
    "GPU nodes in Karpenter node pools behind a Kubernetes API emulator and moto (EC2, SSM), "
    "reached by the production activities, worker, workflows and watcher unchanged.",
    "The fault kinds of simulator/README.md with what each shows (Xid, DCGM, EFA, Ready) and "
    "what clears it (GPU reset, reboot, replacement, nothing); a Poisson fault mix per kind "
    "(default: Meta's Llama 3 405B interruption table at its published rate) or a scenario.",
    "Durations of resets, reboots, diagnostics, drains, instance termination and node launch; "
    "the Node Problem Detector's cycle; the node controller's Ready grace.",
    "Capacity (simulator/fleet/capacity.py): launch-to-Ready lognormal around the node launch "
    "time; a launch attempt that finds no capacity (InsufficientInstanceCapacity) tried again "
    "after Karpenter's 3-minute unavailable-offerings cache, the pool short meanwhile; "
    "optionally, Capacity Block pools whose replacement waits for the old instance's slot. "
    "The cost of replacements as launches and overlap instance-hours.",
    "Gang-scheduled training jobs that fail when a node of theirs breaks or is drained and are "
    "rescheduled after a delay.",
    "A human operator (simulator/fleet/operator.py) answering needs-human tickets after "
    "seeded lognormal response and repair times (assumed defaults: median 30 min and 1 h, two "
    "people, each busy only for the repair): fixable faults repaired, hardware faults sent for "
    "RMA.",
)

AVAILABILITY_NOTE = (
    "Availability: node-seconds healthy (no fault that stops work) and schedulable (Ready, "
    "not cordoned, not tainted) over the pools' capacity; the reference's GPU-node "
    "availability above 99.95% is read as this. Capacity doing work: node-seconds "
    "available or running a training job's pod; a quarantined node that finishes its job "
    "first, or a slow node, is not available but still works."
)

DOES_NOT_MODEL = (
    "Prices (instances, RMA, people's time): replacements are costed in launches and overlap "
    "instance-hours, not money. Capacity shortages only as the capacity model states them "
    "(its default: none, every launch finds an instance); no other instance type or zone to "
    "fall back to, and no registration timeout (Karpenter replaces a NodeClaim not registered "
    "within 15 minutes; a drawn launch time may run longer).",
    "Multiple availability zones, NVLink domains or shared-fate groups; correlated failures "
    "beyond what a scenario scripts.",
    "Karpenter's bin-packing, consolidation and drift; NPD heartbeats; pods restarting after a "
    "reboot.",
    "The EKS node monitoring agent's per-Xid table exactly (the baselines map it by fault "
    "class, as their headers say); checkpoint/restart cost of a job beyond its restart delay.",
    "Real latency: Temporal and the APIs run in real time while the fleet runs time_factor "
    "times faster, so their latency is scaled up with it: each real second is time_factor "
    "simulated seconds of MTTR and unavailability (measured per policy in the section on "
    "the system's own latency; mttr_real_* in the JSON is the real duration). Policy "
    "windows are workflow timers scaled exactly, and polls come every 15 simulated seconds "
    "at any factor. MTTR here is measured on the simulator's "
    "clock (mttr_clock_* in the JSON), so time the clock was held does not count.",
)


DOES_NOT_MODEL_CLOCK_FREE = (
    *DOES_NOT_MODEL[:-1],
    "Polling and reaction delays below the step: the fleet's clock moves in steps of at most "
    "--step simulated seconds (15 by default), and the activities look at the world every 15 "
    "simulated seconds; an event between two steps takes effect at the later one.",
)


def _capacity_fact(options: CompareOptions, config: FleetConfig) -> str:
    """The capacity model the run assumed, in one sentence (escaped)."""
    model = config.capacity
    launch = duration_text(config.durations.node_launch.total_seconds())
    spread = (
        f"lognormal with median {launch}, sigma {model.launch_sigma:g}"
        if model.launch_sigma
        else f"always {launch}"
    )
    by = " (--capacity-shortage)" if options.capacity_shortage is not None else ""
    retry = duration_text(model.capacity_retry.total_seconds())
    block = (
        "Capacity Block pools: a replacement launches "
        f"{duration_text(model.capacity_block_relaunch.total_seconds())} after the instance it "
        "replaces was terminated"
        if model.capacity_block_relaunch is not None
        else "no Capacity Block: a replacement launches at once"
    )
    return html.escape(
        f"Capacity: a launch takes {spread} to Ready (the spread is assumed: no public "
        f"distribution); an attempt finds no capacity with probability "
        f"{model.insufficient_capacity_probability:g}{by} (assumed: no public rate), the next "
        f"attempt {retry} later (Karpenter's unavailable-offerings cache is 3 minutes); "
        f"{block}. Drawn per pool and NodeClaim number from the seed, so every policy meets "
        "the same capacity for the same launches."
    )


def _clock_free_fact(compare: CompareRun, results: list[PolicyResult]) -> str:
    """The clock paragraph of a clock-free run (ADR 018)."""
    steps = ", ".join(
        f"{r.name} {int(r.clock.get('steps', 0)):,} steps in {r.summary.wall_seconds:,.0f} s"
        for r in results
    )
    return (
        f"Simulated time per policy: {duration_text(compare.duration.total_seconds())}, "
        "clock-free (ADR 018): each policy ran on a Temporal time-skipping test server of its "
        "own, whose clock the fleet follows in steps of at most "
        f"{compare.options.step:g} simulated seconds. Policy durations are the policy's own "
        "(nothing is scaled); the server's time stands still while the system works, so its "
        "real latency counts at its real length, not times a factor. " + html.escape(steps) + "."
    )


def _table(results: list[PolicyResult]) -> str:
    headers = (
        "policy",
        "availability",
        "capacity doing work",
        "nodes replaced",
        "reboots",
        "resets",
        "escalations",
        "MTTR p50",
        "MTTR p95",
        "real latency added p50 (share of MTTR p50)",
        "GPU-hours lost",
        "job runs ok / done",
        "breaker trips",
        "most replacements at once",
        "operator",
    )
    rows = []
    for r in results:
        data = policy_json(r)
        runs = r.summary.job_runs or {}
        done = runs.get("succeeded", 0) + runs.get("failed", 0)
        cells = (
            f"{r.name}<br><small>{html.escape(r.source)}</small>",
            f"{r.summary.availability * 100:.3f}%",
            (
                f"{r.summary.availability_working * 100:.3f}%"
                if r.summary.availability_working is not None
                else "-"
            ),
            str(r.nodes_replaced),
            str(r.summary.reboots),
            str(data["resets"]),
            str(r.escalations),
            *mttr_text(r.summary),
            html.escape(latency_text(r)),
            f"{r.gpu_hours_lost:,.1f}",
            f"{runs.get('succeeded', 0)} / {done}",
            str(r.summary.breaker_trips),
            str(r.summary.max_nodes_terminating),
            html.escape(", ".join(f"{k} {v}" for k, v in r.operator.items()) or "-"),
        )
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    head = "".join(f"<th>{h}</th>" for h in headers)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _jobs_section(results: list[PolicyResult]) -> str:
    """Job runs that succeeded per policy, by gang size, and the hangs behind failures."""
    jobs = [(r.name, r.summary.jobs) for r in results if r.summary.jobs is not None]
    if not jobs:
        return ""
    sizes = sorted({int(s) for _, j in jobs for s in j.runs_by_gang}, reverse=True)
    headers = (
        "policy",
        "job runs ok / done",
        *(f"{s}-node gangs" for s in sizes),
        "hangs: ended by the remediation / timed out",
        "GPU-hours hung",
        "ETTR",
    )
    rows = []
    for name, j in jobs:
        cells = [name, runs_text(j.runs_succeeded, j.runs_failed)]
        for size in sizes:
            counts = j.runs_by_gang.get(str(size), {})
            cells.append(runs_text(counts.get("succeeded", 0), counts.get("failed", 0)))
        cells += [
            f"{j.hangs}: {j.hangs_ended_by_remediation} / {j.hang_timeouts}",
            f"{j.gpu_hours_hung:,.1f}",
            "-" if j.ettr is None else f"{j.ettr:.4f}",
        ]
        rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    head = "".join(f"<th>{h}</th>" for h in headers)
    return (
        "<h2>Training jobs</h2>"
        "<p>Runs that succeeded of those that finished, in all and by gang size. A run fails "
        "once failures spend its retry budget; an eviction (DisruptionTarget, ignored by the "
        "job's podFailurePolicy) does not spend it. A fault that hangs a job fails it only when "
        "the collective's timeout ends the hang, unless the remediation ends it first (a "
        "drain's eviction spends no budget); the rest of the hangs another fault ended, or "
        "they still hung when the window closed. A hung job's loss is the fault's, whoever "
        "ended the hang.</p>"
        f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _capacity_section(results: list[PolicyResult]) -> str:
    """Launches, shortages and overlap per policy: what its replacements cost."""
    headers = (
        "policy",
        "nodes replaced",
        "launches",
        "launch attempts without capacity",
        "node-hours short",
        "overlap instance-hours",
    )
    rows = []
    for r in results:
        cells = (r.name, str(r.nodes_replaced), *capacity_cells(r))
        rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    head = "".join(f"<th>{h}</th>" for h in headers)
    return (
        "<h2>Capacity and what replacements cost</h2>"
        "<p>A launch is an instance Karpenter started whose node registered. "
        "<em>Node-hours short</em>: for every NodeClaim, the time from its first launch attempt "
        "that found no capacity (in a Capacity Block, from its creation while the slot it needs "
        "was taken) until an attempt found capacity, or it was deleted, or the window ended; "
        "the launch time after it is not counted. <em>Overlap instance-hours</em>: for every "
        "node replaced, the time its instance still ran after its replacement's instance had "
        "started launching, until Karpenter terminated it after the drain "
        "(<code>simulator/fleet/capacity.py</code>).</p>"
        f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _latency_section(results: list[PolicyResult]) -> str:
    """What the system's own real latency added to MTTR, per policy, and the run's warnings."""
    headers = (
        "policy",
        "incidents read / resolved",
        "real latency p50 / p95 / mean",
        "simulated time added p50 / p95 (simulator's clock)",
        "p50 x requested factor",
        "mean real s: workflow tasks, dispatch, calls, timer lateness",
        "MTTR p50",
        "share of MTTR p50",
    )
    rows = []
    for r in results:
        m = r.latency
        if m is None:
            cells: tuple[str, ...] = (r.name, *("-" for _ in headers[1:]))
        else:
            kinds = m.by_kind_mean_real_s
            cells = (
                r.name,
                f"{m.incidents_measured} / {m.incidents_resolved}",
                " / ".join(_seconds(v) for v in (m.real_p50_s, m.real_p95_s, m.real_mean_s)),
                f"{duration_text(m.added_sim_p50_s)} / {duration_text(m.added_sim_p95_s)}",
                duration_text(m.added_at_factor_p50_s),
                ", ".join(f"{kinds.get(k, 0.0):.3f}" for k in KINDS),
                duration_text(m.mttr_clock_p50_s),
                "-"
                if m.share_of_mttr_p50 is None
                else f"{m.share_of_mttr_p50:.2%}" + (" (over the limit)" if m.over_limit else ""),
            )
        rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    warnings = "".join(
        f"<p><strong>{html.escape(w)}</strong></p>" for w in latency_warnings(results)
    )
    head = "".join(f"<th>{h}</th>" for h in headers)
    return (
        "<h2>What the system's own latency added</h2>"
        "<p>The fleet runs at the time factor, Temporal and the APIs in real time, so each real "
        "second of their round trips is time-factor simulated seconds of MTTR. Measured per "
        "resolved incident (those MTTR counts, over the same span) from its Temporal history: "
        "workflow tasks (scheduled to completed), activity dispatch (scheduled to started, first "
        "attempts), the executions of activities that do not wait for the world (Kubernetes, "
        "EC2/SSM and Temporal calls) and timers firing late; their union, mapped through the "
        "simulator's clock, is the simulated time added. A lower bound: API calls and polls "
        "inside the activities that wait for the world (reboot, reset, diagnostic, drain, "
        f"replacement) and signal round trips are not in it. A run warns above "
        f"{SHARE_LIMIT:.0%} of a policy's MTTR p50 (<code>whatif/latency.py</code>).</p>"
        f"{warnings}"
        f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _figure(value: object) -> str:
    """One model figure as the report shows it."""
    if value is None:
        return "none"
    if isinstance(value, timedelta):
        return duration_text(value.total_seconds())
    if isinstance(value, LogNormal):
        median = duration_text(value.median.total_seconds())
        return f"lognormal, median {median}, sigma {value.sigma:g}"
    if isinstance(value, frozenset | set):
        return ", ".join(sorted(str(v) for v in value))
    return str(value)


def _model_section(compare: CompareRun) -> str:
    """Every duration, capacity, workload and operator figure the run assumed, and who set it."""
    options, config = compare.options, compare.fleet_config
    from_file = load_model(options.model).changes() if options.model is not None else {}
    # The figures a command-line option set (it wins over the model file), by option.
    from_options: dict[str, str] = {}
    if options.job_nodes is not None:
        from_options["workloads.job_nodes"] = "--job-nodes"
    else:  # the comparison's own defaults, unless the model file says otherwise
        for name in ("gangs", "backoff_limit"):
            if name not in from_file.get("workloads", {}):
                from_options[f"workloads.{name}"] = "the comparison (FLEET_GANGS, docs/what-if.md)"
    if options.node_launch is not None:
        from_options["durations.node_launch"] = "--node-launch"
    if options.capacity_shortage is not None:
        from_options["capacity.insufficient_capacity_probability"] = "--capacity-shortage"
    rows = []
    for section, model in (
        ("durations", config.durations),
        ("capacity", config.capacity),
        ("workloads", config.workloads),
        ("operator", config.operator),
    ):
        if model is None:
            continue
        for name, field in type(model).model_fields.items():
            key = f"{section}.{name}"
            if key in from_options:
                source = from_options[key]
            elif name in from_file.get(section, {}):
                source = "--model"
            else:
                source = "default"
            rows.append(
                f"<tr><td>{key}</td><td>{html.escape(_figure(getattr(model, name)))}</td>"
                f"<td>{source}</td><td>{html.escape(field.description or '')}</td></tr>"
            )
    named = f" (model file {html.escape(str(options.model))})" if options.model else ""
    return (
        f"<h2>The model's figures</h2><p>What the simulated fleet assumed{named}. A default "
        "is the simulator's: its source, or that it is an assumption, is given where it is "
        "defined (simulator/fleet/clock.py, capacity.py, config.py, operator.py); "
        "<code>--model FILE</code> replaces any of them.</p>"
        "<table><tr><th>figure</th><th>value</th><th>set by</th><th>what it is</th></tr>"
        + "".join(rows)
        + "</table>"
    )


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} s"


def _admission_table(results: list[PolicyResult]) -> str:
    """Burn-in figures of the policies with the admission gate on (empty when none has it)."""
    gated = [r for r in results if r.summary.admission is not None]
    if not gated:
        return ""
    headers = (
        "policy",
        "faulty arrivals (launch / reboot)",
        "nodes admitted",
        "dead on arrival",
        "burn-in failures",
        "Ready to schedulable p50 / p95",
    )
    rows = []
    for r in results:
        a = r.summary.admission
        arrivals = (
            f"{r.faulty_arrivals.get('arrival', 0)} / {r.faulty_arrivals.get('reboot_arrival', 0)}"
        )
        cells = (
            (r.name, arrivals, "gate off", "-", "-", "-")
            if a is None
            else (
                r.name,
                arrivals,
                str(a.nodes_admitted),
                str(a.dead_on_arrival),
                str(a.burn_in_failures),
                f"{duration_text(a.ready_to_schedulable_p50_s)} / "
                f"{duration_text(a.ready_to_schedulable_p95_s)}",
            )
        )
        rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    head = "".join(f"<th>{h}</th>" for h in headers)
    return (
        "<h2>Node admission (burn-in before work)</h2>"
        f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def render(
    compare: CompareRun,
    results: list[PolicyResult],
    check: FactorCheck | None = None,
    refusal: str | None = None,
) -> str:
    """The whole report as one HTML document (with the factor check's verdict or refusal)."""
    options, config, tl = compare.options, compare.fleet_config, compare.timeline
    pools = ", ".join(
        f"{p.name} {p.nodes}{' (no GPU reset)' if not p.reset_supported else ''}"
        for p in config.pools
    )
    mix = options.fault_mix or "none"
    charts = "".join(f"<figure>{svg}</figure>" for svg in svg_charts(results))
    skipped = ", ".join(f"{r.name} {r.faults_skipped}" for r in results)
    facts = [
        f"Fleet: {html.escape(pools)} ({config.total_nodes} nodes); workloads "
        f"{'on' if config.workloads else 'off'}; human operator "
        f"{'on' if config.operator else 'off'}; a node Karpenter launches is Ready after "
        f"{duration_text(config.durations.node_launch.total_seconds())}"
        + (" (--node-launch)." if options.node_launch is not None else " (the default)."),
        f"Faults: mix {html.escape(mix)} x {options.fault_multiplier:g}"
        + (f", scenario {html.escape(str(options.scenario))}" if options.scenario else "")
        + f"; seed {options.seed}; {tl.planned} planned faults ("
        + html.escape(", ".join(f"{k} {v}" for k, v in tl.by_kind.items()) or "none")
        + f"); timeline digest <code>{tl.digest}</code>, the same for every policy. Planned "
        f"faults whose node was rebooting or being replaced at that moment could not happen "
        f"(skipped: {html.escape(skipped)}).",
        _capacity_fact(options, config),
        "Faulty arrivals (assumed: no public figure): a node Karpenter launches comes up "
        f"faulty with probability {options.new_node_fault_probability:g}, a node back from a "
        f"reboot with {options.reboot_fault_probability:g}; drawn per launch number and per "
        "node and reboot number from the seed, so every policy meets the same bad capacity "
        "for the same launches.",
        _clock_free_fact(compare, results)
        if compare.clock_free
        else f"Simulated time per policy: {duration_text(compare.duration.total_seconds())}; time "
        f"factor {options.time_factor:g} (1 real second = "
        f"{duration_text(options.time_factor)} simulated). Every policy duration is divided "
        "by the time factor (demo/policy.py), so outcomes should not depend on it beyond "
        "noise (see the check below). The simulator's clock is paced (ADR 013): it stands "
        "still while the simulator is more than 60 simulated s behind, so the factor "
        "achieved can be lower than the one requested; achieved per policy: "
        + html.escape(
            ", ".join(
                f"{r.name} {r.clock.get('achieved_factor', 0):,.0f} "
                f"(events late p95 <= {duration_text(float(r.clock.get('late_p95_s', 0)))})"
                for r in results
            )
        )
        + ".",
    ]
    models = "".join(f"<li>{html.escape(m)}</li>" for m in MODELS)
    not_models = "".join(
        f"<li>{html.escape(m)}</li>"
        for m in (DOES_NOT_MODEL_CLOCK_FREE if compare.clock_free else DOES_NOT_MODEL)
    )
    generated = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>gpu-remediation what-if comparison</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 1100px; }}
table {{ border-collapse: collapse; font-size: 0.9rem; }}
th, td {{ border: 1px solid #ccc; padding: 0.3rem 0.5rem; text-align: right; }}
th:first-child, td:first-child {{ text-align: left; }}
small {{ color: #666; }}
</style></head><body>
<h1>What-if comparison: the same faults under {len(results)} policies</h1>
<p>Generated {generated} by <code>remediate compare</code>. Each policy ran through the real
system (a Temporal {"time-skipping test server" if compare.clock_free else "dev server"},
worker, workflows, activities, node-condition watcher) against its own fresh simulated
fleet.</p>
<ul>{"".join(f"<li>{f}</li>" for f in facts)}</ul>
{_table(results)}
<p><small>{html.escape(AVAILABILITY_NOTE)}</small></p>
{_jobs_section(results)}
{_capacity_section(results)}
{_latency_section(results)}
{_admission_table(results)}
{chaos_section(results)}
{charts}
{html_section(check, refusal)}
{_model_section(compare)}
<h2>What the simulator models</h2><ul>{models}</ul>
<h2>What it does not model</h2><ul>{not_models}</ul>
</body></html>
"""


def write_report(
    path: Path,
    compare: CompareRun,
    results: list[PolicyResult],
    check: FactorCheck | None = None,
    refusal: str | None = None,
) -> None:
    """Write the report to ``path`` (with the time-factor check when one was run)."""
    path.write_text(render(compare, results, check, refusal), encoding="utf-8")
