"""Collect a run's :class:`~demo.chaos.facts.RunFacts`: Temporal's side and the cloud's.

From Temporal, through the client only: every workflow whose id starts with
the cluster's prefix (incidents, burn-ins, permit guards) from visibility,
each one's history (the activities it scheduled, with inputs, results and
attempts; failed workflow tasks), and the replacement semaphore's holders (its
``state`` query). From the simulated cloud, through its APIs: the EC2 reboots
moto was asked for and the SSM GPU-reset commands it was sent. The nodes'
ground truth comes from the :class:`~demo.chaos.recorder.GroundTruthRecorder`.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from temporalio.api.common.v1 import Payloads
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from demo.chaos.facts import (
    ActivityRecord,
    ActivityStatus,
    AlertRecord,
    PermitHolder,
    PermitReleased,
    RunRecord,
    RunStatus,
)
from demo.incidents import Incident
from gpu_remediation.evidence_history import received_reports
from gpu_remediation.ids import Queries, Signals, node_workflow_id_prefix
from gpu_remediation.semaphore_models import SemaphoreState
from simulator.alertmanager import ZERO_TIME, AlertEpisode, rfc3339
from triggers.alerts import Alert, report_id

HISTORY_CONCURRENCY = 8
RESET_COMMENT = "gpu-remediation gpu_reset on "
"""How the SSM executor names a GPU reset command (``activities/host_ssm.py``)."""

BENIGN_TASK_FAILURES = frozenset(
    {
        # A signal or update arrived while the task completed: the SDK runs it again.
        WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND,
        WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_UPDATE,
        # The worker holding the sticky cache died: another one replays.
        WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_RESET_STICKY_TASK_QUEUE,
    }
)

CACHED_STATE_FAILURE = "Fatal error in workflow machines: "
"""How sdk-core names a failure of its state machines on a worker's cached state.

