"""Reading the evidence reports an incident was sent out of its history."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from temporalio.api.common.v1 import Payload, Payloads, WorkflowType
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import (
    HistoryEvent,
    WorkflowExecutionSignaledEventAttributes,
    WorkflowExecutionStartedEventAttributes,
)

from demo.chaos.collect import evidence_report_ids
from gpu_remediation.ids import NODE_WORKFLOW_TYPE
from gpu_remediation.models import EvidenceReport
from gpu_remediation.policy_loader import load_policy
from gpu_remediation.workflow_models import NodeRemediationInput
from tests.workflows.node_support import xid


def _payloads(body: Any) -> Payloads:
    data = json.dumps(body).encode()
    return Payloads(payloads=[Payload(metadata={"encoding": b"json/plain"}, data=data)])


def _report(report_id: str) -> EvidenceReport:
    return EvidenceReport(node="gpu-0001", evidence=[xid(79)], report_id=report_id)


def _signal(name: str, body: Any) -> HistoryEvent:
    return HistoryEvent(
        event_type=EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED,
        workflow_execution_signaled_event_attributes=WorkflowExecutionSignaledEventAttributes(
            signal_name=name, input=_payloads(body)
        ),
    )


def _evidence(report_id: str) -> HistoryEvent:
    return _signal("add_evidence", _report(report_id).model_dump(mode="json"))


def _started(carried: EvidenceReport | None) -> HistoryEvent:
    start = NodeRemediationInput(
        cluster="c", node="gpu-0001", policy=load_policy(), evidence=carried
    )
    return _started_as(NODE_WORKFLOW_TYPE, start.model_dump(mode="json"))


def _started_as(workflow_type: str, body: Any) -> HistoryEvent:
    event = HistoryEvent(
        event_type=EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED,
        workflow_execution_started_event_attributes=WorkflowExecutionStartedEventAttributes(
            workflow_type=WorkflowType(name=workflow_type), input=_payloads(body)
        ),
    )
    event.event_time.FromDatetime(datetime(2026, 12, 5, tzinfo=UTC))
    return event


def test_the_report_ids_of_evidence_signals_are_read_in_order_and_other_signals_ignored() -> None:
    events = [
        _started(None),
        _evidence("watch/1"),
        _signal("checkpoint_answer", {"report_id": "not-evidence"}),
        _evidence(""),
        _evidence("alert/2"),
    ]

    assert evidence_report_ids(events) == ["watch/1", "alert/2"]


def test_the_report_a_start_carried_in_its_input_comes_first() -> None:
    events = [_started(_report("alert/0")), _evidence("watch/1")]

    assert evidence_report_ids(events) == ["alert/0", "watch/1"]


def test_a_start_of_another_workflow_type_under_the_node_is_not_read_as_an_incident() -> None:
    # A permit guard's id starts with its incident's; its input is not an incident's.
    guard = _started_as("PermitGuard", {"holder_workflow_id": "gpu-remediation/c/gpu-0001"})

    assert evidence_report_ids([guard, _evidence("watch/1")]) == ["watch/1"]
