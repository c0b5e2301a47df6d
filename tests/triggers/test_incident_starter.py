"""IncidentStarter: one incident per node; a recovery never opens one."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from temporalio.client import Client, WorkflowExecutionStatus

from gpu_remediation.models import ConditionEvidence
from gpu_remediation.policy_loader import load_policy
from triggers.starter import IncidentStarter


def _condition(*, cleared: bool) -> ConditionEvidence:
    return ConditionEvidence(
        observed_at=datetime.now(UTC),
        source="test",
        type="Ready",
        status="True" if cleared else "False",
        cleared=cleared,
    )


def _starter(client: Client, task_queue: str) -> IncidentStarter:
    # No worker polls this queue: the runs stay open, which is all these tests need.
    return IncidentStarter(
        client, cluster=f"c{uuid.uuid4().hex[:8]}", policy=load_policy(), task_queue=task_queue
    )


async def test_a_recovery_without_an_open_incident_starts_nothing(
    dev_client: Client, task_queue: str
) -> None:
    starter = _starter(dev_client, task_queue)
    assert not await starter.report_recovery("gpu-r1", [_condition(cleared=True)])
    runs = [
        e
        async for e in dev_client.list_workflows(f"WorkflowId = '{starter.workflow_id('gpu-r1')}'")
    ]
    assert runs == []


async def test_reports_and_recoveries_reach_the_one_open_incident(
    dev_client: Client, task_queue: str
) -> None:
    starter = _starter(dev_client, task_queue)
    first = await starter.report("gpu-r2", [_condition(cleared=False)], report_id="a")
    second = await starter.report("gpu-r2", [_condition(cleared=False)], report_id="b")
    assert first == second
    assert await starter.report_recovery("gpu-r2", [_condition(cleared=True)])
    description = await dev_client.get_workflow_handle(first).describe()
    assert description.status == WorkflowExecutionStatus.RUNNING
    history = await dev_client.get_workflow_handle(first).fetch_history()
    signals = [
        e for e in history.events if e.HasField("workflow_execution_signaled_event_attributes")
    ]
    assert len(signals) == 3
    await dev_client.get_workflow_handle(first).terminate("test done")


async def test_an_invalid_node_name_is_refused_before_temporal_is_called(
    dev_client: Client, task_queue: str
) -> None:
    starter = _starter(dev_client, task_queue)
    with pytest.raises(ValueError, match="node"):
        await starter.report("Not_A_Node", [_condition(cleared=False)])
    with pytest.raises(ValueError, match="node"):
        await starter.report_recovery("Not_A_Node", [_condition(cleared=True)])
