"""``remediate compare --chaos``: the demo's chaos (``demo.chaos``) in each policy's run.

Each policy's run gets a :class:`~demo.chaos.session.ChaosSession` of its own,
planned from ``--seed`` on the fleet's simulated clock, so every policy sees the
same faults at the same simulated times (however fast its run goes in real
time). Not injected: ``server_restart`` (the policies share one Temporal server,
and run side by side) and ``receiver_kill`` (a comparison's lanes run no alert
receiver: the watcher is their only trigger). After the run the session's
invariant checker reads the fleet's ground truth and the workflows' histories;
its report is the policy's ``chaos`` (the demo's shape). Any violation makes the
command exit :data:`CHAOS_VIOLATED`, naming the policy and the incident.
"""

from __future__ import annotations

import html
from datetime import timedelta
from typing import TYPE_CHECKING

from demo.chaos.session import ChaosReport, ChaosSession
from demo.run import CHAOS_VIOLATED
from demo.summary import duration_text
from whatif.options import CompareOptions

if TYPE_CHECKING:
    from demo.stack import DemoStack
    from whatif.runner import PolicyResult

__all__ = ["CHAOS_VIOLATED", "chaos_cell", "chaos_session", "html_section", "render", "violations"]


def chaos_session(
    stack: DemoStack, options: CompareOptions, duration: timedelta
) -> ChaosSession | None:
    """The chaos for one policy's stack (not started yet); None without ``--chaos``."""
    if not options.chaos:
        return None
    kinds, per_kind = options.chaos_plan
    sim_seconds = duration.total_seconds()
    return ChaosSession(
        stack,
        kinds=kinds,
        per_kind=per_kind,
        seed=options.seed,
        real_seconds=sim_seconds / options.time_factor,
        alerts=False,
        sim_seconds=sim_seconds,
    )


def violations(results: list[PolicyResult]) -> list[str]:
    """Every broken invariant, as ``<policy>: <invariant>: <what, naming the incident>``."""
    return [
        f"{r.name}: {violation}"
        for r in results
        if r.chaos is not None
        for violation in r.chaos.violations
    ]


def chaos_cell(report: ChaosReport | None) -> str:
    """The table's cell: violations, and the faults they were found under."""
    if report is None:
        return "-"
    faults = sum(report.faults_injected.values())
    return f"{len(report.violations)} ({faults} faults)"


def html_section(results: list[PolicyResult]) -> str:
    """The report's chaos section (empty without ``--chaos``)."""
    chaotic = [r for r in results if r.chaos is not None]
    if not chaotic:
        return ""
    kinds = sorted({k for r in chaotic if r.chaos for k in r.chaos.faults_injected})
    head = "".join(f"<th>{html.escape(h)}</th>" for h in ("policy", *kinds, "violations"))
    rows = []
    details = []
    for r in chaotic:
        report = r.chaos
        assert report is not None
        cells = [html.escape(r.name)]
        cells += [str(report.faults_injected.get(k, 0)) for k in kinds]
        cells.append(str(len(report.violations)))
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
        items = "".join(
            f"<li>{'ok' if not view.violations else '<b>FAIL</b>'} {html.escape(name)}: "
            f"{html.escape(view.checked)}"
            + "".join(f"<br>- {html.escape(v)}" for v in view.violations)
            + "</li>"
            for name, view in report.invariants.items()
        )
        faults = html.escape(
            "; ".join(f"{e.kind} at {duration_text(e.sim_s)}" for e in report.faults) or "none"
        )
        details.append(
            f"<h3>{html.escape(r.name)}</h3><p><small>Faults (simulated time): {faults}"
            f"</small></p><ul>{items}</ul>"
        )
    return (
        "<h2>Chaos: the system's own parts killed during each run</h2>"
        "<p>Each policy's run had the same seeded chaos plan at the same simulated times: "
        "the worker SIGKILLed and restarted, the watcher crashed and started afresh, "
        "Kubernetes API 429/500/410/latency bursts, EC2 and SSM throttling (as "
        "<code>remediate demo --chaos</code>). Not the Temporal server restart: the "
        "policies share one server, side by side; nor the alert receiver: a comparison "
        "runs none. Then the invariants were checked against the simulator's ground truth "
        "and the workflows' histories; every violation must be absent.</p>"
        f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
        + "".join(details)
    )


def render(result: PolicyResult) -> str:
    """A policy's chaos for the terminal: what it survived, then each broken invariant."""
    report = result.chaos
    if report is None:
        return ""
    injected = ", ".join(f"{k} {v}" for k, v in report.faults_injected.items()) or "none"
    lines = [
        f"Chaos, {result.name}: {sum(report.faults_injected.values())} fault(s) ({injected}); "
        f"{len(report.invariants) - sum(1 for v in report.invariants.values() if v.violations)}"
        f"/{len(report.invariants)} invariants held"
    ]
    lines += [f"  FAIL {v}" for v in report.violations]
    return "\n".join(lines)
