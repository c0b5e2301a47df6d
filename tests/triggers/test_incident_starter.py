"""IncidentStarter: one incident per node; a recovery never opens one."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import UTC, datetime

import pytest
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowExecutionStatus

from gpu_remediation.evidence_history import received_reports
from gpu_remediation.models import ConditionEvidence
from gpu_remediation.policy_loader import load_policy
from gpu_remediation.workflow_models import NodeRemediationInput
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
    reports = [report for report, _ in received_reports(history.events)]
    assert [r.report_id for r in reports[:2]] == ["a", "b"]
    assert len(reports) == 3
    assert reports[2].evidence[0].cleared
    await dev_client.get_workflow_handle(first).terminate("test done")


async def test_an_invalid_node_name_is_refused_before_temporal_is_called(
    dev_client: Client, task_queue: str
) -> None:
    starter = _starter(dev_client, task_queue)
    with pytest.raises(ValueError, match="node"):
        await starter.report("Not_A_Node", [_condition(cleared=False)])
    with pytest.raises(ValueError, match="node"):
        await starter.report_recovery("Not_A_Node", [_condition(cleared=True)])


async def test_a_new_incident_carries_its_first_report_in_its_input(
    dev_client: Client, task_queue: str
) -> None:
    starter = _starter(dev_client, task_queue)
    workflow_id = await starter.report("gpu-r4", [_condition(cleared=False)], report_id="first")
    handle = dev_client.get_workflow_handle(workflow_id)
    history = await handle.fetch_history()
    assert _signals(history.events) == 0
    started = history.events[0].workflow_execution_started_event_attributes
    carried = NodeRemediationInput.model_validate_json(started.input.payloads[0].data)
    assert carried.evidence is not None
    assert carried.evidence.report_id == "first"
    await handle.terminate("test done")


async def test_a_report_for_an_incident_another_trigger_opened_is_signalled_to_it(
    dev_client: Client, task_queue: str
) -> None:
    opener = _starter(dev_client, task_queue)
    # Another process (the watcher, say) for the same cluster: it has not seen this incident.
    other = IncidentStarter(
        dev_client, cluster=opener.cluster, policy=load_policy(), task_queue=task_queue
    )
    first = await opener.report("gpu-r5", [_condition(cleared=False)], report_id="a")
    opened = (await dev_client.get_workflow_handle(first).describe()).run_id
    second = await other.report("gpu-r5", [_condition(cleared=False)], report_id="b")
    assert first == second
    handle = dev_client.get_workflow_handle(first)
    assert (await handle.describe()).run_id == opened
    history = await handle.fetch_history()
    assert [r.report_id for r, _ in received_reports(history.events)] == ["a", "b"]
    await handle.terminate("test done")


async def test_a_report_for_an_incident_closed_since_it_was_fed_opens_a_new_one(
    dev_client: Client, task_queue: str
) -> None:
    starter = _starter(dev_client, task_queue)
    workflow_id = await starter.report("gpu-r6", [_condition(cleared=False)], report_id="a")
    await dev_client.get_workflow_handle(workflow_id).terminate("closed behind the starter")
    await starter.report("gpu-r6", [_condition(cleared=False)], report_id="b")
    latest = dev_client.get_workflow_handle(workflow_id)
    assert (await latest.describe()).status == WorkflowExecutionStatus.RUNNING
    history = await latest.fetch_history()
    assert [r.report_id for r, _ in received_reports(history.events)] == ["b"]
    await latest.terminate("test done")


def _signals(events: Iterable[HistoryEvent]) -> int:
    return sum(1 for e in events if e.HasField("workflow_execution_signaled_event_attributes"))
