"""Activities wait for the world in real time, or on the test server's clock (clock-free)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from activities.world_time import REAL_TIME, TestServerTime, WorldTime
from simulator.fleet.clock import SteppedClock
from simulator.fleet.scheduler import Scheduler
from whatif.server_time import ServerTimeDriver

WORLD: list[WorldTime] = []


@activity.defn(name="wait_two_hours")
async def wait_two_hours() -> float:
    world = WORLD[0]
    began = await world.now()
    while await world.now() - began < 7200:
        activity.heartbeat()
        await world.sleep(15)
    return await world.now() - began


@workflow.defn(name="WaitsForTheWorld", sandboxed=False)
class WaitsForTheWorld:
    @workflow.run
    async def run(self) -> float:
        return await workflow.execute_activity(
            wait_two_hours, start_to_close_timeout=timedelta(hours=3)
        )


@pytest.mark.integration
async def test_an_activity_waits_two_hours_of_the_servers_time_without_waiting_them(
    own_time_skipping_env: WorkflowEnvironment,
) -> None:
    client = await Client.connect(
        own_time_skipping_env.client.service_client.config.target_host,
        data_converter=pydantic_data_converter,
    )
    WORLD[:] = [TestServerTime(client)]
    clock = SteppedClock()
    scheduler = Scheduler(clock, name="test-world-time")
    driver = ServerTimeDriver(client, clock, scheduler)
    await driver.start()
    clock.start()
    scheduler.start()
    queue = f"world-time-{uuid.uuid4().hex[:6]}"
    try:
        async with Worker(
            client, task_queue=queue, workflows=[WaitsForTheWorld], activities=[wait_two_hours]
        ):
            waited = await client.execute_workflow(WaitsForTheWorld.run, id=queue, task_queue=queue)
    finally:
        await driver.stop()
        scheduler.stop()
    # Two hours of the server's clock (15-second looks), and the fleet's clock went with it.
    assert 7200 <= waited < 7200 + 30
    assert clock.now() >= 7200


@pytest.mark.unit
async def test_real_time_is_the_event_loops() -> None:
    before = await REAL_TIME.now()
    await REAL_TIME.sleep(0)
    assert await REAL_TIME.now() >= before
    assert (await REAL_TIME.wall()).tzinfo is not None
