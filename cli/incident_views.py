"""Rich renderings of incidents for ``remediate status``, ``run`` and the operator verbs.

Kept apart from the commands so ``cli/incidents.py`` reads as what each
command does; the JSON output is built from the same rows.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from temporalio.client import WorkflowExecution, WorkflowExecutionStatus

from cli.output import age, timestamp
from gpu_remediation import incident_summary
from gpu_remediation.incident_summary import summary_line
from gpu_remediation.jobs import describe_jobs
from gpu_remediation.models import Evidence, ManualEvidence
from gpu_remediation.search_attributes import SA_FAULT_CLASS, SA_NODE_POOL, SA_RUNG
from gpu_remediation.workflow_models import NodeRemediationState


def status_name(status: WorkflowExecutionStatus | None) -> str:
    """``running``, ``completed``, ``terminated``... (``unknown`` if absent)."""
    return status.name.lower() if status is not None else "unknown"


def incident_row(
    execution: WorkflowExecution, prefix: str, state: NodeRemediationState | BaseException
) -> dict[str, Any]:
    """One line of ``remediate status``: from the state query, else from visibility."""
    attributes = execution.typed_search_attributes
    row: dict[str, Any] = {
        "node": execution.id.removeprefix(prefix),
        "workflow_id": execution.id,
        "run_id": execution.run_id,
        "started_at": execution.start_time.isoformat(),
        "age_s": round((datetime.now(UTC) - execution.start_time).total_seconds()),
    }
    if isinstance(state, BaseException):
        pool, fault, rung = (
            attributes.get(SA_NODE_POOL),
            attributes.get(SA_FAULT_CLASS),
            attributes.get(SA_RUNG),
        )
        return row | {
            "summary": summary_line(row["node"], pool, fault, rung=rung),
            "pool": pool,
            "fault_class": fault,
            "rung": rung,
            "stage": None,
            "waiting_for": None,
            "paused": None,
            "dry_run": None,
            "jobs": None,
            "checkpoint": None,
            "error": str(state),
        }
    return row | {
        "summary": state_summary(state),
        "pool": state.node_pool,
        "fault_class": state.fault_class.value if state.fault_class else None,
        "rung": state.rung.value if state.rung else None,
        "stage": state.stage,
        "waiting_for": state.waiting_for,
        "paused": state.paused,
        "dry_run": state.dry_run,
        "jobs": [job.display for job in state.jobs],
        "checkpoint": state.checkpoint,
        "error": None,
    }


def state_summary(state: NodeRemediationState) -> str:
    """The incident in one line, in the words of its page in the Temporal UI."""
    return summary_line(
        state.node,
        state.node_pool,
        state.fault_class.value if state.fault_class else None,
        rung=state.rung.value if state.rung else None,
        outcome=state.outcome.value if state.outcome else None,
    )


def print_list(console: Console, listing: dict[str, Any]) -> None:
    """The table of open incidents."""
    rows = listing["incidents"]
    if not rows:
        console.print(f"No open incidents in cluster {listing['cluster']}.")
        return
    table = Table(title=f"Open incidents in cluster {listing['cluster']} ({len(rows)})")
    for column in ("node", "pool", "fault class", "rung", "stage", "age", "waiting for"):
        table.add_column(column, no_wrap=column != "waiting for")
    for row in rows:
        stage = row["stage"] or "?"
        if row["paused"]:
            stage += " [bold yellow](paused)[/]"
        if row["dry_run"]:
            stage += " [dim](dry run)[/]"
        waiting = row["waiting_for"] or "-"
        if row["error"]:
            waiting = f"[red]state unavailable: {row['error']}[/]"
        table.add_row(
            row["node"],
            row["pool"] or "-",
            row["fault_class"] or "-",
            row["rung"] or "-",
            stage,
            age(datetime.fromisoformat(row["started_at"])),
            waiting,
        )
    console.print(table)


def evidence_text(item: Evidence) -> str:
    """What one piece of evidence says, in a line (the UI's static details use the same words)."""
    text = escape(incident_summary.evidence_text(item))
    if isinstance(item, ManualEvidence) and item.force:
        text = text.replace("(forced)", "[bold red](forced)[/]", 1)
    return text


def print_incident(console: Console, shown: dict[str, Any]) -> None:
    """One incident: header, evidence, attempts and the decision log."""
    state: NodeRemediationState = shown["state"]
    flags = []
    if state.paused:
        flags.append("[bold yellow]PAUSED[/]")
    if state.dry_run:
        flags.append("dry run")
    if not shown["open"]:
        flags.append(f"[bold]{shown['status']}[/]")
    console.print(f"[bold]{escape(state_summary(state))}[/]  " + "  ".join(flags))
    if shown.get("opened_as"):
        console.print(f"opened as: {escape(shown['opened_as'])}")
    console.print(
        f"cluster {state.cluster}  workflow {shown['workflow_id']}  run {shown['run_id']}  "
        f"started {timestamp(state.started_at)} ({age(state.started_at)} ago)"
    )
    console.print(
        f"fault class [bold]{state.fault_class or '-'}[/]  rung [bold]{state.rung or '-'}[/]  "
        f"stage [bold]{state.stage}[/]  waiting for [bold]{state.waiting_for or '-'}[/]"
        + (f"  outcome [bold]{state.outcome}[/]" if state.outcome else "")
    )
    if state.jobs:
        console.print(
            f"jobs {describe_jobs(state.jobs)}"
            + (f"  checkpoint [bold]{state.checkpoint}[/]" if state.checkpoint else "")
        )
    evidence = Table(title="Evidence")
    for column in ("observed", "source", "what", "cleared"):
        evidence.add_column(column, no_wrap=column != "what")
    for item in state.evidence:
        evidence.add_row(
            timestamp(item.observed_at),
            item.source,
            evidence_text(item),
            "yes" if item.cleared else "",
        )
    console.print(evidence)
    if state.attempts:
        attempts = Table(title="Attempts")
        for column in ("rung", "started", "ended", "result"):
            attempts.add_column(column, no_wrap=column != "result")
        for attempt in state.attempts:
            attempts.add_row(
                attempt.rung.value,
                timestamp(attempt.started_at),
                timestamp(attempt.ended_at),
                attempt.result or ("running" if attempt.ended_at is None else "-"),
            )
        console.print(attempts)
    decisions = Table(title="Decision log")
    for column in ("at", "stage", "action", "reason"):
        decisions.add_column(column, no_wrap=column in ("at", "stage"))
    for decision in state.decisions:
        decisions.add_row(timestamp(decision.at), decision.stage, decision.action, decision.reason)
    console.print(decisions)


def print_run(console: Console, result: dict[str, Any]) -> None:
    """What ``remediate run`` did."""
    verb = "fed the open incident" if result["incident"] == "existing" else "opened an incident"
    extras = []
    if result["force"]:
        extras.append("[bold red]forced[/]: semaphore and breaker bypassed")
        if result.get("authenticated_as"):
            extras.append(f"authenticated as {result['authenticated_as']}")
        else:
            extras.append(
                "requester not authenticated (no TLS client certificate): "
                "the name is recorded as given"
            )
    if result["dry_run"]:
        extras.append("dry run: decisions recorded, nothing changed")
    console.print(
        f"{result['node']}: runbook [bold]{result['runbook']}[/] requested by "
        f"{result['requested_by']}; {verb} ({result['workflow_id']})"
        + ("; " + "; ".join(extras) if extras else "")
    )
    console.print(f"Follow it with: remediate status {result['node']}")


def print_action(console: Console, verb: str, state: NodeRemediationState) -> None:
    """An accepted operator update, and the incident as it was when it accepted it."""
    done = state.decisions[-1].action if state.decisions else verb
    console.print(f"{state.node}: {verb} accepted ({done})")
    console.print(
        f"when accepted: stage {state.stage}, rung {state.rung or '-'}, "
        f"waiting for {state.waiting_for or '-'}"
        + (" [bold yellow](paused)[/]" if state.paused else "")
    )


def print_bulk(console: Console, summary: dict[str, Any]) -> None:
    """The answer of every incident to ``pause --all`` / ``resume --all``."""
    items = summary["incidents"]
    if not items:
        console.print(f"No open incidents in cluster {summary['cluster']}.")
        return
    table = Table(title=f"{summary['action']} --all in cluster {summary['cluster']}")
    table.add_column("node", no_wrap=True)
    table.add_column("result")
    for item in items:
        if item["result"] == "failed":
            table.add_row(item["node"], f"[red]failed: {item['error']}[/]")
        else:
            table.add_row(item["node"], item["result"])
    console.print(table)
