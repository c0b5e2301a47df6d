"""The permit guards' parent close policy, which the time-skipping test server does not apply.

A holder of a permit starts a guard child with ``ParentClosePolicy.REQUEST_CANCEL``
(workflows/permit.py, ADR 002 and 007): when the holder closes in any way, the
server asks the guard to cancel, and the cancelled guard gives the permit back.
A replaced node's incident relies on it every time (it closes holding its
permits, ADR 007). Temporal's Java test server records the policy but never
applies it (temporalio/sdk-java#1079, still open; its ``TestWorkflowStoreImpl``
has no parent-close handling), so on the clock-free comparison's server every
such permit stayed held until its lease ran out (2 hours for a replacement, 4
days for a drain): replacements and drains waited on budgets no real fleet
would have spent, and the server was never idle.

Cancelling the guard from outside does not work there either: a child that ends
after its parent closed leaves the test server's time held for good (its report
to the closed parent never completes; tests/whatif/test_parent_close.py shows
it). :class:`OrphanedGuardRelease` therefore does what the cancelled guard
would do (the same ``release_permit`` signal, ``PermitGuardInput.release``) and
then terminates the guard, which that server handles. The real server does it
within a second of the holder's close; here it lands at the next step, at most
one step (15 simulated seconds) later: an assumption of the co-simulation, like
the step itself.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Sequence

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflow.v1 import WorkflowExecutionInfo
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from gpu_remediation.ids import PERMIT_GUARD_WORKFLOW_TYPE, Signals
from gpu_remediation.semaphore_models import PermitGuardInput

log = logging.getLogger(__name__)

Run = tuple[str, str]
"""A workflow run: its workflow id and run id."""

TERMINATE_REASON = (
    "its holder closed: the permit was released for it (the time-skipping test server "
    "applies no parent close policy; whatif.parent_close)"
)

_GONE = (RPCStatusCode.NOT_FOUND, RPCStatusCode.FAILED_PRECONDITION)
"""What the server answers for a workflow that is not running (any more)."""


class OrphanedGuardRelease:
    """Releases the permit of every open guard whose holder run closed, and ends the guard.

    Args:
        client: A client of the test server.
    """

    def __init__(self, client: Client) -> None:
        self._client = client
        self._guards: dict[Run, tuple[Run, PermitGuardInput]] = {}  # holder and input, once read
        self.released = 0
        """Guards whose permit this released."""

    async def __call__(self, executions: Sequence[WorkflowExecutionInfo]) -> bool:
        """Apply the policy to what is open now.

        Args:
            executions: Every open workflow on the server.

        Returns:
            Whether a permit was released (the semaphore has a signal to handle).
        """
        open_runs = {(e.execution.workflow_id, e.execution.run_id) for e in executions}
        released = False
        for execution in executions:
            if execution.type.name != PERMIT_GUARD_WORKFLOW_TYPE:
                continue
            guard = (execution.execution.workflow_id, execution.execution.run_id)
            holder, guard_input = await self._read(guard)
            if not holder[0] or holder in open_runs:
                continue  # started by no workflow (no policy applies), or its holder runs
            await self._release(guard, guard_input)
            released = True
        # Closed runs never come back: forget them.
        self._guards = {run: read for run, read in self._guards.items() if run in open_runs}
        return released

    async def _read(self, guard: Run) -> tuple[Run, PermitGuardInput]:
        if guard not in self._guards:
            response = await self._client.workflow_service.get_workflow_execution_history(
                GetWorkflowExecutionHistoryRequest(
                    namespace=self._client.namespace,
                    execution=WorkflowExecution(workflow_id=guard[0], run_id=guard[1]),
                    maximum_page_size=1,
                )
            )
            started = response.history.events[0].workflow_execution_started_event_attributes
            (guard_input,) = await self._client.data_converter.decode(
                started.input.payloads, [PermitGuardInput]
            )
            parent = started.parent_workflow_execution
            self._guards[guard] = ((parent.workflow_id, parent.run_id), guard_input)
        return self._guards[guard]

    async def _release(self, guard: Run, guard_input: PermitGuardInput) -> None:
        semaphore = self._client.get_workflow_handle(guard_input.semaphore_workflow_id)
        if not await _unless_gone(semaphore.signal(Signals.RELEASE_PERMIT, guard_input.release())):
            # As the guard: with no semaphore running there is no permit to give back.
            log.warning(
                "could not release %s: semaphore %s not running",
                guard_input.request_id,
                guard_input.semaphore_workflow_id,
            )
        guard_handle = self._client.get_workflow_handle(guard[0], run_id=guard[1])
        await _unless_gone(guard_handle.terminate(reason=TERMINATE_REASON))
        log.info(
            "holder %s closed: released its permit %s",
            guard_input.holder_workflow_id,
            guard_input.request_id,
        )
        self.released += 1


async def _unless_gone(call: Awaitable[None]) -> bool:
    """Await ``call`` to a workflow; False when that workflow is not running (any more)."""
    try:
        await call
    except RPCError as err:
        if err.status not in _GONE:
            raise
        return False
    return True
