"""The activities' own timeouts come from the policy the incident carries (``timeouts``).

They bound how soon a SIGKILLed worker's activities are retried. Histories
recorded before the section existed carry no ``timeouts``: their policy decodes
to the constants those histories were scheduled with, so they replay unchanged.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer

from gpu_remediation.admission_models import AdmissionInput
from gpu_remediation.ids import ADMISSION_WORKFLOW_TYPE, NODE_WORKFLOW_TYPE, Activities
from gpu_remediation.policy import ActivityTimeoutsPolicy, Policy
from gpu_remediation.policy_loader import PolicyError, parse_policy
from gpu_remediation.workflow_models import NodeRemediationInput
from tests.workflows.node_support import cluster, policy, xid
from worker import WORKFLOWS

HISTORIES = sorted(
    path
    for pattern in ("node_*.json", "admission_*.json")
    for path in (Path(__file__).parent / "histories").glob(pattern)
)
OWN_TIMEOUT = {Activities.ENSURE_SEMAPHORE}  # one start call, with its own constant


def _history(path: Path) -> WorkflowHistory:
    record = json.loads(path.read_text())
    return WorkflowHistory.from_json(record["workflow_id"], record["history"])


def _recorded_policy(history: WorkflowHistory) -> Policy:
    started = history.events[0].workflow_execution_started_event_attributes
    name = started.workflow_type.name
    types: dict[str, Any] = {
        NODE_WORKFLOW_TYPE: NodeRemediationInput,
        ADMISSION_WORKFLOW_TYPE: AdmissionInput,
    }
    (decoded,) = pydantic_data_converter.payload_converter.from_payloads(
        list(started.input.payloads), [types[name]]
    )
    return decoded.policy  # type: ignore[no-any-return]


def _scheduled(events: list[HistoryEvent]) -> list[tuple[str, timedelta, timedelta]]:
    """(activity type, start-to-close, heartbeat timeout) of every activity scheduled."""
    return [
        (
            e.activity_task_scheduled_event_attributes.activity_type.name,
            e.activity_task_scheduled_event_attributes.start_to_close_timeout.ToTimedelta(),
            e.activity_task_scheduled_event_attributes.heartbeat_timeout.ToTimedelta(),
        )
        for e in events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]


def _assert_scheduled_with(events: list[HistoryEvent], timeouts: ActivityTimeoutsPolicy) -> None:
    scheduled = [s for s in _scheduled(events) if s[0] not in OWN_TIMEOUT]
    heartbeating = [s for s in scheduled if s[2] > timedelta(0)]
    bookkeeping = [s for s in scheduled if s[2] == timedelta(0)]
    assert scheduled
    # The server caps a heartbeat timeout at the start-to-close (short burn-in checks).
    assert all(beat == min(timeouts.heartbeat, close) for _, close, beat in heartbeating), (
        heartbeating
    )
    assert {s[1] for s in bookkeeping} <= {timeouts.bookkeeping}, bookkeeping


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
def test_a_policy_recorded_before_timeouts_existed_decodes_to_what_its_history_scheduled(
    path: Path,
) -> None:
    history = _history(path)
    recorded = _recorded_policy(history)
    assert recorded.timeouts == ActivityTimeoutsPolicy()
    assert recorded.timeouts.bookkeeping == timedelta(seconds=60)
    assert recorded.timeouts.heartbeat == timedelta(minutes=2)
    _assert_scheduled_with(list(history.events), recorded.timeouts)


async def test_an_incident_schedules_its_activities_with_the_policys_timeouts_and_replays(
    time_skipping_env: WorkflowEnvironment, task_queue: str
) -> None:
    timeouts = ActivityTimeoutsPolicy(
        bookkeeping=timedelta(seconds=7), heartbeat=timedelta(seconds=13)
    )
    async with cluster(time_skipping_env, task_queue) as c:
        handle = await c.report("gpu-61", xid(48), pol=policy(timeouts=timeouts))
        await handle.result()
        history = await handle.fetch_history()

    _assert_scheduled_with(list(history.events), timeouts)
    assert any(beat > timedelta(0) for _, _, beat in _scheduled(list(history.events)))
    replayer = Replayer(workflows=list(WORKFLOWS), data_converter=pydantic_data_converter)
    result = await replayer.replay_workflow(history, raise_on_replay_failure=True)
    assert result.replay_failure is None


def test_the_shipped_policy_keeps_the_timeouts_incidents_always_had() -> None:
    shipped = parse_policy("{}").timeouts
    assert (shipped.bookkeeping, shipped.heartbeat) == (timedelta(seconds=60), timedelta(minutes=2))
    assert parse_policy("timeouts: {heartbeat: 30s}").timeouts.heartbeat == timedelta(seconds=30)


@pytest.mark.parametrize(
    "text", ["timeouts: {heartbeat: 500ms}", "timeouts: {bookkeeping: 2h}", "timeouts: {idle: 1m}"]
)
def test_activity_timeouts_out_of_range_or_unknown_are_refused(text: str) -> None:
    with pytest.raises(PolicyError, match="timeouts"):
        parse_policy(text)
