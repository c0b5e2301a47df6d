"""The operator verbs: ``pause``, ``resume``, ``approve``, ``skip``, ``retry``, ``abort``.

Each is one of the node workflow's validated updates, sent to the node's open
incident run: a request the workflow cannot honour is refused by its
validator, and the CLI prints that reason and exits 1. ``pause --all`` and
``resume --all`` act on every open incident of the cluster.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer
from pydantic import BaseModel
from temporalio.client import WorkflowExecution

from cli import incident_views as views
from cli.connection import (
    DEFAULT_CLUSTER,
    DEFAULT_TIMEOUT,
    AddressOption,
    ClusterOption,
    NamespaceOption,
    TemporalOptions,
    TimeoutOption,
    cluster_prefix,
    temporal,
    workflow_id_for,
)
from cli.incidents import (
    ByOption,
    NodeArgument,
    OptionalNodeArgument,
    ReasonOption,
    bounded,
    build,
    open_incident,
    open_incidents,
    query_state,
    send_update,
    whoami,
)
from cli.output import CliError, ExitCode, JsonOption, console, emit_json, run
from gpu_remediation.ids import Updates
from gpu_remediation.models import Rung
from gpu_remediation.search_attributes import SA_NODE_POOL
from gpu_remediation.workflow_models import (
    AbortInput,
    ApproveInput,
    NodeRemediationState,
    OperatorRequest,
    RetryStepInput,
    SkipToInput,
)

controls_app = typer.Typer()

APPROVAL_PREFIX = "approval of "
"""How the workflow's ``waiting_for`` names a rung waiting for approval."""


def _operate(
    verb: str,
    node: str,
    cluster: str,
    options: TemporalOptions,
    wait_s: float,
    json_output: bool,
    make_request: Callable[[NodeRemediationState | None], BaseModel],
    *,
    needs_state: bool = False,
) -> None:
    """Send one operator update to NODE's open incident and print the new state."""

    async def act() -> NodeRemediationState:
        async with temporal(options) as client:
            handle = await open_incident(client, cluster, node)
            current = await query_state(handle, wait_s) if needs_state else None
            return await send_update(handle, verb, make_request(current), wait_s)

    state = run(act())
    if json_output:
        emit_json({"action": verb, "workflow_id": workflow_id_for(cluster, node), "state": state})
    else:
        views.print_action(console(), verb, state)


def _request(by: str | None, reason: str) -> dict[str, str]:
    return {"by": by or whoami(), "reason": reason}


def _every_or_one(verb: str, node: str | None, every: bool) -> None:
    if every == (node is not None):
        raise typer.BadParameter(f"{verb} needs a NODE or --all (not both)")


async def _operate_all(
    options: TemporalOptions,
    cluster: str,
    verb: str,
    request: OperatorRequest,
    wait_s: float,
    already: str,
    pool: str | None = None,
) -> dict[str, Any]:
    """Send ``verb`` to every open incident of the cluster; report each one's answer.

    Each incident's result is ``accepted``, ``already`` (the refusal that means
    it is already in the asked-for state, e.g. "already paused") or ``failed``.
    With ``pool``, only the incidents of nodes in that node pool (the search
    attribute triage sets; an incident not yet past triage has none and is left).
    """
    async with temporal(options) as client:
        executions = await open_incidents(client, cluster)
        if pool is not None:
            executions = [
                e for e in executions if e.typed_search_attributes.get(SA_NODE_POOL) == pool
            ]

        async def one(execution: WorkflowExecution) -> NodeRemediationState:
            handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
            return await send_update(handle, verb, request, wait_s)

        answers = await bounded(executions, one)
    prefix = cluster_prefix(cluster)
    results = []
    for execution, answer in zip(executions, answers, strict=True):
        if isinstance(answer, BaseException) and not isinstance(answer, Exception):
            raise answer
        if not isinstance(answer, Exception):
            result, error = "accepted", None
        elif str(answer) == f"{verb} refused: {already}":
            result, error = already, None
        else:
            result, error = "failed", str(answer)
        results.append(
            {
                "node": execution.id.removeprefix(prefix),
                "workflow_id": execution.id,
                "result": result,
                "error": error,
            }
        )
    summary: dict[str, Any] = {"cluster": cluster, "action": verb, "incidents": results}
    if pool is not None:
        summary["pool"] = pool
    return summary


