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
RACE = "query_ran_a_fresh_copy_past_a_timer.json"
"""A chaos run's incident whose task failed once on a worker's cached state (its events
91-101; docs/operations.md, "A workflow task failed once, then went on")."""


def _history(name: str) -> WorkflowHistory:
    record = json.loads((HISTORIES / name).read_text())
    return WorkflowHistory.from_json(record["workflow_id"], record["history"])


def test_a_reboot_decision_carries_its_boot_ids_before_and_after() -> None:
    activities, failures, _ = read_history(_history("node_reboot_repairs.json").events)
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
    activities, _, _ = read_history(_history("node_climbs_to_replacement.json").events)
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
    _, failures, replayed = read_history(events)
    assert failures == ["WORKFLOW_TASK_FAILED_CAUSE_WORKFLOW_WORKER_UNHANDLED_FAILURE: boom (x2)"]
    assert replayed == []


def _task_completed() -> HistoryEvent:
    return HistoryEvent(event_type=EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED)


MACHINES = (
    "Fatal error in workflow machines: ActivityMachine in state "
    "ScheduledActivityCancelCommandCreated says the transition is invalid during event "
    "EventInfo { event_id: 93, event_type: ActivityTaskStarted }"
)
"""What sdk-core said in CI (and in RACE's history) when a legacy query had run a fresh
worker's copy of the workflow past the timer that fired while its sticky worker was dead."""


def test_a_machines_failure_that_the_next_attempt_passes_is_counted_apart() -> None:
    bug = WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_WORKFLOW_WORKER_UNHANDLED_FAILURE
    events = [_task_completed(), _task_failed(bug, MACHINES), _task_completed()]
    _, failures, replayed = read_history(events)
    assert failures == []
    assert replayed == [f"WORKFLOW_TASK_FAILED_CAUSE_WORKFLOW_WORKER_UNHANDLED_FAILURE: {MACHINES}"]


def test_a_machines_failure_is_a_failure_when_its_retry_fails_or_never_completes() -> None:
    bug = WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_WORKFLOW_WORKER_UNHANDLED_FAILURE
    line = f"WORKFLOW_TASK_FAILED_CAUSE_WORKFLOW_WORKER_UNHANDLED_FAILURE: {MACHINES}"
    again = [_task_failed(bug, MACHINES), _task_failed(bug, MACHINES), _task_completed()]
    assert read_history(again)[1:] == ([f"{line} (x2)"], [])
    last = [_task_completed(), _task_failed(bug, MACHINES)]
    assert read_history(last)[1:] == ([line], [])


def test_only_sdk_cores_machines_failures_are_given_a_replay() -> None:
    bug = WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_WORKFLOW_WORKER_UNHANDLED_FAILURE
    other = WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_NON_DETERMINISTIC_ERROR
    events = [_task_failed(bug, "boom"), _task_completed(), _task_failed(other, MACHINES)]
    events.append(_task_completed())
    _, failures, replayed = read_history(events)
    assert failures == [
        "WORKFLOW_TASK_FAILED_CAUSE_WORKFLOW_WORKER_UNHANDLED_FAILURE: boom",
        f"WORKFLOW_TASK_FAILED_CAUSE_NON_DETERMINISTIC_ERROR: {MACHINES}",
    ]
    assert replayed == []


def test_the_recorded_query_race_is_one_replayed_failure_and_no_violation() -> None:
    record = json.loads((Path(__file__).parent / "histories" / RACE).read_text())
    history = WorkflowHistory.from_json(record["workflow_id"], record["history"])
    _, failures, replayed = read_history(history.events)
    assert failures == []
    assert replayed == [f"WORKFLOW_TASK_FAILED_CAUSE_WORKFLOW_WORKER_UNHANDLED_FAILURE: {MACHINES}"]
