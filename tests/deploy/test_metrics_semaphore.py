"""The replacement semaphore's holders and waiters, and replacements, show on /metrics."""

from __future__ import annotations

import asyncio

from temporalio.testing import WorkflowEnvironment

from demo.server import free_port
from gpu_remediation.policy import ReplacementPolicy
from tests.conftest import assert_eventually
from tests.deploy.support import Sample, metrics_client, scrape, value
from tests.doubles import FakeFleet
from tests.workflows.node_support import Cluster, policy, xid
from worker import build_worker
from workflows import metrics


async def test_holders_and_waiters_are_gauged_while_replacements_run(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    port = free_port()
    client = await metrics_client(dev_env.client, port)
    url = f"http://127.0.0.1:{port}/metrics"

    async def families() -> dict[str, list[Sample]]:
        return scrape(url)

    gate = asyncio.Event()
    fleet = FakeFleet(replace_gate=gate, pool_total=100)
    pol = policy(replacement=ReplacementPolicy(max_concurrent=1))
    cluster = Cluster(dev_env, task_queue, fleet)
    cluster.client = client
    sem = {"semaphore": cluster.semaphore_id}
    async with build_worker(client, fleet.activities(), task_queue):
        holder = await cluster.report("gpu-80", xid(79), pol=pol, prior_incidents=5)
        waiter = await cluster.report("gpu-81", xid(79), pol=pol, prior_incidents=5)
        await assert_eventually(
            families,
            lambda f: value(f, metrics.REPLACEMENTS_WAITING, **sem) == 1,
            message="one replacement waits for the permit",
        )
        seen = await families()
        assert value(seen, metrics.REPLACEMENTS_IN_FLIGHT, **sem) == 1
        assert value(seen, metrics.REPLACEMENT_CAPACITY, **sem) == 1
        gate.set()
        await holder.result()
        await waiter.result()
        # The last permit comes back through its guard just after the incident
        # closes (ADR 007).
        done = await assert_eventually(
            families,
            lambda f: (
                value(f, metrics.INCIDENTS, outcome="replaced") == 2
                and value(f, metrics.REPLACEMENTS_IN_FLIGHT, **sem) == 0
            ),
            message="both replacements are counted and their permits are back",
        )
    assert value(done, metrics.REPLACEMENTS_WAITING, **sem) == 0
    assert value(done, metrics.RUNG_DURATION + "_count", rung="replace", result="fixed") == 2
    assert value(done, metrics.TIME_TO_REPAIR + "_count", outcome="replaced") == 2