def _operate_every(
    verb: str,
    cluster: str,
    options: TemporalOptions,
    wait_s: float,
    json_output: bool,
    request: OperatorRequest,
    already: str,
    pool: str | None = None,
) -> None:
    """``--all``: print every incident's answer; exit 1 if any failed."""
    summary = run(_operate_all(options, cluster, verb, request, wait_s, already, pool))
    if json_output:
        emit_json(summary)
    else:
        views.print_bulk(console(), summary)
    if any(item["result"] == "failed" for item in summary["incidents"]):
        raise typer.Exit(int(ExitCode.FAILED))


@controls_app.command("pause")
def pause(
    node: OptionalNodeArgument = None,
    every: Annotated[
        bool, typer.Option("--all", help="Pause every open incident of the cluster.")
    ] = False,
    by: ByOption = None,
    reason: ReasonOption = "",
    cluster: ClusterOption = DEFAULT_CLUSTER,
    address: AddressOption = None,
    namespace: NamespaceOption = None,
    wait_s: TimeoutOption = DEFAULT_TIMEOUT,
    json_output: JsonOption = False,
) -> None:
    """Pause NODE's incident (or --all) before its next step; a running step finishes."""
    _every_or_one("pause", node, every)
    options = TemporalOptions(address=address, namespace=namespace)
    request = build(OperatorRequest, **_request(by, reason))
    if node is None:
        _operate_every(
            Updates.PAUSE, cluster, options, wait_s, json_output, request, "already paused"
        )
        return
    _operate(Updates.PAUSE, node, cluster, options, wait_s, json_output, lambda _: request)


@controls_app.command("resume")
def resume(
    node: OptionalNodeArgument = None,
    every: Annotated[
        bool, typer.Option("--all", help="Resume every open incident of the cluster.")
    ] = False,
    by: ByOption = None,
    reason: ReasonOption = "",
    cluster: ClusterOption = DEFAULT_CLUSTER,
    address: AddressOption = None,
    namespace: NamespaceOption = None,
    wait_s: TimeoutOption = DEFAULT_TIMEOUT,
    json_output: JsonOption = False,
) -> None:
    """Resume NODE's paused incident (or every paused one with --all)."""
    _every_or_one("resume", node, every)
    options = TemporalOptions(address=address, namespace=namespace)
    request = build(OperatorRequest, **_request(by, reason))
    if node is None:
        _operate_every(Updates.RESUME, cluster, options, wait_s, json_output, request, "not paused")
        return
    _operate(Updates.RESUME, node, cluster, options, wait_s, json_output, lambda _: request)


def awaiting_approval(state: NodeRemediationState) -> Rung | None:
    """The rung the incident waits to have approved, if any."""
    if state.awaiting_approval is not None:
        return state.awaiting_approval
    # Incidents started before the state carried the field say it in waiting_for.
    waiting = state.waiting_for or ""
    if not waiting.startswith(APPROVAL_PREFIX):
        return None
    try:
        return Rung(waiting.removeprefix(APPROVAL_PREFIX))
    except ValueError:
        return None


