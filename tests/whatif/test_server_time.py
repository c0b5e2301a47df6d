"""The clock-free comparison's clock: the fleet's events and Temporal's timers on one timeline."""

from __future__ import annotations

import asyncio
import functools
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import timedelta

import pytest
import pytest_asyncio
from temporalio import activity, workflow
from temporalio.api.testservice.v1 import LockTimeSkippingRequest, UnlockTimeSkippingRequest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from activities.world_time import TestServerTime
from simulator.fleet.clock import SteppedClock
from simulator.fleet.scheduler import Scheduler
from tests.conftest import assert_eventually
from whatif.server_time import Barrier, ServerTimeDriver, ServerTimeStuck

STEP = 15.0


@pytest_asyncio.fixture
async def plain_client(own_time_skipping_env: WorkflowEnvironment) -> Client:
    """A client without the SDK's auto time skipping: the driver owns the server's lock."""
    return await Client.connect(
        own_time_skipping_env.client.service_client.config.target_host,
        data_converter=pydantic_data_converter,
    )


@pytest_asyncio.fixture
async def stepped() -> AsyncIterator[tuple[SteppedClock, Scheduler]]:
    clock = SteppedClock()
    scheduler = Scheduler(clock, name="test-stepped")
    yield clock, scheduler
    scheduler.stop()


async def _drive(
    client: Client,
    clock: SteppedClock,
    scheduler: Scheduler,
    *,
    barriers: Sequence[Barrier] = (),
    phase: float = 0.0,
) -> ServerTimeDriver:
    driver = ServerTimeDriver(client, clock, scheduler, step=STEP, barriers=barriers, phase=phase)
    await driver.start()
    clock.start()
    scheduler.start()
    return driver


@pytest.mark.integration
async def test_the_fleets_events_run_at_their_time_on_the_servers_clock(
    plain_client: Client, stepped: tuple[SteppedClock, Scheduler]
) -> None:
    clock, scheduler = stepped
    ran: dict[float, float] = {}

    def record(due: float) -> None:
        ran[due] = clock.now()

    for due in (10.0, 100.0, 7200.0):
        scheduler.call_at(due, functools.partial(record, due))
    began = await TestServerTime(plain_client).wall()
    driver = await _drive(plain_client, clock, scheduler)
    try:

        async def done() -> int:
            return len(ran)

        await assert_eventually(done, lambda n: n == 3, timeout=60)
    finally:
        await driver.stop()
    elapsed = (await TestServerTime(plain_client).wall() - began).total_seconds()
    for due, at in ran.items():
        assert due <= at <= due + STEP, (due, at)
    # The server's time is the fleet's (plus the real seconds the test took while
    # the driver held it): at least the two simulated hours went by on both.
    assert clock.now() >= 7200
    assert clock.now() <= elapsed <= clock.now() + STEP + 30


@activity.defn(name="fleet_time")
async def fleet_time() -> float:
    return CLOCK.now()


@workflow.defn(name="SleepsAnHour", sandboxed=False)
class SleepsAnHour:
    @workflow.run
    async def run(self) -> float:
        await workflow.sleep(timedelta(hours=1))
        return await workflow.execute_activity(
            fleet_time, start_to_close_timeout=timedelta(minutes=1)
        )


CLOCK = SteppedClock()


@pytest.mark.integration
async def test_a_workflow_timer_ends_at_its_time_on_the_fleets_clock(
    plain_client: Client,
) -> None:
    scheduler = Scheduler(CLOCK, name="test-timer")
    queue = f"server-time-{uuid.uuid4().hex[:6]}"
    driver = await _drive(plain_client, CLOCK, scheduler)
    try:
        async with Worker(
            plain_client, task_queue=queue, workflows=[SleepsAnHour], activities=[fleet_time]
        ):
            seen = await plain_client.execute_workflow(SleepsAnHour.run, id=queue, task_queue=queue)
    finally:
        await driver.stop()
        scheduler.stop()
    # An hour of the workflow's timer is an hour of the fleet's, to one step.
    assert 3600 - STEP <= seen <= 3600 + STEP