A legacy query answered on a worker that had not cached the run can run the
workflow past events its history has not yet closed a task on (a timer that
fired while the run's sticky worker was dead), and the worker keeps that state;
the next task's events then do not fit it. The run is evicted and the retry, a
full replay on a fresh cache, passes. ``read_history`` counts such a failure
apart only when the very next attempt completed: a failure of the workflow's own
code fails its replay too (docs/operations.md, "A workflow task failed once").
"""

_WORKER_FAILURE = (
    WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_WORKFLOW_WORKER_UNHANDLED_FAILURE
)

_STATUS: Mapping[WorkflowExecutionStatus, RunStatus] = {
    WorkflowExecutionStatus.RUNNING: "running",
    WorkflowExecutionStatus.COMPLETED: "completed",
    WorkflowExecutionStatus.FAILED: "failed",
    WorkflowExecutionStatus.CANCELED: "canceled",
    WorkflowExecutionStatus.TERMINATED: "terminated",
    WorkflowExecutionStatus.CONTINUED_AS_NEW: "continued_as_new",
    WorkflowExecutionStatus.TIMED_OUT: "timed_out",
}


def _first_payload(payloads: Payloads) -> dict[str, Any]:
    """The first payload as JSON (the pydantic converter writes ``json/plain``), else empty."""
    if not payloads.payloads:
        return {}
    try:
        value = json.loads(payloads.payloads[0].data)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {"value": value}


def _at(event: HistoryEvent) -> datetime:
    return event.event_time.ToDatetime(tzinfo=UTC)


def read_history(
    events: Iterable[HistoryEvent],
) -> tuple[list[ActivityRecord], list[str], list[str]]:
    """What a run's history says for the invariants.

    Returns:
        The activities it scheduled; its failed workflow tasks' (non-benign)
        causes; and the failures on a worker's cached state that the next
        attempt's replay passed (see :data:`CACHED_STATE_FAILURE`).
    """
    scheduled: dict[int, dict[str, Any]] = {}
    failures: list[str] = []
    replayed: list[str] = []
    cached_state_failure: str | None = None  # the last task failed so, not yet retried
    retrying = False  # the last task failed: its retries replay, so theirs are real
    closing: Mapping[int, tuple[str, ActivityStatus]] = {
        EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED: (
            "activity_task_completed_event_attributes",
            "completed",
        ),
        EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED: (
            "activity_task_failed_event_attributes",
            "failed",
        ),
        EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT: (
            "activity_task_timed_out_event_attributes",
            "timed_out",
        ),
        EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED: (
            "activity_task_canceled_event_attributes",
            "canceled",
        ),
    }
    for event in events:
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            if cached_state_failure:
                replayed.append(cached_state_failure)
            cached_state_failure, retrying = None, False
        if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            scheduled[event.event_id] = {
                "name": attrs.activity_type.name,
                "scheduled_at": _at(event),
                "input": _first_payload(attrs.input),
            }
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            started = event.activity_task_started_event_attributes
            if started.scheduled_event_id in scheduled:
                scheduled[started.scheduled_event_id]["attempts"] = started.attempt
        elif kind in closing:
            field, status = closing[kind]
            attrs = getattr(event, field)
            entry = scheduled.get(attrs.scheduled_event_id)
            if entry is None:
                continue
            entry.update(closed_at=_at(event), status=status)
            if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                entry["result"] = _first_payload(attrs.result)
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
            cause = event.workflow_task_failed_event_attributes.cause
            if cached_state_failure:  # its retry failed too: not the cache
                failures.append(cached_state_failure)
                cached_state_failure = None
            if cause not in BENIGN_TASK_FAILURES:
                message = event.workflow_task_failed_event_attributes.failure.message
                line = f"{WorkflowTaskFailedCause.Name(cause)}: {message[:200]}"
                if (
                    not retrying
                    and cause == _WORKER_FAILURE
                    and message.startswith(CACHED_STATE_FAILURE)
                ):
                    cached_state_failure = line
                else:
                    failures.append(line)
            retrying = True
    if cached_state_failure:  # never retried to completion
        failures.append(cached_state_failure)
    # A failing task is retried, and fails the same way each time: one line per cause.
    counted = Counter(failures)
    lines = [f"{cause} (x{n})" if n > 1 else cause for cause, n in counted.items()]
    return [ActivityRecord.model_validate(entry) for entry in scheduled.values()], lines, replayed


def evidence_report_ids(events: Iterable[HistoryEvent]) -> list[str]:
    """The report ids of the evidence a run was sent (its start's and its signals'), in order."""
    return [report.report_id for report, _ in received_reports(events) if report.report_id]


def permits_released(events: Iterable[HistoryEvent]) -> list[PermitReleased]:
    """The permits a run gave back itself: its ``release_permit`` signals, when sent."""
    released = []
    for event in events:
        if event.event_type != EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED:
            continue
        attrs = event.signal_external_workflow_execution_initiated_event_attributes
        if attrs.signal_name != Signals.RELEASE_PERMIT:
            continue
        request_id = _first_payload(attrs.input).get("request_id")
        if isinstance(request_id, str):
            released.append(PermitReleased(at=_at(event), request_id=request_id))
    return released


def alert_records(episodes: Iterable[AlertEpisode]) -> list[AlertRecord]:
    """The Alertmanager's alert episodes, each with the report id the receiver gives it."""
    records = []
    for episode in episodes:
        # Parsed from JSON as the receiver parses the webhook: the same id, to the microsecond.
        alert = Alert.model_validate_json(
            json.dumps(
                {
                    "status": "firing",
                    "labels": episode.labels,
                    "startsAt": rfc3339(episode.starts_at),
                    "endsAt": ZERO_TIME,
                    "fingerprint": episode.fingerprint,
                }
            )
        )
        records.append(
            AlertRecord(
                node=episode.node,
                fingerprint=episode.fingerprint,
                report_id=report_id(alert),
                starts_at=episode.starts_at,
                ends_at=episode.ends_at,
                first_notified_at=episode.first_notified_at,
                acknowledged_at=episode.acknowledged_at,
            )
        )
    return records


def node_of(workflow_id: str, prefix: str) -> str | None:
    """The node an id of the cluster names (``<prefix><node>[/...]``), else None."""
    if not workflow_id.startswith(prefix):
        return None
    return workflow_id.removeprefix(prefix).split("/", 1)[0] or None


async def collect_runs(
    client: Client, cluster: str, incidents: Sequence[Incident] = ()
) -> list[RunRecord]:
    """Every run of the cluster's workflows, with its history read.

    Args:
        client: Temporal client.
        cluster: The run's cluster (the workflow id prefix).
        incidents: The demo's incidents with their last state, for outcomes and
            whether each has settled.
    """
    prefix = node_workflow_id_prefix(cluster)
    executions: list[WorkflowExecution] = [
        e async for e in client.list_workflows(f"WorkflowId STARTS_WITH '{prefix}'")
    ]
    known = {i.key: i for i in incidents}
    limit = asyncio.Semaphore(HISTORY_CONCURRENCY)

    async def one(execution: WorkflowExecution) -> RunRecord:
        async with limit:
            history = await client.get_workflow_handle(
                execution.id, run_id=execution.run_id
            ).fetch_history()
        activities, failures, replayed = read_history(history.events)
        incident = known.get((execution.id, execution.run_id))
        status = _STATUS.get(execution.status or WorkflowExecutionStatus.RUNNING, "running")
        waiting: list[str] = []
        waiting_for = None
        if status == "running" and incident is not None:
            async with limit:
                waiting = await pending_activities(client, execution.id, execution.run_id)
            waiting_for = incident.state.waiting_for if incident.state is not None else None
        return RunRecord(
            workflow_id=execution.id,
            run_id=execution.run_id,
            workflow_type=execution.workflow_type,
            node=node_of(execution.id, prefix),
            status=status,
            started_at=execution.start_time,
            closed_at=execution.close_time,
            outcome=incident.result if incident is not None else None,
            settled=incident.settled if incident is not None else True,
            activities=activities,
            task_failures=failures,
            task_failures_replayed=replayed,
            waiting_on=waiting,
            waiting_for=waiting_for,
            report_ids=evidence_report_ids(history.events),
            permits_released=permits_released(history.events),
        )

    return list(await asyncio.gather(*(one(e) for e in executions)))


async def pending_activities(client: Client, workflow_id: str, run_id: str) -> list[str]:
    """A run's pending activities, each as ``name (attempt N[, after: last failure])``."""
    described = await client.get_workflow_handle(workflow_id, run_id=run_id).describe()
    found = []
    for pending in described.raw_description.pending_activities:
        text = f"{pending.activity_type.name} (attempt {pending.attempt}"
        if pending.last_failure.message:
            text += f", after: {pending.last_failure.message[:120]}"
        found.append(text + ")")
    return found


async def semaphore_run(client: Client, semaphore_workflow_id: str) -> RunRecord | None:
    """The replacement semaphore's latest run (its history is not read), None if never started."""
    try:
        described = await client.get_workflow_handle(semaphore_workflow_id).describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    return RunRecord(
        workflow_id=described.id,
        run_id=described.run_id,
        workflow_type=described.workflow_type,
        status=_STATUS.get(described.status or WorkflowExecutionStatus.RUNNING, "running"),
        started_at=described.start_time,
        closed_at=described.close_time,
    )


async def permit_holders(client: Client, semaphore_workflow_id: str) -> list[PermitHolder]:
    """The semaphore's holders now (none if it was never started)."""
    try:
        state = await client.get_workflow_handle(semaphore_workflow_id).query(
            Queries.STATE, result_type=SemaphoreState
        )
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return []
        raise
    return [
        PermitHolder(
            holder_workflow_id=h.holder_workflow_id,
            holder_run_id=h.holder_run_id,
            request_id=h.request_id,
        )
        for h in state.holders
    ]


def reboot_requests(rebooted: Iterable[str], nodes: Mapping[str, str]) -> dict[str, int]:
    """EC2 reboot requests per node, from the instance ids moto was asked to reboot."""
    return dict(Counter(nodes.get(instance, instance) for instance in rebooted))


def gpu_resets_sent(ssm: Any) -> dict[str, int]:
    """SSM GPU-reset commands per node, from the command list (``ssm.list_commands``)."""
    counts: Counter[str] = Counter()
    token: str | None = None
    while True:
        page = ssm.list_commands(**({"NextToken": token} if token else {}))
        for command in page.get("Commands", []):
            comment = str(command.get("Comment") or "")
            if comment.startswith(RESET_COMMENT):
                # ``<node> [<tag of the activity>]`` (activities/host_ssm.py, _comment).
                counts[comment.removeprefix(RESET_COMMENT).split(" [", 1)[0]] += 1
        token = page.get("NextToken")
        if not token:
            return dict(counts)
