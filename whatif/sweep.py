"""``remediate compare --sweep NAME=V1,V2,...``: the whole comparison at each value of one input.

One table at the shipped defaults answers one fleet's question. A user whose GPU nodes take
20 minutes to come up, or whose faults come ten times as often, wants to know where a
policy's lead begins or ends (issue 36). A sweep runs the comparison (every policy, each on
its own fresh fleet) once per value, with the same seed: the same fault timeline at every
value unless the value changes the faults themselves (the fault multiplier does; the
timeline digest of each value is in the output). It draws each policy's availability,
GPU-hours lost and job success against the value.

What may be swept is :data:`AXES`: inputs of the comparison that a user's own numbers
replace. Each value is checked as the option itself would be, before anything runs.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from rich.table import Table

from demo.summary import duration_text
from whatif.options import CompareError, CompareOptions, compare_fleet, options_from

if TYPE_CHECKING:
    from rich.console import Console
    from temporalio.client import Client

    from whatif.runner import PolicyResult

MAX_VALUES = 8
"""Values one sweep may take: each is a whole comparison."""


@dataclass(frozen=True)
class SweepAxis:
    """One input a sweep may vary: the option it sets and how it is drawn."""

    field: str
    """The :class:`~whatif.options.CompareOptions` field."""
    label: str
    """The charts' x axis."""
    x: Callable[[Any], float]
    """Where a validated value falls on that axis."""


def _minutes(value: timedelta) -> float:
    return value.total_seconds() / 60


AXES: dict[str, SweepAxis] = {
    "node-launch": SweepAxis("node_launch", "node launch to Ready (minutes)", _minutes),
    "fault-multiplier": SweepAxis("fault_multiplier", "fault rate multiplier", float),
    "job-nodes": SweepAxis("job_nodes", "nodes per training job", float),
    "new-node-fault-probability": SweepAxis(
        "new_node_fault_probability", "chance a launched node is faulty", float
    ),
    "reboot-fault-probability": SweepAxis(
        "reboot_fault_probability", "chance a rebooted node is faulty", float
    ),
    "capacity-shortage": SweepAxis(
        "capacity_shortage", "chance a launch attempt finds no capacity", float
    ),
    "lemon-share": SweepAxis("lemon_share", "share of hosts that are lemons", float),
    "slow-fault-multiplier": SweepAxis(
        "slow_fault_multiplier", "slow faults, times the mix's rate", float
    ),
}


@dataclass(frozen=True)
class Sweep:
    """A parsed ``--sweep``: the axis, its values as given, and the options of each."""

    name: str
    axis: SweepAxis
    values: tuple[str, ...]
    options: tuple[CompareOptions, ...]

    @property
    def xs(self) -> list[float]:
        """Each value on the charts' axis."""
        return [self.axis.x(getattr(o, self.axis.field)) for o in self.options]


def parse_sweep(text: str, base: CompareOptions) -> Sweep:
    """Read ``NAME=V1,V2,...`` against the comparison's other options.

    Args:
        text: The ``--sweep`` value.
        base: The comparison's options; the swept field is replaced at each value.

    Returns:
        The sweep, one options object per value, in the order given.

    Raises:
        CompareError: Naming what is wrong: an unknown name (listing the known ones),
            fewer than two or more than :data:`MAX_VALUES` values, a value the option
            refuses (with its reason), a value given twice, or an option a sweep
            cannot run with.
    """
    name, sep, rest = text.partition("=")
    name = name.strip()
    if not sep:
        raise CompareError(f"--sweep: expected NAME=V1,V2,... (got {text!r})")
    axis = AXES.get(name)
    if axis is None:
        raise CompareError(f"--sweep: unknown name {name!r}; one of {', '.join(AXES)}")
    values = tuple(v.strip() for v in rest.split(","))
    if any(not v for v in values) or len(values) < 2:
        raise CompareError(f"--sweep {name}: give at least two values, comma-separated")
    if len(values) > MAX_VALUES:
        raise CompareError(
            f"--sweep {name}: at most {MAX_VALUES} values (each runs the whole comparison)"
        )
    if base.chaos:
        raise CompareError("--sweep: not with --chaos (each value would need its own verdict)")
    fields = base.model_dump()
    # Each value's comparison writes no report of its own: the sweep writes one.
    fields.update(report=None, json_output=False)
    options: list[CompareOptions] = []
    for value in values:
        try:
            options.append(options_from(**{**fields, axis.field: value}))
        except CompareError as err:
            raise CompareError(f"--sweep {name}={value}: {err}") from err
    for value, each in zip(values, options, strict=True):
        try:
            compare_fleet(each)  # its fleet, mix and model files, before anything runs
        except CompareError as err:
            raise CompareError(f"--sweep {name}={value}: {err}") from err
    xs = [axis.x(getattr(o, axis.field)) for o in options]
    repeated = sorted({v for v, x in zip(values, xs, strict=True) if xs.count(x) > 1})
    if repeated:
        raise CompareError(f"--sweep {name}: each value once (repeated: {', '.join(repeated)})")
    return Sweep(name, axis, values, tuple(options))