@controls_app.command("approve")
def approve(
    node: NodeArgument,
    rung: Annotated[
        Rung | None,
        typer.Option(
            "--rung",
            case_sensitive=False,
            help="The rung to approve (default: the one waiting for approval).",
            show_default=False,
        ),
    ] = None,
    by: ByOption = None,
    reason: ReasonOption = "",
    cluster: ClusterOption = DEFAULT_CLUSTER,
    address: AddressOption = None,
    namespace: NamespaceOption = None,
    wait_s: TimeoutOption = DEFAULT_TIMEOUT,
    json_output: JsonOption = False,
) -> None:
    """Approve the step NODE's incident is waiting for (e.g. a replacement)."""
    asker = build(OperatorRequest, **_request(by, reason))

    def request(state: NodeRemediationState | None) -> ApproveInput:
        chosen = rung
        if chosen is None:
            assert state is not None
            chosen = awaiting_approval(state)
            if chosen is None:
                raise CliError(
                    f"nothing is waiting for approval on {node} (stage {state.stage}, waiting "
                    f"for {state.waiting_for or 'nothing'})"
                )
        return ApproveInput(rung=chosen, by=asker.by, reason=asker.reason)

    options = TemporalOptions(address=address, namespace=namespace)
    _operate(
        Updates.APPROVE,
        node,
        cluster,
        options,
        wait_s,
        json_output,
        request,
        needs_state=rung is None,
    )


@controls_app.command("skip")
def skip(
    node: NodeArgument,
    to: Annotated[
        Rung,
        typer.Option(
            "--to", case_sensitive=False, help="The rung to continue at.", show_default=False
        ),
    ],
    by: ByOption = None,
    reason: ReasonOption = "",
    cluster: ClusterOption = DEFAULT_CLUSTER,
    address: AddressOption = None,
    namespace: NamespaceOption = None,
    wait_s: TimeoutOption = DEFAULT_TIMEOUT,
    json_output: JsonOption = False,
) -> None:
    """Make NODE's incident continue at a rung of your choice (past policy limits)."""
    request = build(SkipToInput, rung=to, **_request(by, reason))
    options = TemporalOptions(address=address, namespace=namespace)
    _operate(Updates.SKIP_TO, node, cluster, options, wait_s, json_output, lambda _: request)


@controls_app.command("retry")
def retry(
    node: NodeArgument,
    by: ByOption = None,
    reason: ReasonOption = "",
    cluster: ClusterOption = DEFAULT_CLUSTER,
    address: AddressOption = None,
    namespace: NamespaceOption = None,
    wait_s: TimeoutOption = DEFAULT_TIMEOUT,
    json_output: JsonOption = False,
) -> None:
    """Run NODE's last step once more (while the incident waits, e.g. after escalation)."""
    request = build(RetryStepInput, **_request(by, reason))
    options = TemporalOptions(address=address, namespace=namespace)
    _operate(Updates.RETRY_STEP, node, cluster, options, wait_s, json_output, lambda _: request)


@controls_app.command("abort")
def abort(
    node: OptionalNodeArgument = None,
    every: Annotated[
        bool,
        typer.Option(
            "--all",
            help="Abort every open incident of the cluster (of --pool only, if given): for "
            "the operator who knows the signals are wrong, e.g. an outage or a bad rule.",
        ),
    ] = False,
    pool: Annotated[
        str | None,
        typer.Option("--pool", help="With --all: only the incidents of this node pool."),
    ] = None,
    leave_cordoned: Annotated[
        bool,
        typer.Option("--leave-cordoned", help="Untaint but keep the node cordoned."),
    ] = False,
    by: ByOption = None,
    reason: ReasonOption = "",
    cluster: ClusterOption = DEFAULT_CLUSTER,
    address: AddressOption = None,
    namespace: NamespaceOption = None,
    wait_s: TimeoutOption = DEFAULT_TIMEOUT,
    json_output: JsonOption = False,
) -> None:
    """Stop NODE's incident (or --all) and clean up: give back a permit, untaint, uncordon."""
    _every_or_one("abort", node, every)
    if pool is not None and not every:
        raise typer.BadParameter("--pool applies only with --all", param_hint="--pool")
    if every and not reason.strip():
        raise typer.BadParameter("abort --all needs a --reason (it is recorded)")
    request = build(AbortInput, uncordon=not leave_cordoned, **_request(by, reason))
    options = TemporalOptions(address=address, namespace=namespace)
    if node is None:
        _operate_every(
            Updates.ABORT, cluster, options, wait_s, json_output, request, "already aborting", pool
        )
        return
    _operate(Updates.ABORT, node, cluster, options, wait_s, json_output, lambda _: request)
