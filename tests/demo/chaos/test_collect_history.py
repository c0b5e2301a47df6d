"""Reading decisions out of recorded incident histories (``tests/workflows/histories``)."""

from __future__ import annotations

import json
from pathlib import Path

from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowHistory

from demo.chaos.collect import node_of, read_history
from gpu_remediation.ids import Activities

HISTORIES = Path(__file__).resolve().parents[2] / "workflows" / "histories"


def _history(name: str) -> WorkflowHistory:
    record = json.loads((HISTORIES / name).read_text())
    return WorkflowHistory.from_json(record["workflow_id"], record["history"])


def test_a_reboot_decision_carries_its_boot_ids_before_and_after() -> None:
    activities, failures = read_history(_history("node_reboot_repairs.json").events)
    (reboot,) = [a for a in activities if a.name == Activities.REBOOT_NODE]
    assert reboot.status == "completed"
    assert reboot.attempts == 1
    assert reboot.input["node"] == "gpu-h1"
    assert reboot.input["boot_id_before"] == "boot-0"
    assert reboot.result == {"boot_id_after": "boot-1", "rebooted_by_this_call": True}
    assert reboot.closed_at is not None
    assert reboot.closed_at > reboot.scheduled_at
    assert failures == []


def test_a_climb_to_replacement_shows_its_reset_reboot_and_claim_deletion_in_order() -> None:
    activities, _ = read_history(_history("node_climbs_to_replacement.json").events)
    corrective = [
        a.name
        for a in activities
        if a.name in (Activities.RESET_GPUS, Activities.REBOOT_NODE, Activities.DELETE_NODE_CLAIM)
    ]
    assert corrective == [
        Activities.RESET_GPUS,
        Activities.REBOOT_NODE,
        Activities.DELETE_NODE_CLAIM,
    ]
    (delete,) = [a for a in activities if a.name == Activities.DELETE_NODE_CLAIM]
    assert delete.result == {"node_claim": "claim-gpu-h2", "already_gone": False}


def test_the_node_is_read_from_incident_burn_in_and_guard_ids_of_the_cluster_only() -> None:
    prefix = "gpu-remediation/demo/"
    assert node_of("gpu-remediation/demo/gpu-0001", prefix) == "gpu-0001"
    assert node_of("gpu-remediation/demo/gpu-0001/admission/b-1", prefix) == "gpu-0001"
    assert node_of("gpu-remediation/demo/gpu-0001/permit-guard/q", prefix) == "gpu-0001"
    assert node_of("gpu-remediation/other/gpu-0001", prefix) is None


def _task_failed(cause: WorkflowTaskFailedCause.ValueType, message: str) -> HistoryEvent:
    event = HistoryEvent(event_type=EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED)
    event.workflow_task_failed_event_attributes.cause = cause
    event.workflow_task_failed_event_attributes.failure.message = message
    return event


def test_a_task_failing_the_same_way_on_each_retry_is_one_line_and_benign_causes_none() -> None:
    bug = WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_WORKFLOW_WORKER_UNHANDLED_FAILURE
    race = WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND
    events = [_task_failed(bug, "boom"), _task_failed(race, "signal"), _task_failed(bug, "boom")]
    _, failures = read_history(events)
    assert failures == ["WORKFLOW_TASK_FAILED_CAUSE_WORKFLOW_WORKER_UNHANDLED_FAILURE: boom (x2)"]
