"""What the receiver delivers: evidence, clearing evidence, and one incident per node."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment

from gpu_remediation.models import AlertEvidence, Outcome
from tests.conftest import assert_eventually
from tests.triggers.receiver_support import (
    alert,
    describe,
    iso,
    payload,
    receiver,
    reports_received,
)
from tests.workflows.node_support import cluster, policy
from workflows.node_remediation import NodeRemediationWorkflow


async def test_a_resolved_alert_clears_the_incident_it_opened(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    started = datetime.now(UTC)
    # An alert the catalog cannot name is class "unknown": 2 minutes of grace by default.
    firing = alert("gpu-20", fingerprint="fp20", starts_at=started, alertname="GpuOddity")
    del firing["labels"]["xid"]
    async with (
        cluster(dev_env, task_queue) as c,
        receiver(
            dev_env.client,
            cluster=c.name,
            task_queue=task_queue,
            semaphore_workflow_id=c.semaphore_id,
            policy=policy(),
        ) as rx,
    ):
        assert (await rx.post(payload(firing))).json()["delivered"] == 1
        handle = dev_env.client.get_workflow_handle_for(
            NodeRemediationWorkflow.run, rx.workflow_id("gpu-20")
        )
        await assert_eventually(lambda: c.state(handle), lambda s: s.stage == "grace")
        resolved = {**firing, "status": "resolved", "endsAt": iso(started + timedelta(seconds=30))}
        answer = (await rx.post(payload(resolved))).json()
        assert answer["results"][0]["outcome"] == "delivered"
        result = await handle.result()
        state = await c.state(handle)
    assert result.outcome == Outcome.TRANSIENT
    assert c.fleet.side_effects() == []
    cleared = [e for e in state.evidence if isinstance(e, AlertEvidence) and e.cleared]
    assert len(cleared) == 1
    assert cleared[0].fingerprint == "fp20"


async def test_a_resolved_alert_without_an_open_incident_starts_nothing(
    dev_client: Client,
) -> None:
    ended = datetime.now(UTC)
    resolved = alert("gpu-21", status="resolved", starts_at=ended - timedelta(minutes=5))
    async with receiver(dev_client) as rx:
        response = await rx.post(payload(resolved))
        assert response.status_code == 200, response.text
        answer = response.json()
        assert answer["no_incident"] == 1
        assert answer["results"][0]["outcome"] == "no_incident"
        assert not await rx.started("gpu-21")


async def test_firing_and_resolved_for_many_nodes_in_one_payload(dev_client: Client) -> None:
    firing = [alert(f"gpu-{i}") for i in range(30)]
    resolved = [alert(f"idle-{i}", status="resolved") for i in range(5)]
    async with receiver(dev_client, max_in_flight=4) as rx:
        answer = (await rx.post(payload(*firing, *resolved))).json()
        assert (answer["delivered"], answer["no_incident"]) == (30, 5)
        assert [r["index"] for r in answer["results"]] == list(range(35))
        for i in range(30):
            assert await rx.started(f"gpu-{i}")


async def test_a_thousand_duplicate_alerts_make_one_workflow_and_one_report(
    dev_client: Client,
) -> None:
    duplicate = alert("gpu-22", fingerprint="dup22")
    async with receiver(dev_client) as rx:
        responses = await asyncio.gather(*(rx.post(payload(*[duplicate] * 100)) for _ in range(10)))
        answers = [r.json() for r in responses]
        assert sum(a["delivered"] for a in answers) == 1
        assert sum(a["duplicates"] for a in answers) == 999
        workflow_id = rx.workflow_id("gpu-22")
        run_ids = {r["workflow_id"] for a in answers for r in a["results"]}
        assert run_ids == {workflow_id}
        description = await describe(dev_client, workflow_id)
        assert description is not None
        assert description.status == WorkflowExecutionStatus.RUNNING
        assert await reports_received(dev_client, workflow_id) == 1


async def test_without_the_receiver_cache_the_workflow_still_makes_one_incident(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    duplicate = alert("gpu-23", fingerprint="dup23", alertname="GpuOddity")
    del duplicate["labels"]["xid"]  # class unknown: the incident waits in grace meanwhile
    async with (
        cluster(dev_env, task_queue) as c,
        receiver(
            dev_env.client,
            cluster=c.name,
            task_queue=task_queue,
            semaphore_workflow_id=c.semaphore_id,
            policy=policy(),
            dedup_size=0,
        ) as rx,
    ):
        responses = await asyncio.gather(*(rx.post(payload(*[duplicate] * 100)) for _ in range(10)))
        assert sum(r.json()["delivered"] for r in responses) == 1000
        workflow_id = rx.workflow_id("gpu-23")
        # Signals that arrive during a workflow task are written to the history
        # when the task completes: wait for all of them.
        await assert_eventually(
            lambda: reports_received(dev_env.client, workflow_id), lambda n: n == 1000, timeout=20
        )
        handle = dev_env.client.get_workflow_handle_for(NodeRemediationWorkflow.run, workflow_id)
        state = await assert_eventually(
            lambda: c.state(handle), lambda s: s.stage == "grace", timeout=20
        )
        assert len(state.evidence) == 1
        description = await describe(dev_env.client, workflow_id)
        assert description is not None
        assert description.status == WorkflowExecutionStatus.RUNNING
        await handle.terminate("test over")
