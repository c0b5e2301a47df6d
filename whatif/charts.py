"""The report's charts as compact inline SVG (matplotlib, no JavaScript).

Text stays text (``svg.fonttype: none``) so a chart is a few kilobytes of
paths and labels; the page embeds them as they are and opens offline. Why
matplotlib and not plotly: docs/adr/009-report-charts-as-matplotlib-svg.md.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")  # no display; must precede pyplot

import matplotlib.pyplot as plt

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from whatif.runner import PolicyResult

STYLE = {
    "svg.fonttype": "none",  # labels as <text>, not glyph paths
    "svg.hashsalt": "gpu-remediation",  # stable ids: the same run gives the same file
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
}
JOB_OUTCOMES = (
    ("succeeded", "succeeded"),
    ("failed_by_fault", "failed by a fault"),
    ("failed_by_eviction", "failed by a drain"),
)


def svg(fig: Figure) -> str:
    """The figure as inline SVG text (closed afterwards)."""
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    text = buffer.getvalue()
    # Drop the XML prolog and DOCTYPE: the SVG is embedded in HTML.
    return text[text.index("<svg") :]


def _steps(results: list[PolicyResult], title: str, field: str) -> str:
    fig, ax = plt.subplots(figsize=(8, 3.2))
    for r in results:
        xs = [s.sim_hours for s in r.samples]
        ys = [getattr(s, field) for s in r.samples]
        ax.step(xs, ys, where="post", label=r.name, linewidth=1.2)
    ax.set_title(title)
    ax.set_xlabel("simulated hours")
    ax.set_ylabel("nodes")
    ax.legend(frameon=False, fontsize=8)
    return svg(fig)


def _bars(names: list[str], values: list[float], title: str, unit: str) -> str:
    fig, ax = plt.subplots(figsize=(8, 2.6))
    bars = ax.bar(names, values, color="#4c72b0")
    ax.bar_label(bars, labels=[f"{v:,.1f}" for v in values], fontsize=8)
    ax.set_title(title)
    ax.set_ylabel(unit)
    return svg(fig)


def _jobs(results: list[PolicyResult]) -> str:
    fig, ax = plt.subplots(figsize=(8, 2.6))
    names = [r.name for r in results]
    bottom = [0.0] * len(results)
    for key, label in JOB_OUTCOMES:
        values = [float((r.summary.job_runs or {}).get(key, 0)) for r in results]
        ax.bar(names, values, bottom=bottom, label=label)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.set_title("Training job runs")
    ax.set_ylabel("runs")
    ax.legend(frameon=False, fontsize=8)
    return svg(fig)


def charts(results: list[PolicyResult]) -> list[str]:
    """Healthy nodes over time, replacements over time, GPU-hours lost, job runs (SVG)."""
    with plt.rc_context(STYLE):  # type: ignore[arg-type]
        return [
            _steps(results, "Healthy, schedulable nodes over time", "available_nodes"),
            _steps(results, "Nodes replaced (remediation and RMA), cumulative", "nodes_replaced"),
            _bars(
                [r.name for r in results],
                [r.gpu_hours_lost for r in results],
                "GPU-hours lost",
                "GPU-hours",
            ),
            _jobs(results),
        ]
