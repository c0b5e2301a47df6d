"""``remediate admit NODE``: a node's admission (burn-in), and the operator's override.

Without options it shows the running admission of NODE (its boot, checks and
decisions). ``--skip-burn-in`` sends the admission's ``skip_burn_in`` update:
the node is untainted at once and the request (who, why) is in the decision
log. A node with no running admission exits 4.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError

from cli.connection import (
    DEFAULT_CLUSTER,
    DEFAULT_TIMEOUT,
    AddressOption,
    ClusterOption,
    NamespaceOption,
    TemporalOptions,
    TimeoutOption,
    temporal,
    within,
    workflow_id_for,
)
from cli.incidents import ByOption, NodeArgument, ReasonOption, build, whoami
from cli.output import CliError, ExitCode, JsonOption, console, emit_json, refusal, run
from gpu_remediation.admission_models import AdmissionState, SkipBurnInInput
from gpu_remediation.ids import ADMISSION_WORKFLOW_TYPE, Queries, Updates

admission_app = typer.Typer()


async def running_admission(client: Client, cluster: str, node: str) -> WorkflowHandle[Any, Any]:
    """A handle pinned to NODE's running admission (the newest, if several boots overlap).

    Raises:
        CliError: Exit code 4 if the node has no running admission.
    """
    prefix = f"{workflow_id_for(cluster, node)}/admission/"
    query = (
        f"WorkflowType = '{ADMISSION_WORKFLOW_TYPE}' AND ExecutionStatus = 'Running' "
        f"AND WorkflowId STARTS_WITH '{prefix}'"
    )
    newest = None
    async for execution in client.list_workflows(query):
        if newest is None or execution.start_time > newest.start_time:
            newest = execution
    if newest is None:
        raise CliError(
            f"node {node} has no running admission in cluster {cluster}", ExitCode.NOT_FOUND
        )
    return client.get_workflow_handle(newest.id, run_id=newest.run_id)


@admission_app.command("admit")
def admit(
    node: NodeArgument,
    skip_burn_in: Annotated[
        bool,
        typer.Option(
            "--skip-burn-in", help="Admit now without (the rest of) the burn-in; audited."
        ),
    ] = False,
    by: ByOption = None,
    reason: ReasonOption = "",
    cluster: ClusterOption = DEFAULT_CLUSTER,
    address: AddressOption = None,
    namespace: NamespaceOption = None,
    wait_s: TimeoutOption = DEFAULT_TIMEOUT,
    json_output: JsonOption = False,
) -> None:
    """Show NODE's running admission, or admit it now with --skip-burn-in."""
    options = TemporalOptions(address=address, namespace=namespace)
    request = build(SkipBurnInInput, by=by or whoami(), reason=reason)

    async def act() -> tuple[str, str | None, AdmissionState]:
        async with temporal(options) as client:
            handle = await running_admission(client, cluster, node)
            answer = None
            if skip_burn_in:
                try:
                    answer = await within(
                        wait_s,
                        handle.execute_update(Updates.SKIP_BURN_IN, request, result_type=str),
                        "the skip_burn_in update",
                    )
                except WorkflowUpdateFailedError as err:
                    raise CliError(f"skip_burn_in refused: {refusal(err)}") from err
            state: AdmissionState = await within(
                wait_s,
                handle.query(Queries.ADMISSION_STATE, result_type=AdmissionState),
                "the admission_state query",
            )
            return handle.id, answer, state

    workflow_id, answer, state = run(act())
    if json_output:
        emit_json({"workflow_id": workflow_id, "skipped": skip_burn_in, "state": state})
        return
    out = console()
    if answer is not None:
        out.print(f"skip_burn_in accepted: {answer}")
    checks = ", ".join(f"{c.name} {'pass' if c.passed else 'fail'}" for c in state.checks)
    out.print(
        f"{state.node} boot {state.boot_id} ({state.trigger}): {state.stage}"
        f"{' - ' + state.outcome.value if state.outcome else ''}; checks: {checks or 'none yet'}"
    )
    for decision in state.decisions[-10:]:
        out.print(f"  {decision.at:%H:%M:%S} {decision.stage}: {decision.action} {decision.reason}")
