"""Activities that talk to Temporal itself.

Workflow code cannot start an unrelated workflow idempotently (a child would
be tied to its parent's lifetime), so holders make sure the singleton
semaphore runs through an activity. Nor can it list workflows, so a node's
earlier incidents (the repeat-offender rule, per-node attempt budgets) are
read from visibility by an activity too, and so is a pool's count of recent
replacements (the replacement rate budget).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.common import WorkflowIDConflictPolicy

from gpu_remediation.contracts import (
    CountReplacementsInput,
    EnsureSemaphoreInput,
    LookupNodeHistoryInput,
    NodeHistory,
    ReplacementCount,
)
from gpu_remediation.ids import SEMAPHORE_WORKFLOW_TYPE, Activities
from gpu_remediation.models import FaultClass, Outcome
from gpu_remediation.search_attributes import (
    SA_CLUSTER,
    SA_FAULT_CLASS,
    SA_NODE_POOL,
    SA_OUTCOME,
    SA_PROVIDER_ID,
)
from gpu_remediation.semaphore_models import SemaphoreInput
from gpu_remediation.visibility import ServerVisibility, Visibility
from gpu_remediation.workflow_models import NodeRemediationResult, RungAttempt


class TemporalActivities:
    """Activities needing a Temporal client (injected: it carries the data converter)."""

    def __init__(self, client: Client, visibility: Visibility | None = None) -> None:
        """Keep the client used to start workflows.

        Args:
            client: A client using the pydantic data converter.
            visibility: Where runs are listed and counted; None: the server's
                visibility (``ListingVisibility`` on the time-skipping test server).
        """
        self._client = client
        self._visibility = visibility or ServerVisibility(client)

    def all(self) -> list[Callable[..., Any]]:
        """Every activity of this class, for a worker's registration."""
        return [self.ensure_semaphore, self.lookup_node_history, self.count_replacements]

    @activity.defn(name=Activities.ENSURE_SEMAPHORE)
    async def ensure_semaphore(self, input: EnsureSemaphoreInput) -> None:
        """Start the replacement semaphore unless it is already running.

        Idempotent: a running semaphore is left as it is (its capacity too; use
        the ``set_capacity`` update to change it). The semaphore runs on this
        activity's task queue, whose worker registers it.

        Args:
            input: Capacity for a newly started semaphore, and its workflow id.
        """
        per_pool = f", {input.pool_capacity} per pool" if input.pool_capacity else ""
        handle = await self._client.start_workflow(
            SEMAPHORE_WORKFLOW_TYPE,
            SemaphoreInput(capacity=input.capacity, pool_capacity=input.pool_capacity),
            id=input.workflow_id,
            task_queue=activity.info().task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            static_summary=(
                f"Semaphore (plumbing): fleet-wide cap of {input.capacity} concurrent "
                f"{input.purpose}{per_pool}"
            ),
        )
        activity.logger.info(
            "Replacement semaphore %s running as run %s", handle.id, handle.result_run_id
        )

    @activity.defn(name=Activities.LOOKUP_NODE_HISTORY)
    async def lookup_node_history(self, input: LookupNodeHistoryInput) -> NodeHistory:
        """Count the node's earlier incidents and collect their rung attempts.

        Reads the closed runs of the node's workflow id from visibility (newest
        first, at most ``input.max_runs``). Runs that ended without touching
        the node (transient, application fault, no action, dry run) are not
        incidents, nor are runs still classed ``straggler`` when they closed (a
        job's report that nothing confirmed): neither their count nor their
        attempts. A run that failed or was terminated counts as an incident
        (something was wrong enough to start the ladder) but has no result to
        take attempts from. Read-only, so retrying is safe.

        Args:
            input: The workflow id, the run to leave out and the windows.
        """
        since = min(input.incidents_since, input.attempts_since)
        query = (
            f"WorkflowId = '{_quoted(input.workflow_id)}' "
            f"AND ExecutionStatus != 'Running' "
            # A run that continued as new is part of the incident its last run closes.
            f"AND ExecutionStatus != 'ContinuedAsNew' "
            f"AND CloseTime >= '{_rfc3339(since)}'"
        )
        if input.provider_id:
            # The same name may be another machine now: its past is not this one's.
            query += f" AND {SA_PROVIDER_ID.name} = '{_quoted(input.provider_id)}'"
        incidents = 0
        attempts: list[RungAttempt] = []
        runs = 0
        async for execution in self._visibility.list(query, limit=input.max_runs):
            if execution.run_id == input.current_run_id:
                continue
            runs += 1
            outcome = execution.search_attributes.get(SA_OUTCOME)
            if outcome in _NOT_INCIDENTS:
                continue
            if execution.search_attributes.get(SA_FAULT_CLASS) == FaultClass.STRAGGLER.value:
                # Still a straggler when it closed: only a tenant's word, nothing found.
                # It must not make the node a repeat offender nor spend its budgets.
                continue
            closed = execution.close_time
            if closed is not None and closed >= input.incidents_since:
                incidents += 1
            if execution.status != WorkflowExecutionStatus.COMPLETED:
                continue
            handle = self._client.get_workflow_handle(
                execution.id, run_id=execution.run_id, result_type=NodeRemediationResult
            )
            try:
                result = await handle.result(follow_runs=False)
            except WorkflowFailureError:
                continue
            attempts.extend(a for a in result.attempts if a.started_at >= input.attempts_since)
        activity.logger.info(
            "%s: %d earlier runs, %d incidents since %s, %d rung attempts",
            input.workflow_id,
            runs,
            incidents,
            input.incidents_since.isoformat(),
            len(attempts),
        )
        # Newest last and bounded: the budget check only needs the recent ones.
        attempts.sort(key=lambda a: a.started_at)
        return NodeHistory(incidents=incidents, attempts=attempts[-200:])

    @activity.defn(name=Activities.COUNT_REPLACEMENTS)
    async def count_replacements(self, input: CountReplacementsInput) -> ReplacementCount:
        """Count the pool's incidents closed as ``replaced`` since ``input.since``.

        From visibility (the outcome and pool search attributes), so the count is
        the cluster's record, not one worker's memory. Read-only.
        """
        query = (
            f"{SA_CLUSTER.name} = '{_quoted(input.cluster)}' "
            f"AND {SA_OUTCOME.name} = '{Outcome.REPLACED.value}' "
            f"AND CloseTime >= '{_rfc3339(input.since)}'"
        )
        if input.node_pool is not None:
            query += f" AND {SA_NODE_POOL.name} = '{_quoted(input.node_pool)}'"
        return ReplacementCount(count=await self._visibility.count(query))


# Outcomes of runs that never touched the node: not incidents for the repeat rule.
_NOT_INCIDENTS = frozenset(
    {
        Outcome.TRANSIENT.value,
        Outcome.APPLICATION_FAULT.value,
        Outcome.NO_ACTION.value,
        Outcome.DRY_RUN.value,
    }
)


def _quoted(value: str) -> str:
    """Escape a value for a single-quoted visibility query literal."""
    return value.replace("\\", "\\\\").replace("'", "\\'")


def _rfc3339(moment: datetime) -> str:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
