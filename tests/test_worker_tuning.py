"""The worker's tuning comes from GPU_REMEDIATION_* settings and reaches the SDK's Worker."""

from __future__ import annotations

import uuid

import pytest
from temporalio.client import Client
from temporalio.worker import PollerBehaviorSimpleMaximum

from gpu_remediation.ids import Signals, node_workflow_id
from gpu_remediation.models import EvidenceReport, Outcome
from gpu_remediation.settings import Settings
from gpu_remediation.workflow_models import NodeRemediationInput
from tests.conftest import own_semaphore
from tests.doubles import FakeFleet
from tests.workflows.node_support import policy, xid
from worker import HEARTBEAT_NOW, build_worker, worker_tuning
from workflows.node_remediation import NodeRemediationWorkflow

TUNED = {
    "GPU_REMEDIATION_MAX_CONCURRENT_WORKFLOW_TASKS": "20",
    "GPU_REMEDIATION_MAX_CONCURRENT_ACTIVITIES": "30",
    "GPU_REMEDIATION_WORKFLOW_TASK_POLLERS": "4",
    "GPU_REMEDIATION_ACTIVITY_TASK_POLLERS": "3",
    "GPU_REMEDIATION_MAX_CACHED_WORKFLOWS": "50",
}


def test_no_tuning_settings_keep_the_sdk_defaults() -> None:
    assert worker_tuning(Settings.from_env({})) == {}


def test_each_tuning_variable_becomes_its_worker_option() -> None:
    assert worker_tuning(Settings.from_env(TUNED)) == {
        "max_concurrent_workflow_tasks": 20,
        "max_concurrent_activities": 30,
        "workflow_task_poller_behavior": PollerBehaviorSimpleMaximum(maximum=4),
        "activity_task_poller_behavior": PollerBehaviorSimpleMaximum(maximum=3),
        "max_cached_workflows": 50,
    }


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("GPU_REMEDIATION_WORKFLOW_TASK_POLLERS", "1"),
        ("GPU_REMEDIATION_MAX_CONCURRENT_WORKFLOW_TASKS", "1"),
        ("GPU_REMEDIATION_ACTIVITY_TASK_POLLERS", "0"),
        ("GPU_REMEDIATION_MAX_CONCURRENT_ACTIVITIES", "many"),
        ("GPU_REMEDIATION_MAX_CACHED_WORKFLOWS", "-1"),
    ],
)
def test_a_tuning_value_the_sdk_would_refuse_stops_the_worker_naming_the_variable(
    variable: str, value: str
) -> None:
    with pytest.raises(ValueError, match=variable):
        Settings.from_env({variable: value})


async def test_a_tuned_worker_runs_an_incident_to_its_end(
    dev_client: Client, task_queue: str
) -> None:
    node = f"tuned-{uuid.uuid4().hex[:8]}"
    tuning = worker_tuning(Settings.from_env(TUNED))
    worker = build_worker(
        dev_client, FakeFleet(reset_status="not_supported").activities(), task_queue, **tuning
    )
    async with worker:
        handle = await dev_client.start_workflow(
            NodeRemediationWorkflow.run,
            NodeRemediationInput(
                cluster="tuning", node=node, policy=policy(), semaphore_workflow_id=own_semaphore()
            ),
            id=node_workflow_id("tuning", node),
            task_queue=task_queue,
            start_signal=Signals.EVIDENCE,
            start_signal_args=[EvidenceReport(node=node, evidence=[xid(48, gpu=1)])],
        )
        result = await handle.result()
    assert result.outcome == Outcome.REPAIRED


def test_a_worker_on_the_test_servers_clock_sends_each_heartbeat_at_once() -> None:
    options = worker_tuning(Settings(world_time="test-server"))
    assert options["max_heartbeat_throttle_interval"] == HEARTBEAT_NOW
    assert options["default_heartbeat_throttle_interval"] == HEARTBEAT_NOW
    assert "max_heartbeat_throttle_interval" not in worker_tuning(Settings())
