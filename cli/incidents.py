"""Reading and steering incidents: ``run``, ``status`` and the operator verbs.

``remediate run`` feeds a manual runbook request to a node's incident through
:class:`triggers.starter.IncidentStarter`, like every other trigger;
``remediate status`` reads incidents (a visibility list, then each incident's
state query). The helpers here (finding a node's open incident, querying it,
sending validated updates) are shared with the operator verbs in
``cli/controls.py``.
"""

from __future__ import annotations

import asyncio
import getpass
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import typer
from pydantic import BaseModel, ValidationError
from temporalio.client import (
    Client,
    WorkflowExecution,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

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
    within,
    workflow_id_for,
)
from cli.output import (
    CliError,
    ExitCode,
    JsonOption,
    console,
    emit_json,
    fail,
    refusal,
    run,
    timestamp,
    warn,
)
from gpu_remediation.ids import (
    NODE_WORKFLOW_TYPE,
    SEMAPHORE_WORKFLOW_ID,
    TASK_QUEUE,
    Queries,
    is_valid_node_name,
    open_incidents_query,
)
from gpu_remediation.incident_summary import start_summary
from gpu_remediation.models import EvidenceReport, ManualEvidence
from gpu_remediation.policy import Policy
from gpu_remediation.policy_loader import PolicyError, load_policy
from gpu_remediation.search_attributes import start_search_attributes
from gpu_remediation.workflow_models import (
    NodeRemediationInput,
    NodeRemediationState,
)
from triggers.starter import IncidentStarter

T = TypeVar("T")

incidents_app = typer.Typer()

Runbook = Literal["auto", "diagnose", "reset", "reboot", "replace"]
QUERY_CONCURRENCY = 8
"""State queries in flight at once when listing or pausing every incident."""
LIST_LIMIT = 1000
"""Open incidents listed at most (a cluster with more has bigger problems)."""


def _node_name(value: str | None) -> str | None:
    if value is not None and not is_valid_node_name(value):
        raise typer.BadParameter(
            f"{value!r} is not a valid Kubernetes node name (lowercase RFC 1123 subdomain)"
        )
    return value


def whoami() -> str:
    """The operator's login name (recorded as who asked), or ``operator``."""
    try:
        return getpass.getuser()
    except OSError:  # no login name in the environment or the passwd database
        return "operator"


NodeArgument = Annotated[
    str,
    typer.Argument(
        callback=_node_name, metavar="NODE", help="Kubernetes node name.", show_default=False
    ),
]
OptionalNodeArgument = Annotated[
    str | None,
    typer.Argument(
        callback=_node_name, metavar="NODE", help="Kubernetes node name.", show_default=False
    ),
]
ByOption = Annotated[
    str | None,
    typer.Option("--by", help="Who asks, recorded in the decision log (default: $USER)."),
]
ReasonOption = Annotated[str, typer.Option("--reason", help="Why (recorded in the decision log).")]
M = TypeVar("M", bound=BaseModel)


# ---------------------------------------------------------------- helpers


async def describe(client: Client, workflow_id: str) -> WorkflowExecutionDescription | None:
    """The latest run of ``workflow_id``, or None if there never was one."""
    try:
        return await client.get_workflow_handle(workflow_id).describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return None
        raise


async def open_incident(client: Client, cluster: str, node: str) -> WorkflowHandle[Any, Any]:
    """A handle pinned to the node's open incident run.

    Raises:
        CliError: Exit code 4 if the node has no open incident.
    """
    workflow_id = workflow_id_for(cluster, node)
    description = await describe(client, workflow_id)
    if description is None:
        raise CliError(f"node {node} has no incident in cluster {cluster}", ExitCode.NOT_FOUND)
    if description.status != WorkflowExecutionStatus.RUNNING:
        raise CliError(
            f"node {node} has no open incident in cluster {cluster} "
            f"(the last one is {views.status_name(description.status)}"
            f" since {timestamp(description.close_time)})",
            ExitCode.NOT_FOUND,
        )
    return client.get_workflow_handle(workflow_id, run_id=description.run_id)


async def query_state(handle: WorkflowHandle[Any, Any], wait_s: float) -> NodeRemediationState:
    """The incident's state query, bounded by ``wait_s`` seconds."""
    state: NodeRemediationState = await within(
        wait_s,
        handle.query(Queries.STATE, result_type=NodeRemediationState),
        "the state query",
    )
    return state


async def send_update(
    handle: WorkflowHandle[Any, Any], update: str, request: BaseModel, wait_s: float
) -> NodeRemediationState:
    """Execute an operator update; a validator's refusal becomes exit code 1.

    Raises:
        CliError: With the validator's message, or exit code 4 if the incident
            closed in the meantime.
    """
    try:
        state: NodeRemediationState = await within(
            wait_s,
            handle.execute_update(update, request, result_type=NodeRemediationState),
            f"the {update} update (it may still be applied when a worker picks it up)",
        )
    except WorkflowUpdateFailedError as err:
        raise CliError(f"{update} refused: {refusal(err)}") from err
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise CliError(f"{update} refused: the incident closed", ExitCode.NOT_FOUND) from err
        raise
    return state