@dataclass(frozen=True)
class SweepPoint:
    """The comparison at one value."""

    value: str
    x: float
    timeline: str
    """The fault timeline's digest at this value."""
    results: list[PolicyResult]


async def run_sweep(
    sweep: Sweep,
    *,
    ui: Console,
    client: Client | None = None,
    on_point: Callable[[SweepPoint], None] | None = None,
) -> list[SweepPoint]:
    """Run the comparison at each value, one value after another.

    Args:
        sweep: What to run.
        ui: Where each comparison's notes go.
        client: A client of a running server (tests); None: each comparison starts its own.
        on_point: Called after each value's comparison.

    Raises:
        CompareError: A value's comparison refused its input.
    """
    from whatif.runner import CompareRun

    points: list[SweepPoint] = []
    for value, x, options in zip(sweep.values, sweep.xs, sweep.options, strict=True):
        compare = CompareRun(options, ui=ui)
        results = await compare.run(client)
        point = SweepPoint(value, x, compare.timeline.digest, results)
        points.append(point)
        if on_point is not None:
            on_point(point)
    return points


def job_success(result: PolicyResult) -> float | None:
    """Finished training-job runs that succeeded, as a fraction (None: none finished)."""
    runs = result.summary.job_runs
    if runs is None:
        return None
    succeeded, failed = runs.get("succeeded", 0), runs.get("failed", 0)
    return succeeded / (succeeded + failed) if succeeded + failed else None


METRICS: tuple[tuple[str, str, Callable[[PolicyResult], float | None]], ...] = (
    ("availability", "availability (%)", lambda r: r.summary.availability * 100),
    ("gpu_hours_lost", "GPU-hours lost", lambda r: r.gpu_hours_lost),
    (
        "job_success",
        "job runs that succeeded (%)",
        lambda r: None if (s := job_success(r)) is None else s * 100,
    ),
)
"""What a sweep draws per policy: key, label, and the value of one policy's result."""


def policy_names(points: Sequence[SweepPoint]) -> list[str]:
    """The policies, in the order they ran (the same at every value)."""
    return [r.name for r in points[0].results] if points else []


def series(points: Sequence[SweepPoint], metric: str) -> dict[str, list[float | None]]:
    """Each policy's value of ``metric`` (a :data:`METRICS` key) at each point."""
    read = {key: fn for key, _, fn in METRICS}[metric]
    by_name: dict[str, list[float | None]] = {name: [] for name in policy_names(points)}
    for point in points:
        for result in point.results:
            by_name[result.name].append(read(result))
    return by_name


def sweep_json(sweep: Sweep, points: Sequence[SweepPoint]) -> dict[str, Any]:
    """``{"sweep": {...}, "points": [{"value", "x", "timeline", "policies"}]}``."""
    from whatif.results import comparison_json

    return {
        "sweep": {"name": sweep.name, "field": sweep.axis.field, "values": list(sweep.values)},
        "points": [
            {"value": p.value, "x": p.x, "timeline": p.timeline, **comparison_json(p.results)}
            for p in points
        ],
    }


def _cell(metric: str, value: float | None) -> str:
    if value is None:
        return "-"
    if metric == "gpu_hours_lost":
        return f"{value:,.1f}"
    return f"{value:.3f}%" if metric == "availability" else f"{value:.1f}%"


def tables(sweep: Sweep, points: Sequence[SweepPoint]) -> list[Table]:
    """One table per metric: a row per policy, a column per value."""
    out = []
    for metric, label, _ in METRICS:
        table = Table(title=f"{label} by {sweep.name}")
        table.add_column("policy")
        for point in points:
            table.add_column(point.value, justify="right")
        for name, values in series(points, metric).items():
            table.add_row(name, *(_cell(metric, v) for v in values))
        out.append(table)
    return out