@pytest.mark.unit
def test_a_step_must_be_positive() -> None:
    clock = SteppedClock()
    with pytest.raises(ValueError, match="positive"):
        ServerTimeDriver(None, clock, Scheduler(clock), step=0)  # type: ignore[arg-type]


@pytest.mark.integration
async def test_the_fleets_clock_keeps_up_with_the_real_time_the_servers_clock_ran(
    plain_client: Client, stepped: tuple[SteppedClock, Scheduler]
) -> None:
    # Held, the server's clock runs at the real pace: here a slow barrier holds it
    # 0.3 real seconds before each step. The fleet must not fall behind by that each step.
    clock, scheduler = stepped
    hold = 0.3

    async def slow() -> None:
        await asyncio.sleep(hold)

    driver = await _drive(plain_client, clock, scheduler, barriers=[slow])
    try:

        async def steps() -> int:
            return driver.steps

        await assert_eventually(steps, lambda n: n >= 12, timeout=60)
    finally:
        await driver.stop()
    behind = clock.sim_at(await TestServerTime(plain_client).wall()) - clock.now()
    # Without following the server, 12 steps leave the fleet 3.6 s or more behind.
    assert 0 <= behind < 1.0, behind


@pytest.mark.unit
def test_a_phase_must_be_a_fraction_of_a_step() -> None:
    clock = SteppedClock()
    with pytest.raises(ValueError, match=r"phase must be a fraction of a step in \[0, 1\)"):
        ServerTimeDriver(None, clock, Scheduler(clock), phase=1.0)  # type: ignore[arg-type]


@pytest.mark.integration
async def test_a_phase_moves_the_step_grid_and_not_the_events(
    plain_client: Client, stepped: tuple[SteppedClock, Scheduler]
) -> None:
    # The factor check's noise runs: the same events, steps falling elsewhere.
    clock, scheduler = stepped
    ran: list[float] = []
    idle_at: list[float] = []  # where each step began: the fleet's clock, idle

    async def note() -> None:
        idle_at.append(clock.now())

    scheduler.call_at(100.0, lambda: ran.append(clock.now()))
    driver = await _drive(plain_client, clock, scheduler, barriers=[note], phase=0.5)
    try:

        async def done() -> int:
            return len(ran)

        await assert_eventually(done, lambda n: n == 1, timeout=60)
    finally:
        await driver.stop()
    assert ran == [100.0]
    # The first step was half a step, the next a whole one (plus the real time the
    # server's clock ran between them, milliseconds).
    assert STEP / 2 <= idle_at[1] < STEP / 2 + 1, idle_at
    assert STEP <= idle_at[2] - idle_at[1] < STEP + 1, idle_at


@pytest.mark.integration
async def test_work_an_event_schedules_is_timed_from_the_event_not_from_its_step(
    plain_client: Client, stepped: tuple[SteppedClock, Scheduler]
) -> None:
    # A chain of job runs must not drift by a step per link (it did: 15 s a run).
    clock, scheduler = stepped
    seen: list[float] = []

    def link() -> None:
        seen.append(clock.now())
        if len(seen) < 5:
            scheduler.call_later(100.0, link)

    scheduler.call_at(10.0, link)
    driver = await _drive(plain_client, clock, scheduler)
    try:

        async def links() -> int:
            return len(seen)

        await assert_eventually(links, lambda n: n == 5, timeout=60)
    finally:
        await driver.stop()
    assert seen == [10.0, 110.0, 210.0, 310.0, 410.0]


@pytest.mark.integration
async def test_a_server_whose_time_is_held_stops_the_run_saying_so(
    plain_client: Client, stepped: tuple[SteppedClock, Scheduler]
) -> None:
    # A hold nobody releases (as a leaked one): the time moves only at the real pace.
    await plain_client.test_service.lock_time_skipping(LockTimeSkippingRequest())
    clock, scheduler = stepped
    driver = ServerTimeDriver(plain_client, clock, scheduler, step=0.2)
    await driver.start()
    clock.start()
    scheduler.start()
    try:

        async def stopped() -> bool:
            try:
                driver.raise_if_failed()
            except ServerTimeStuck:
                return True
            return False

        await assert_eventually(stopped, bool, timeout=30)
    finally:
        await driver.stop()
        await plain_client.test_service.unlock_time_skipping(UnlockTimeSkippingRequest())
