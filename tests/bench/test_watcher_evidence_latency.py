"""The watcher benchmark reads when each incident took its evidence from the server's history."""

import time
import uuid
from datetime import UTC, datetime

from temporalio.client import Client

from bench.watcher import CONDITION, XID_MESSAGE, latencies
from gpu_remediation.models import ConditionEvidence
from gpu_remediation.policy_loader import load_policy
from tests.triggers.watcher_support import terminate_incidents
from triggers.starter import IncidentStarter


async def test_each_reported_node_has_a_latency_and_an_unreported_one_is_lost(
    dev_client: Client, task_queue: str
) -> None:
    cluster = f"wl{uuid.uuid4().hex[:8]}"
    starter = IncidentStarter(
        dev_client, cluster=cluster, policy=load_policy(), task_queue=task_queue
    )
    trues: dict[str, float] = {}
    for node in ("gpu-a", "gpu-b"):
        trues[node] = time.time()
        evidence = ConditionEvidence(
            observed_at=datetime.now(UTC),
            source="test",
            type=CONDITION,
            status="True",
            reason="GpuHealthCheckFailed",
            message=XID_MESSAGE,
        )
        await starter.report(node, [evidence], report_id=f"test/{node}")
    trues["gpu-never"] = time.time()  # went True, but nobody reported it
    try:
        lags, lost = await latencies(dev_client, cluster, trues, drain_s=1.0)
    finally:
        await terminate_incidents(dev_client, cluster, "gpu-a", "gpu-b")
    assert lost == ["gpu-never"]
    assert len(lags) == 2
    assert all(0 <= lag < 10 for lag in lags), lags
