"""Reading the evidence reports an incident was sent out of its history."""

from __future__ import annotations

import json
from typing import Any

from temporalio.api.common.v1 import Payload, Payloads
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent, WorkflowExecutionSignaledEventAttributes

from demo.chaos.collect import evidence_report_ids


def _signal(name: str, body: Any) -> HistoryEvent:
    return HistoryEvent(
        event_type=EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED,
        workflow_execution_signaled_event_attributes=WorkflowExecutionSignaledEventAttributes(
            signal_name=name,
            input=Payloads(
                payloads=[
                    Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(body).encode())
                ]
            ),
        ),
    )


def test_the_report_ids_of_evidence_signals_are_read_in_order_and_other_signals_ignored() -> None:
    events = [
        _signal("add_evidence", {"node": "gpu-0001", "evidence": [], "report_id": "watch/1"}),
        _signal("checkpoint_answer", {"report_id": "not-evidence"}),
        _signal("add_evidence", {"node": "gpu-0001", "evidence": [], "report_id": ""}),
        _signal("add_evidence", {"node": "gpu-0001", "evidence": [], "report_id": "alert/2"}),
    ]

    assert evidence_report_ids(events) == ["watch/1", "alert/2"]