async def bounded(items: Sequence[T], call: Callable[[T], Awaitable[Any]]) -> list[Any]:
    """``call`` on every item, at most ``QUERY_CONCURRENCY`` at once; errors are returned."""
    gate = asyncio.Semaphore(QUERY_CONCURRENCY)

    async def one(item: T) -> Any:
        async with gate:
            return await call(item)

    return await asyncio.gather(*(one(item) for item in items), return_exceptions=True)


async def open_incidents(client: Client, cluster: str) -> list[WorkflowExecution]:
    """The cluster's running incidents, oldest first (``open_incidents_query``)."""
    try:
        query = open_incidents_query(cluster)
    except ValueError as err:
        raise CliError(str(err), ExitCode.INVALID_INPUT) from err
    found = [execution async for execution in client.list_workflows(query, limit=LIST_LIMIT + 1)]
    if len(found) > LIST_LIMIT:
        warn(f"more than {LIST_LIMIT} open incidents; showing {LIST_LIMIT} of them")
    found.sort(key=lambda execution: execution.start_time)
    return found[:LIST_LIMIT]


def _options(address: str | None, namespace: str | None) -> TemporalOptions:
    return TemporalOptions(address=address, namespace=namespace)


def build(model: type[M], **fields: Any) -> M:
    """Validate command-line input into ``model``; a bad value is a usage error (exit 2)."""
    try:
        return model(**fields)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or model.__name__}: {e['msg']}"
            for e in err.errors()
        )
        raise typer.BadParameter(problems) from err


# ---------------------------------------------------------------- run


def _load_policy(path: Path | None) -> Policy:
    try:
        return load_policy(path)
    except PolicyError as err:
        fail(str(err), ExitCode.INVALID_INPUT)


@incidents_app.command("run")
def run_runbook(
    node: NodeArgument,
    runbook: Annotated[
        Runbook,
        typer.Option(
            "--runbook",
            help="auto: classify and climb as usual; diagnose/reset/reboot/replace: start there.",
        ),
    ],
    reason: Annotated[str, typer.Option("--reason", help="Why (recorded with the request).")] = "",
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="replace only: bypass the replacement semaphore and the pool breaker "
            "(needs --reason; recorded).",
        ),
    ] = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Open a new incident that records its decisions and changes nothing "
            "(only when the node has no open incident).",
        ),
    ] = False,
    requested_by: Annotated[
        str | None,
        typer.Option("--requested-by", help="Who asks (default: $USER).", show_default=False),
    ] = None,
    policy_file: Annotated[
        Path | None,
        typer.Option(
            "--policy",
            exists=True,
            dir_okay=False,
            help="Policy YAML for a new incident (default: the packaged defaults).",
        ),
    ] = None,
    task_queue: Annotated[
        str,
        typer.Option(
            "--task-queue",
            envvar="GPU_REMEDIATION_TASK_QUEUE",
            help="Task queue of the remediation workers.",
        ),
    ] = TASK_QUEUE,
    semaphore_id: Annotated[
        str, typer.Option("--semaphore-id", help="Replacement semaphore workflow id.")
    ] = SEMAPHORE_WORKFLOW_ID,
    cluster: ClusterOption = DEFAULT_CLUSTER,
    address: AddressOption = None,
    namespace: NamespaceOption = None,
    json_output: JsonOption = False,
) -> None:
    """Start or feed NODE's incident with a manual runbook request.

    A manual replace still waits for a semaphore permit and obeys the pool
    breaker unless --force is given with a --reason. An existing incident
    keeps its policy; --policy and --dry-run apply to a new one.
    """
    if force and runbook != "replace":
        raise typer.BadParameter("--force applies only to --runbook replace", param_hint="--force")
    if force and not reason.strip():
        raise typer.BadParameter("--force needs a --reason (it is recorded)", param_hint="--force")
    policy = _load_policy(policy_file)
    if dry_run:
        policy = policy.model_copy(update={"dry_run": True})
    evidence = build(
        ManualEvidence,
        observed_at=datetime.now(UTC),
        source="cli",
        runbook=runbook,
        requested_by=requested_by or whoami(),
        authenticated_as=_options(address, namespace).principal(),
        force=force,
        message=reason,
    )
    result = run(
        _run(
            _options(address, namespace),
            IncidentRequest(
                cluster=cluster,
                node=node,
                evidence=evidence,
                policy=policy,
                dry_run=dry_run,
                task_queue=task_queue,
                semaphore_id=semaphore_id,
            ),
        )
    )
    if json_output:
        emit_json(result)
    else:
        views.print_run(console(), result)


