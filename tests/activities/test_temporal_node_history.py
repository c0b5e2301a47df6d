"""A node's history: a straggler report nothing confirmed is not an incident of the node.

A tenant writes the step times a straggler report comes from, so such runs must
not make the node a repeat offender (straight to replacement) nor spend its
budgets. The listing is served by a visibility of fixed runs, filtered by the
project's own query evaluator.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.testing import ActivityEnvironment

from activities.temporal import TemporalActivities
from gpu_remediation.contracts import LookupNodeHistoryInput
from gpu_remediation.ids import NODE_WORKFLOW_TYPE, node_workflow_id
from gpu_remediation.search_attributes import SA_FAULT_CLASS, SA_OUTCOME
from gpu_remediation.visibility import Execution, parse_query

T0 = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
WORKFLOW_ID = node_workflow_id("c1", "gpu-1")


class FixedRuns:
    """A visibility that lists the given runs the query matches."""

    def __init__(self, runs: list[Execution]) -> None:
        self.runs = runs

    async def list(
        self, query: str, *, limit: int | None = None, **_: Any
    ) -> AsyncIterator[Execution]:
        parsed = parse_query(query)
        for execution in self.runs[:limit]:
            if parsed.matches(execution):
                yield execution

    async def count(self, query: str, **_: Any) -> int:
        return len([e async for e in self.list(query)])


def closed_run(run_id: str, fault_class: str, outcome: str) -> Execution:
    # FAILED runs count without their result being read (no client needed here).
    return Execution(
        id=WORKFLOW_ID,
        run_id=run_id,
        workflow_type=NODE_WORKFLOW_TYPE,
        status=WorkflowExecutionStatus.FAILED,
        start_time=T0,
        close_time=T0 + timedelta(minutes=30),
        search_attributes=TypedSearchAttributes(
            [
                SearchAttributePair(SA_FAULT_CLASS, fault_class),
                SearchAttributePair(SA_OUTCOME, outcome),
            ]
        ),
    )


async def incidents(*runs: Execution) -> int:
    activities = TemporalActivities(cast(Client, None), visibility=FixedRuns(list(runs)))
    history = await ActivityEnvironment().run(
        activities.lookup_node_history,
        LookupNodeHistoryInput(
            workflow_id=WORKFLOW_ID,
            current_run_id="current",
            incidents_since=T0 - timedelta(days=1),
            attempts_since=T0 - timedelta(days=1),
        ),
    )
    return history.incidents


async def test_a_straggler_report_nothing_confirmed_is_not_an_incident() -> None:
    assert await incidents(closed_run("1", "straggler", "no_fault_found")) == 0
    assert await incidents(closed_run("2", "straggler", "escalated")) == 0


async def test_a_straggler_the_diagnostic_confirmed_is_one() -> None:
    # The diagnostic's findings re-classified the run: its class is the fault's.
    assert await incidents(closed_run("1", "gpu_reset_required", "repaired")) == 1
    assert await incidents(closed_run("1", "hardware_failure", "replaced")) == 1


async def test_degradation_incidents_count_towards_the_repeat_offender_rule() -> None:
    # Issue 37: a node slow again and again is a repeat offender like a faulty one.
    assert await incidents(closed_run("1", "gpu_degraded", "repaired")) == 1
    assert await incidents(closed_run("1", "efa_degraded", "repaired")) == 1
