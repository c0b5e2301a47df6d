"""A real ladder run on the dev server: the worker's metrics endpoint counts it, and
every log line of its activities is JSON naming the node, the workflow and the rung.

One incident runs through the production activities (Kubernetes API emulator,
moto for EC2/SSM), on a worker whose client has the service runtime with a
Prometheus endpoint; the tests scrape that endpoint over HTTP.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import pytest_asyncio
from temporalio.testing import WorkflowEnvironment

from demo.server import free_port
from gpu_remediation.ids import Signals, node_workflow_id
from gpu_remediation.models import EvidenceReport, Outcome, XidEvidence
from gpu_remediation.settings import Settings
from gpu_remediation.workflow_models import NodeRemediationInput, NodeRemediationResult
from simulator.aws import moto_cloud
from simulator.kube_api import KubeApiServer, KubeStore
from tests.conftest import assert_eventually, own_semaphore
from tests.deploy.support import (
    Sample,
    json_log_capture,
    metrics_client,
    scrape,
    value,
)
from tests.test_worker_real_activities import simulate_hosts
from tests.workflows.node_support import policy
from worker import build_worker, production_activities
from workflows import metrics
from workflows.node_remediation import NodeRemediationWorkflow


@dataclass
class LadderRun:
    result: NodeRemediationResult
    workflow_id: str
    task_queue: str
    metrics_url: str
    families: dict[str, list[Sample]]
    logs: list[dict[str, Any]]


@pytest_asyncio.fixture(scope="module")
async def ladder(dev_env: WorkflowEnvironment) -> AsyncIterator[LadderRun]:
    port = free_port()
    client = await metrics_client(dev_env.client, port)
    task_queue = f"tq-{uuid.uuid4()}"
    cluster = f"c{uuid.uuid4().hex[:8]}"
    workflow_id = node_workflow_id(cluster, "gpu-1")
    with (
        pytest.MonkeyPatch.context() as env,
        moto_cloud() as cloud,
        KubeApiServer(KubeStore()) as kube,
    ):
        env.setenv("AWS_ACCESS_KEY_ID", "testing")
        env.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        store = kube.store
        (instance,) = cloud.run_instances(1)
        store.put_node(
            "gpu-1", node_pool="h100", provider_id=f"aws:///us-west-2a/{instance}", boot_id="boot-0"
        )
        for peer in range(9):
            store.put_node(f"gpu-peer-{peer}", node_pool="h100")
        store.put_pod("ml", "trainer-0", node_name="gpu-1", gpus=8)
        simulate_hosts(cloud, store)
        # A concurrent writer (409) and an API hiccup (500): both show in the logs.
        kube.faults.inject(r"^/api/v1/nodes/gpu-1$", method="PATCH", status=409, times=1)
        kube.faults.inject(r"^/api/v1/nodes/gpu-1$", method="GET", status=500, times=1)
        settings = Settings(
            kube_api_url=kube.url,
            aws_endpoint_url=cloud.endpoint_url,
            poll_interval=timedelta(milliseconds=20),
            eviction_retry=timedelta(milliseconds=20),
        )
        with json_log_capture() as logs:
            async with build_worker(client, production_activities(settings), task_queue):
                handle = await client.start_workflow(
                    NodeRemediationWorkflow.run,
                    NodeRemediationInput(
                        cluster=cluster,
                        node="gpu-1",
                        policy=policy(),
                        semaphore_workflow_id=own_semaphore(),
                    ),
                    id=workflow_id,
                    task_queue=task_queue,
                    start_signal=Signals.EVIDENCE,
                    start_signal_args=[
                        EvidenceReport(
                            node="gpu-1",
                            evidence=[
                                XidEvidence(
                                    observed_at=datetime.now(UTC),
                                    source="test",
                                    xid=48,
                                    gpu_index=2,
                                )
                            ],
                        )
                    ],
                )
                result = await handle.result()
                url = f"http://127.0.0.1:{port}/metrics"
                families = await assert_eventually(
                    lambda: _scrape(url),
                    lambda f: value(f, metrics.INCIDENTS) is not None,
                    message="the incident is counted",
                )
    yield LadderRun(result, workflow_id, task_queue, url, families, logs)


async def _scrape(url: str) -> dict[str, list[Sample]]:
    return scrape(url)


async def test_the_ladder_repaired_the_node_by_reboot(ladder: LadderRun) -> None:
    assert ladder.result.outcome == Outcome.REPAIRED
    assert [r.value for r in ladder.result.rungs_tried] == ["stop_gpu_work", "gpu_reset", "reboot"]


async def test_the_closed_incident_is_counted_by_fault_class_outcome_and_pool(
    ladder: LadderRun,
) -> None:
    fault = ladder.result.fault_class
    assert fault is not None
    labels = {"fault_class": fault.value, "outcome": "repaired", "node_pool": "h100"}
    assert value(ladder.families, metrics.INCIDENTS, **labels) == 1
    assert value(ladder.families, metrics.INCIDENT_DURATION + "_count", **labels) == 1
    assert value(ladder.families, metrics.TIME_TO_REPAIR + "_count", outcome="repaired") == 1


async def test_each_rung_is_timed_with_its_result(ladder: LadderRun) -> None:
    count = metrics.RUNG_DURATION + "_count"
    # The reset was not supported on EC2: the ladder climbed; the reboot fixed it.
    assert value(ladder.families, count, rung="gpu_reset", result="climbed") == 1
    assert value(ladder.families, count, rung="reboot", result="fixed") == 1
    assert value(ladder.families, count, rung="replace") is None
    reboot_seconds = value(ladder.families, metrics.RUNG_DURATION + "_sum", rung="reboot")
    assert reboot_seconds is not None
    assert 0 < reboot_seconds < 60


async def test_the_breaker_state_of_the_pool_is_published(ladder: LadderRun) -> None:
    # Before the reboot: 1 of the pool's 10 nodes unhealthy (the quarantined one).
    assert value(ladder.families, metrics.BREAKER_OPEN, node_pool="h100") == 0
    assert value(ladder.families, metrics.POOL_UNHEALTHY_RATIO, node_pool="h100") == 0.1
    assert value(ladder.families, metrics.BREAKER_BLOCKED) is None


async def test_workflow_metrics_carry_the_namespace_and_task_queue(ladder: LadderRun) -> None:
    [(_, labels, _)] = ladder.families[metrics.INCIDENTS.removesuffix("_total")]
    assert labels["task_queue"] == ladder.task_queue
    assert labels["namespace"] == "default"
    assert labels["workflow_type"] == "NodeRemediation"


async def test_the_sdk_runtime_metrics_are_exposed_on_the_same_endpoint(
    ladder: LadderRun,
) -> None:
    for family in (
        "temporal_workflow_completed",
        "temporal_workflow_task_execution_latency",
        "temporal_activity_execution_latency",
        "temporal_activity_execution_failed",
        "temporal_worker_task_slots_available",
        "temporal_request",
    ):
        assert family in ladder.families, sorted(ladder.families)
    completed = value(
        ladder.families, "temporal_workflow_completed", workflow_type="NodeRemediation"
    )
    assert completed is not None
    assert completed >= 1


async def test_every_activity_log_line_is_json_naming_node_workflow_and_rung(
    ladder: LadderRun,
) -> None:
    from_activities = [line for line in ladder.logs if "activity" in line]
    assert from_activities, ladder.logs
    for line in from_activities:
        assert line["node"] == "gpu-1", line
        assert line["workflow_id"] == ladder.workflow_id, line
        assert {"time", "level", "logger", "message", "rung"} <= line.keys()
    conflict = [line for line in from_activities if "changed underneath" in line["message"]]
    assert conflict, from_activities
    assert all(line["rung"] == "quarantine" for line in conflict)
    # The failed attempt (the 500) is logged by the SDK with the activity's details.
    failed = [line for line in from_activities if line["activity"] == "read_node_health"]
    assert any(line["level"] == "WARNING" for line in failed), from_activities


async def test_the_workflow_decision_lines_name_the_node_too(ladder: LadderRun) -> None:
    lines = [line for line in ladder.logs if line["logger"] == "temporalio.workflow"]
    # The semaphores' own lines (issue 35: a drain takes a permit) are plumbing.
    decisions = [line for line in lines if "semaphore" not in line["workflow_id"]]
    assert decisions
    assert all(line["node"] == "gpu-1" for line in decisions)
    assert all(line["workflow_id"] == ladder.workflow_id for line in decisions)