class IncidentRequest(BaseModel):
    """Everything ``remediate run`` sends."""

    cluster: str
    node: str
    evidence: ManualEvidence
    policy: Policy
    dry_run: bool
    task_queue: str
    semaphore_id: str


async def _run(options: TemporalOptions, request: IncidentRequest) -> dict[str, Any]:
    workflow_id = workflow_id_for(request.cluster, request.node)
    report = EvidenceReport(node=request.node, evidence=[request.evidence])
    async with temporal(options) as client:
        before = await describe(client, workflow_id)
        was_open = before is not None and before.status == WorkflowExecutionStatus.RUNNING
        if request.dry_run:
            await _start_dry_run(client, workflow_id, request, report)
        else:
            starter = IncidentStarter(
                client,
                cluster=request.cluster,
                policy=request.policy,
                task_queue=request.task_queue,
                semaphore_workflow_id=request.semaphore_id,
            )
            await starter.report(request.node, [request.evidence])
    return {
        "workflow_id": workflow_id,
        "cluster": request.cluster,
        "node": request.node,
        "incident": "existing" if was_open else "opened",
        "runbook": request.evidence.runbook,
        "requested_by": request.evidence.requested_by,
        "authenticated_as": request.evidence.authenticated_as,
        "force": request.evidence.force,
        "reason": request.evidence.message,
        "dry_run": request.dry_run,
    }


async def _start_dry_run(
    client: Client, workflow_id: str, request: IncidentRequest, report: EvidenceReport
) -> None:
    """Open a dry-run incident, refusing if one is open.

    Signal-with-start would deliver a dry-run request into a live incident
    opened a moment earlier by a trigger, and so act for real; a plain start
    that fails on an open run cannot. The evidence rides in the start's input,
    so the run exists with it or not at all.
    """
    summary, details = start_summary(request.node, report.evidence, request.policy)
    try:
        await client.start_workflow(
            NODE_WORKFLOW_TYPE,
            NodeRemediationInput(
                cluster=request.cluster,
                node=request.node,
                policy=request.policy,
                semaphore_workflow_id=request.semaphore_id,
                evidence=report,
            ),
            id=workflow_id,
            task_queue=request.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
            static_summary=summary,
            static_details=details,
            search_attributes=start_search_attributes(request.cluster, request.node),
        )
    except WorkflowAlreadyStartedError as err:
        raise CliError(
            f"node {request.node} already has an open incident; --dry-run only opens a new "
            f"one (see `remediate status {request.node}`)"
        ) from err


# ---------------------------------------------------------------- status


@incidents_app.command("status")
def status(
    node: OptionalNodeArgument = None,
    cluster: ClusterOption = DEFAULT_CLUSTER,
    address: AddressOption = None,
    namespace: NamespaceOption = None,
    wait_s: TimeoutOption = DEFAULT_TIMEOUT,
    json_output: JsonOption = False,
) -> None:
    """List open incidents, or show NODE's incident: evidence, attempts and decision log."""
    options = _options(address, namespace)
    if node is None:
        listing = run(_list(options, cluster, wait_s))
        if json_output:
            emit_json(listing)
        else:
            views.print_list(console(), listing)
        return
    shown = run(_show(options, cluster, node, wait_s))
    if json_output:
        emit_json(shown)
    else:
        views.print_incident(console(), shown)


async def _list(options: TemporalOptions, cluster: str, wait_s: float) -> dict[str, Any]:
    async with temporal(options) as client:
        executions = await open_incidents(client, cluster)

        async def state_of(execution: WorkflowExecution) -> NodeRemediationState:
            handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
            return await query_state(handle, wait_s)

        states = await bounded(executions, state_of)
    rows = []
    for execution, state in zip(executions, states, strict=True):
        if isinstance(state, BaseException):
            if not isinstance(state, Exception):
                raise state
            # One stuck incident must not hide the others: its row shows what
            # visibility knows, and the error is reported.
            warn(f"{execution.id}: no state ({state}); showing its search attributes")
        rows.append(views.incident_row(execution, cluster_prefix(cluster), state))
    return {"cluster": cluster, "incidents": rows}


async def _show(options: TemporalOptions, cluster: str, node: str, wait_s: float) -> dict[str, Any]:
    workflow_id = workflow_id_for(cluster, node)
    async with temporal(options) as client:
        description = await describe(client, workflow_id)
        if description is None:
            raise CliError(f"node {node} has no incident in cluster {cluster}", ExitCode.NOT_FOUND)
        handle = client.get_workflow_handle(workflow_id, run_id=description.run_id)
        state = await query_state(handle, wait_s)
        opened_as = await description.static_summary()
    return {
        "workflow_id": workflow_id,
        "run_id": description.run_id,
        "summary": views.state_summary(state),
        "opened_as": opened_as,
        "status": views.status_name(description.status),
        "open": description.status == WorkflowExecutionStatus.RUNNING,
        "state": state,
    }