def charts(sweep: Sweep, points: Sequence[SweepPoint]) -> list[str]:
    """Each metric against the value, a line per policy (inline SVG)."""
    import matplotlib.pyplot as plt

    from whatif.charts import STYLE, svg

    xs = [p.x for p in points]
    out = []
    with plt.rc_context(STYLE):  # type: ignore[arg-type]
        for metric, label, _ in METRICS:
            fig, ax = plt.subplots(figsize=(8, 3.2))
            lines = 0
            for name, values in series(points, metric).items():
                drawn = [(x, v) for x, v in zip(xs, values, strict=True) if v is not None]
                if drawn:
                    ax.plot(*zip(*drawn, strict=True), marker="o", linewidth=1.2, label=name)
                    lines += 1
            ax.set_title(f"{label} by {sweep.name}")
            ax.set_xlabel(sweep.axis.label)
            ax.set_ylabel(label)
            if lines:
                ax.legend(frameon=False, fontsize=8)
            else:  # e.g. job success without workloads: say so rather than draw nothing
                ax.text(0.5, 0.5, "no values", ha="center", va="center", transform=ax.transAxes)
            out.append(svg(fig))
    return out


def render(sweep: Sweep, points: Sequence[SweepPoint]) -> str:
    """The sweep as one self-contained HTML page: what ran, the charts, the tables."""
    from whatif.report import AVAILABILITY_NOTE, DOES_NOT_MODEL, DOES_NOT_MODEL_CLOCK_FREE

    base = sweep.options[0]
    clock = (
        f"clock-free, steps of {base.step:g} s"
        if base.clock == "server"
        else f"time factor {base.time_factor:g}"
    )
    timelines = ", ".join(f"{p.value}: <code>{p.timeline}</code>" for p in points)
    facts = [
        f"Swept: <code>{html.escape(sweep.name)}</code> over "
        f"{html.escape(', '.join(sweep.values))}; every other input as given.",
        f"Fleet: {base.nodes} nodes, pools {html.escape(base.pools)}; faults: mix "
        f"{html.escape(base.fault_mix or 'none')} x {base.fault_multiplier:g} (unless swept); "
        f"seed {base.seed}; {html.escape(duration_text(_duration_s(base)))} per policy ({clock}).",
        "Fault timeline per value (the same digest means the same faults at the same times on "
        f"the same node slots): {timelines}.",
    ]
    figures = "".join(f"<figure>{svg}</figure>" for svg in charts(sweep, points))
    body = "".join(_html_table(sweep, points, metric, label) for metric, label, _ in METRICS)
    not_models = DOES_NOT_MODEL_CLOCK_FREE if base.clock == "server" else DOES_NOT_MODEL
    generated = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>gpu-remediation what-if sweep: {html.escape(sweep.name)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 1100px; }}
table {{ border-collapse: collapse; font-size: 0.9rem; margin-bottom: 1rem; }}
th, td {{ border: 1px solid #ccc; padding: 0.3rem 0.5rem; text-align: right; }}
th:first-child, td:first-child {{ text-align: left; }}
small {{ color: #666; }}
</style></head><body>
<h1>What-if sweep: {html.escape(sweep.name)}</h1>
<p>Generated {generated} by <code>remediate compare --sweep</code>: the whole comparison,
every policy through the real system on its own fresh simulated fleet, at each value.</p>
<ul>{"".join(f"<li>{f}</li>" for f in facts)}</ul>
{figures}
{body}
<p><small>{html.escape(AVAILABILITY_NOTE)}</small></p>
<h2>What the simulator does not model</h2>
<ul>{"".join(f"<li>{html.escape(m)}</li>" for m in not_models)}</ul>
</body></html>
"""


def _duration_s(options: CompareOptions) -> float:
    return compare_fleet(options)[1].total_seconds()


def _html_table(sweep: Sweep, points: Sequence[SweepPoint], metric: str, label: str) -> str:
    head = "".join(f"<th>{html.escape(p.value)}</th>" for p in points)
    rows = "".join(
        f"<tr><td>{html.escape(name)}</td>"
        + "".join(f"<td>{_cell(metric, v)}</td>" for v in values)
        + "</tr>"
        for name, values in series(points, metric).items()
    )
    return (
        f"<h2>{html.escape(label)} by {html.escape(sweep.name)}</h2>"
        f"<table><tr><th>policy</th>{head}</tr>{rows}</table>"
    )
