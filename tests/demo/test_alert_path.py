"""Alerts into incidents through the production receiver, in its own process, killed midway.

The simulated Alertmanager notifies the receiver (``demo.receiver_process``: the
production app) on the session's Temporal dev server; no worker runs, so the
incident only collects its evidence signals, which is all that is checked here.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from demo.chaos.collect import alert_records, evidence_report_ids
from demo.receiver_process import ReceiverProcess, ReceiverSettings
from demo.server import free_port
from gpu_remediation.ids import node_workflow_id
from gpu_remediation.policy_loader import parse_policy
from simulator.alertmanager import (
    ALERT_NAME,
    NODE_LABEL,
    AlertmanagerTimings,
    SimulatedAlertmanager,
    SourceAlert,
)
from tests.conftest import assert_eventually

pytestmark = pytest.mark.timeout(90)

FAST = AlertmanagerTimings(
    rule_for=0.0,
    group_wait=0.2,
    group_interval=1.0,
    min_timeout=0.5,
    retry_initial=0.1,
    retry_max=0.3,
    request_timeout=2.0,
)
TOKEN = "chaos-receiver-token-0123456789"


@pytest_asyncio.fixture
async def receiver(dev_env: WorkflowEnvironment, tmp_path: Path) -> AsyncIterator[ReceiverProcess]:
    tag = uuid.uuid4().hex[:8]
    settings = ReceiverSettings(
        address=dev_env.client.service_client.config.target_host,
        namespace=dev_env.client.namespace,
        cluster=f"alerts-{tag}",
        task_queue=f"tq-alerts-{tag}",
        semaphore_workflow_id=f"semaphore-alerts-{tag}",
        policy=parse_policy("{}"),
        port=free_port(),
    )
    process = ReceiverProcess(settings, TOKEN, tmp_path)
    process.start()
    try:
        await process.wait_serving()
        yield process
    finally:
        process.kill()
        handle = dev_env.client.get_workflow_handle(node_workflow_id(settings.cluster, "gpu-0001"))
        with contextlib.suppress(RPCError):
            await handle.terminate(reason="end of the alert path test")


def _xid(node: str) -> SourceAlert:
    labels = {"alertname": ALERT_NAME, NODE_LABEL: node, "xid": "79", "gpu": "3"}
    return labels, {"summary": f"Xid 79 on GPU 3 of {node}"}


async def test_an_alert_notified_while_the_receiver_is_dead_reaches_the_incident_after_restart(
    dev_env: WorkflowEnvironment, receiver: ReceiverProcess
) -> None:
    firing = [_xid("gpu-0001")]
    await asyncio.to_thread(receiver.kill)
    alertmanager = SimulatedAlertmanager(receiver.url, TOKEN, lambda: list(firing), timings=FAST)
    with alertmanager:
        await assert_eventually(
            lambda: asyncio.sleep(0, alertmanager.failed_attempts),
            lambda failed: failed >= 2,
            message="notifications failing while the receiver is down",
        )
        assert alertmanager.undelivered() == {"gpu-0001"}
        receiver.start()  # same port, as a restarted pod behind its Service
        await receiver.wait_serving()
        await assert_eventually(
            lambda: asyncio.sleep(0, alertmanager.undelivered()),
            lambda nodes: not nodes,
            timeout=20,
            message="the Alertmanager's retries got through",
        )
        (record,) = alert_records(alertmanager.episodes())

    assert record.acknowledged_at is not None
    assert record.first_notified_at is not None
    assert record.first_notified_at < record.acknowledged_at
    handle = dev_env.client.get_workflow_handle(
        node_workflow_id(receiver.settings.cluster, "gpu-0001")
    )
    history = await handle.fetch_history()
    assert record.report_id in evidence_report_ids(history.events)
