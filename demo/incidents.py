"""What the demo knows of the incidents: visibility lists and state queries.

Every incident is one run of a node's ``NodeRemediation`` workflow (a node can
have several runs). :class:`IncidentBook` lists the cluster's runs through
visibility (one call, with the search attributes the workflows keep up to
date) and asks each run for its full state (the ``state`` query: stage, rung,
outcome, attempts, decision log). A run's state is final once the run has
closed; a closed run's query is answered by the worker replaying its history,
so each closed run is asked once.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime, timedelta

from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
)
from temporalio.service import RPCError

from gpu_remediation.ids import NODE_WORKFLOW_TYPE, Queries, node_workflow_id
from gpu_remediation.models import Outcome, Rung
from gpu_remediation.search_attributes import SA_FAULT_CLASS, SA_NODE_POOL, SA_OUTCOME, SA_RUNG
from gpu_remediation.visibility import Execution, ServerVisibility, Visibility
from gpu_remediation.workflow_models import NodeRemediationState

QUERY_CONCURRENCY = 8
QUERY_TIMEOUT = timedelta(seconds=15)


@dataclass
class Incident:
    """One run of a node's workflow as last seen.

    Attributes:
        workflow_id: The node's workflow id.
        run_id: This run.
        node: The node.
        started_at: When the run started (real time).
        closed: Whether the run has closed.
        pool: Node pool (search attribute, then the state).
        fault_class: Fault class (search attribute, then the state).
        rung: Current or last rung.
        outcome: How it ended, or how it ended so far (a run stays open in cooldown).
        state: The last answer of the state query, if any.
        error: Why the last query failed, if it did.
    """

    workflow_id: str
    run_id: str
    node: str
    started_at: datetime
    closed: bool = False
    pool: str | None = None
    fault_class: str | None = None
    rung: str | None = None
    outcome: str | None = None
    state: NodeRemediationState | None = None
    state_final: bool = False
    error: str | None = None

    @property
    def key(self) -> tuple[str, str]:
        """Workflow id and run id."""
        return self.workflow_id, self.run_id

    @property
    def escalated(self) -> bool:
        """Handed to a human and waiting for one (the run closes only after the hold)."""
        state = self.state
        return (
            state is not None
            and state.outcome is None
            and state.rung == Rung.ESCALATE
            and state.waiting_for is not None
        )

    @property
    def settled(self) -> bool:
        """Whether the incident has its outcome: closed, released or replaced, or escalated."""
        if self.state is not None and self.state.outcome is not None:
            return True
        return self.closed or self.escalated

    @property
    def result(self) -> str:
        """The outcome so far (``escalated`` while waiting for an operator), else ``open``."""
        if self.state is not None and self.state.outcome is not None:
            return self.state.outcome.value
        if self.escalated:
            return Outcome.ESCALATED.value
        return self.outcome or ("closed" if self.closed else "open")


class IncidentBook:
    """The incidents of one cluster on one Temporal namespace.

    Args:
        client: Temporal client (pydantic data converter).
        cluster: The cluster the incidents belong to (their workflow id prefix).
        visibility: Where runs are listed; None: the server's visibility.
    """

    def __init__(self, client: Client, cluster: str, visibility: Visibility | None = None) -> None:
        self._client = client
        self._visibility = visibility or ServerVisibility(client)
        self._prefix = node_workflow_id(cluster, "n").removesuffix("n")
        self.incidents: dict[tuple[str, str], Incident] = {}

    @property
    def query(self) -> str:
        """The visibility query of this cluster's incidents."""
        # A run that continued as new is one incident with the run it continued in.
        return (
            f"WorkflowType = '{NODE_WORKFLOW_TYPE}' AND WorkflowId STARTS_WITH '{self._prefix}' "
            "AND ExecutionStatus != 'ContinuedAsNew'"
        )

    async def refresh_list(self) -> list[Incident]:
        """List the runs through visibility; returns them oldest first."""
        async for execution in self._visibility.list(self.query):
            self._seen(execution)
        return sorted(self.incidents.values(), key=lambda i: (i.started_at, i.node))

    def _seen(self, execution: Execution) -> None:
        key = (execution.id, execution.run_id)
        incident = self.incidents.get(key)
        if incident is None:
            incident = Incident(
                workflow_id=execution.id,
                run_id=execution.run_id,
                node=execution.id.removeprefix(self._prefix),
                started_at=execution.start_time,
            )
            self.incidents[key] = incident
        attributes = execution.search_attributes
        incident.closed = execution.status not in (None, WorkflowExecutionStatus.RUNNING)
        incident.pool = attributes.get(SA_NODE_POOL) or incident.pool
        incident.fault_class = attributes.get(SA_FAULT_CLASS) or incident.fault_class
        incident.rung = attributes.get(SA_RUNG) or incident.rung
        incident.outcome = attributes.get(SA_OUTCOME) or incident.outcome

    async def refresh_states(self, incidents: list[Incident] | None = None) -> None:
        """Query the state of these incidents (default: every one without a final state)."""
        todo = [
            i
            for i in (incidents if incidents is not None else self.incidents.values())
            if not i.state_final
        ]
        gate = asyncio.Semaphore(QUERY_CONCURRENCY)

        async def one(incident: Incident) -> None:
            async with gate:
                await self._query(incident)

        await asyncio.gather(*(one(i) for i in todo))

    async def _query(self, incident: Incident) -> None:
        closed = incident.closed
        handle = self._client.get_workflow_handle(incident.workflow_id, run_id=incident.run_id)
        try:
            state = await handle.query(
                Queries.STATE, result_type=NodeRemediationState, rpc_timeout=QUERY_TIMEOUT
            )
        except (RPCError, WorkflowQueryFailedError, WorkflowQueryRejectedError) as err:
            # Shown as "no state" and asked again on the next refresh; the
            # summary names incidents it never got an answer from.
            incident.error = str(err)
            return
        incident.error = None
        incident.state = state
        incident.state_final = closed
        incident.pool = state.node_pool or incident.pool
        incident.fault_class = state.fault_class.value if state.fault_class else None
        incident.rung = state.rung.value if state.rung else incident.rung
