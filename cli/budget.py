"""``remediate budget``: a semaphore's capacity, holders and waiters.

The replacements' by default; ``--step`` shows a disruptive step's (issue 35).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from temporalio.client import WorkflowExecutionStatus, WorkflowUpdateFailedError

from cli.connection import (
    DEFAULT_TIMEOUT,
    AddressOption,
    NamespaceOption,
    TemporalOptions,
    TimeoutOption,
    temporal,
    within,
)
from cli.incident_views import status_name
from cli.incidents import describe
from cli.output import (
    CliError,
    ExitCode,
    JsonOption,
    age,
    console,
    emit_json,
    refusal,
    run,
    timestamp,
)
from gpu_remediation.ids import (
    SEMAPHORE_WORKFLOW_ID,
    Queries,
    Updates,
    is_valid_node_name,
    step_semaphore_id,
)
from gpu_remediation.semaphore_models import MAX_CAPACITY, SemaphoreState, SetCapacityInput

budget_app = typer.Typer()


class Step(StrEnum):
    """The disruptive steps with a budget of their own (the policy's ``disruption``)."""

    STOP_GPU_WORK = "stop_gpu_work"
    GPU_RESET = "gpu_reset"
    REBOOT = "reboot"


def holder_node(workflow_id: str) -> str:
    """``cluster/node`` for a node incident's workflow id, else the id itself."""
    parts = workflow_id.split("/")
    if len(parts) == 3 and parts[0] == "gpu-remediation" and is_valid_node_name(parts[2]):
        return f"{parts[1]}/{parts[2]}"
    return workflow_id


def _as_json(semaphore_id: str, state: SemaphoreState, previous: int | None) -> dict[str, Any]:
    return {
        "semaphore_workflow_id": semaphore_id,
        "capacity": state.capacity,
        "previous_capacity": previous,
        "holders": [
            {
                "node": holder_node(lease.holder_workflow_id),
                "workflow_id": lease.holder_workflow_id,
                "run_id": lease.holder_run_id,
                "request_id": lease.request_id,
                "since": lease.granted_at.isoformat(),
                "expires_at": lease.expires_at.isoformat(),
            }
            for lease in state.holders
        ],
        "waiters": [
            {
                "position": position,
                "node": holder_node(waiter.holder_workflow_id),
                "workflow_id": waiter.holder_workflow_id,
                "run_id": waiter.holder_run_id,
                "request_id": waiter.request_id,
                "since": waiter.enqueued_at.isoformat(),
                "lease_s": waiter.lease.total_seconds(),
            }
            for position, waiter in enumerate(state.waiters, start=1)
        ],
    }


def _print(out: Console, semaphore_id: str, state: SemaphoreState, previous: int | None) -> None:
    change = f" (was {previous})" if previous is not None else ""
    out.print(
        f"Replacement semaphore {semaphore_id}: capacity [bold]{state.capacity}[/]{change}, "
        f"{len(state.holders)} holding, {len(state.waiters)} waiting"
    )
    if state.holders:
        holders = Table(title="Holders (replacing now)")
        for column in ("node", "request", "since", "lease expires"):
            holders.add_column(column, no_wrap=True)
        for lease in state.holders:
            holders.add_row(
                holder_node(lease.holder_workflow_id),
                lease.request_id,
                f"{timestamp(lease.granted_at)} ({age(lease.granted_at)} ago)",
                timestamp(lease.expires_at),
            )
        out.print(holders)
    if state.waiters:
        waiters = Table(title="Waiters (in order)")
        for column in ("#", "node", "request", "since"):
            waiters.add_column(column, no_wrap=True)
        for position, waiter in enumerate(state.waiters, start=1):
            waiters.add_row(
                str(position),
                holder_node(waiter.holder_workflow_id),
                waiter.request_id,
                f"{timestamp(waiter.enqueued_at)} ({age(waiter.enqueued_at)} ago)",
            )
        out.print(waiters)


async def _budget(
    options: TemporalOptions, semaphore_id: str, capacity: int | None, wait_s: float
) -> tuple[SemaphoreState, int | None]:
    async with temporal(options) as client:
        description = await describe(client, semaphore_id)
        if description is None:
            raise CliError(
                f"the semaphore {semaphore_id} does not exist yet "
                "(it is created with the first step it caps)",
                ExitCode.NOT_FOUND,
            )
        if description.status != WorkflowExecutionStatus.RUNNING:
            raise CliError(
                f"the semaphore {semaphore_id} is {status_name(description.status)} "
                "(the next step it caps starts it again)",
                ExitCode.NOT_FOUND,
            )
        # Not pinned to the run: the semaphore continues as new, the latest run is the one.
        handle = client.get_workflow_handle(semaphore_id)
        state: SemaphoreState = await within(
            wait_s, handle.query(Queries.STATE, result_type=SemaphoreState), "the state query"
        )
        if capacity is None:
            return state, None
        try:
            changed: SemaphoreState = await within(
                wait_s,
                handle.execute_update(
                    Updates.SET_CAPACITY,
                    SetCapacityInput(capacity=capacity),
                    result_type=SemaphoreState,
                ),
                "the set_capacity update (it may still be applied when a worker picks it up)",
            )
        except WorkflowUpdateFailedError as err:
            raise CliError(f"set_capacity refused: {refusal(err)}") from err
        return changed, state.capacity


@budget_app.command("budget")
def budget(
    set_capacity: Annotated[
        int | None,
        typer.Option(
            "--set-capacity",
            min=1,
            max=MAX_CAPACITY,
            help="Change how many replacements may run at once. Lowering it revokes no "
            "permit: holders finish, and no new grant is made until they drop below it.",
            show_default=False,
        ),
    ] = None,
    step: Annotated[
        Step | None,
        typer.Option(
            "--step",
            help="A disruptive step's budget instead of the replacements'.",
            show_default=False,
        ),
    ] = None,
    semaphore_id: Annotated[
        str, typer.Option("--semaphore-id", help="Replacement semaphore workflow id.")
    ] = SEMAPHORE_WORKFLOW_ID,
    address: AddressOption = None,
    namespace: NamespaceOption = None,
    wait_s: TimeoutOption = DEFAULT_TIMEOUT,
    json_output: JsonOption = False,
) -> None:
    """Show a budget (replacements, or --step): capacity, who holds a permit, who waits."""
    if step is not None:
        semaphore_id = step_semaphore_id(semaphore_id, step.value)
    options = TemporalOptions(address=address, namespace=namespace)
    state, previous = run(_budget(options, semaphore_id, set_capacity, wait_s))
    if json_output:
        emit_json(_as_json(semaphore_id, state, previous))
    else:
        _print(console(), semaphore_id, state, previous)
