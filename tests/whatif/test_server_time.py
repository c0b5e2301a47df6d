"""The clock-free comparison's clock: the fleet's events and Temporal's timers on one timeline."""

from __future__ import annotations

import asyncio
import functools
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import pytest_asyncio
from temporalio import activity, workflow
from temporalio.api.testservice.v1 import LockTimeSkippingRequest, UnlockTimeSkippingRequest
from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from activities.world_time import TestServerTime
from simulator.fleet.clock import SteppedClock
from simulator.fleet.scheduler import Scheduler
from tests.conftest import assert_eventually
from whatif.server_time import (
    RECHECK_STEPS,
    STUCK_STEPS,
    Barrier,
    ServerTimeBypassed,
    ServerTimeDriver,
    ServerTimeStuck,
    WriteGate,
)

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
    step: float = STEP,
    phase: float = 0.0,
    step_alone: bool = False,
    waiting_to_write: Callable[[], bool] = lambda: False,
) -> ServerTimeDriver:
    driver = ServerTimeDriver(
        client,
        clock,
        scheduler,
        step=step,
        barriers=barriers,
        phase=phase,
        step_alone=step_alone,
        waiting_to_write=waiting_to_write,
    )
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
    driver = await _drive(plain_client, clock, scheduler, step=0.2)
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


QUIET_CLOCK = SteppedClock()


@activity.defn(name="quiet_fleet_time")
async def quiet_fleet_time() -> float:
    return QUIET_CLOCK.now()


@workflow.defn(name="StampsItsStart", sandboxed=False)
class StampsItsStart:
    @workflow.run
    async def run(self) -> tuple[float, float]:
        started = workflow.now().timestamp()
        await workflow.sleep(timedelta(hours=1))
        fleet = await workflow.execute_activity(
            quiet_fleet_time, start_to_close_timeout=timedelta(minutes=1)
        )
        return started, fleet


@pytest.mark.integration
async def test_a_write_after_a_quiet_stretch_lands_at_the_fleets_time(
    plain_client: Client,
) -> None:
    # Two quiet hours: the fleet steps alone, the server's clock stays behind. The
    # write that starts an incident must bring it along first, or the incident would
    # begin two hours early and its timers end two hours before the fleet's.
    scheduler = Scheduler(QUIET_CLOCK, name="test-quiet")
    queue = f"quiet-{uuid.uuid4().hex[:6]}"
    gate = WriteGate()
    gated = gate.wrap(plain_client)
    loop = asyncio.get_running_loop()
    starts: list[asyncio.Task[WorkflowHandle[StampsItsStart, tuple[float, float]]]] = []

    def start_incident() -> None:
        starts.append(
            asyncio.ensure_future(
                gated.start_workflow(StampsItsStart.run, id=queue, task_queue=queue)
            )
        )

    async def sent() -> None:
        # As the watcher's barrier: the next step waits until what it decided is sent.
        for start in starts:
            await start

    def at_two_hours() -> None:
        loop.call_soon_threadsafe(start_incident)

    scheduler.call_at(7200.0, at_two_hours)
    driver = await _drive(plain_client, QUIET_CLOCK, scheduler, barriers=[sent], step_alone=True)
    gate.attach(driver)
    try:
        async with Worker(
            plain_client,
            task_queue=queue,
            workflows=[StampsItsStart],
            activities=[quiet_fleet_time],
        ):

            async def started() -> int:
                return len(starts)

            await assert_eventually(started, lambda n: n == 1, timeout=60)
            began, fleet_after = await asyncio.wait_for((await starts[0]).result(), timeout=60)
    finally:
        await driver.stop()
        scheduler.stop()
    at_start = QUIET_CLOCK.sim_at(datetime.fromtimestamp(began, UTC))
    assert 7200 <= at_start <= 7200 + STEP + 1, at_start
    assert 3600 - STEP <= fleet_after - at_start <= 3600 + STEP, (at_start, fleet_after)
    # The quiet hours were the fleet's alone, and so was the incident's hour: it only
    # waited on its timer. Both clocks stepped where the server had work: the start,
    # the step the timer fell in, the activity after it.
    assert driver.fleet_steps >= (7200 + 3600) / STEP - 10, driver.fleet_steps
    assert driver.timer_waits == 1
    assert driver.catch_ups == 2  # the write, then the timer
    assert driver.steps <= 10, driver.steps


@workflow.defn(name="WaitsForSignal", sandboxed=False)
class WaitsForSignal:
    def __init__(self) -> None:
        self._done = False

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: self._done)

    @workflow.signal
    def done(self) -> None:
        self._done = True


@pytest.mark.integration
@pytest.mark.parametrize("step_alone", [True, False], ids=["step-alone", "always-both"])
async def test_the_fleet_steps_alone_while_open_workflows_wait_for_a_write(
    plain_client: Client, stepped: tuple[SteppedClock, Scheduler], step_alone: bool
) -> None:
    clock, scheduler = stepped
    queue = f"waits-{uuid.uuid4().hex[:6]}"
    async with Worker(plain_client, task_queue=queue, workflows=[WaitsForSignal]):
        handle = await plain_client.start_workflow(WaitsForSignal.run, id=queue, task_queue=queue)
        await assert_eventually(
            lambda: _history_length(plain_client, handle), lambda n: n >= 4, timeout=30
        )
        driver = await _drive(plain_client, clock, scheduler, step_alone=step_alone)
        try:

            async def stepped_in_all() -> int:
                return driver.steps + driver.fleet_steps

            await assert_eventually(stepped_in_all, lambda n: n >= 20, timeout=60)
        finally:
            await driver.stop()
        await handle.signal(WaitsForSignal.done)
    if step_alone:
        assert driver.steps == 1, driver.steps  # one step, then the server was seen waiting
        assert driver.fleet_steps >= 19
    else:
        assert driver.fleet_steps == 0


async def _history_length(client: Client, handle: WorkflowHandle[Any, Any]) -> int:
    return (await handle.describe()).raw_description.workflow_execution_info.history_length


class Held:
    """An activity that runs until the test releases it."""

    def __init__(self) -> None:
        self.released = asyncio.Event()

    @activity.defn(name="held_until_released")
    async def run(self) -> None:
        await self.released.wait()


@workflow.defn(name="RunsAnActivity", sandboxed=False)
class RunsAnActivity:
    @workflow.run
    async def run(self) -> None:
        await workflow.execute_activity(
            "held_until_released", start_to_close_timeout=timedelta(minutes=10)
        )


@pytest.mark.integration
async def test_a_running_activity_keeps_both_clocks_stepping(
    plain_client: Client, stepped: tuple[SteppedClock, Scheduler]
) -> None:
    # An activity reads and changes the world: the fleet must not run ahead of it.
    clock, scheduler = stepped
    queue = f"busy-{uuid.uuid4().hex[:6]}"
    held = Held()
    async with Worker(
        plain_client,
        task_queue=queue,
        workflows=[RunsAnActivity],
        activities=[held.run],
    ):
        handle = await plain_client.start_workflow(RunsAnActivity.run, id=queue, task_queue=queue)
        driver = await _drive(plain_client, clock, scheduler, step=0.5, step_alone=True)
        try:

            async def both() -> int:
                return driver.steps

            await assert_eventually(both, lambda n: n >= 5, timeout=60)
            assert driver.fleet_steps == 0
            held.released.set()
            await handle.result()

            async def alone() -> int:
                return driver.fleet_steps

            # Nothing open any more: the fleet steps alone.
            await assert_eventually(alone, lambda n: n >= 5, timeout=60)
        finally:
            held.released.set()
            await driver.stop()


@pytest.mark.integration
async def test_a_workflow_started_past_the_write_gate_stops_the_run_saying_so(
    plain_client: Client, stepped: tuple[SteppedClock, Scheduler]
) -> None:
    clock, scheduler = stepped
    queue = f"bypass-{uuid.uuid4().hex[:6]}"
    driver = await _drive(plain_client, clock, scheduler, step_alone=True)
    async with Worker(plain_client, task_queue=queue, workflows=[WaitsForSignal]):

        async def alone() -> int:
            return driver.fleet_steps

        await assert_eventually(alone, lambda n: n >= 1, timeout=60)
        # The plain client: no gate brings the server's clock along.
        handle = await plain_client.start_workflow(WaitsForSignal.run, id=queue, task_queue=queue)
        opened_at = driver.fleet_steps
        try:

            async def stopped() -> bool:
                try:
                    driver.raise_if_failed()
                except ServerTimeBypassed:
                    return True
                return False

            await assert_eventually(stopped, bool, timeout=60)
        finally:
            await driver.stop()
            await handle.signal(WaitsForSignal.done)
    # Found at the next look.
    assert driver.fleet_steps <= opened_at + RECHECK_STEPS, (opened_at, driver.fleet_steps)


@pytest.mark.integration
async def test_a_part_with_a_write_waiting_keeps_both_clocks_stepping(
    plain_client: Client, stepped: tuple[SteppedClock, Scheduler]
) -> None:
    # A report that failed backs off in real seconds: stepping alone meanwhile would
    # turn them into hours of the fleet's time before it is sent again.
    clock, scheduler = stepped
    waiting = [True]
    driver = await _drive(
        plain_client, clock, scheduler, step_alone=True, waiting_to_write=lambda: waiting[0]
    )
    try:

        async def both() -> int:
            return driver.steps

        await assert_eventually(both, lambda n: n >= 10, timeout=60)
        assert driver.fleet_steps == 0
        waiting[0] = False

        async def alone() -> int:
            return driver.fleet_steps

        await assert_eventually(alone, lambda n: n >= 10, timeout=60)
    finally:
        await driver.stop()


@pytest.mark.integration
async def test_a_catch_up_the_server_does_not_skip_stops_the_run_saying_so(
    plain_client: Client, stepped: tuple[SteppedClock, Scheduler]
) -> None:
    # Held by something else, the server would take the fleet's lead in real time.
    clock, scheduler = stepped
    step = 0.2
    driver = await _drive(plain_client, clock, scheduler, step=step, step_alone=True)
    gate = WriteGate()
    gate.attach(driver)
    gated = gate.wrap(plain_client)
    await plain_client.test_service.lock_time_skipping(LockTimeSkippingRequest())
    try:

        async def alone() -> int:
            return driver.fleet_steps

        # Far enough ahead that the held server could not take the lead within the limit.
        await assert_eventually(alone, lambda n: n * step > 10 * STUCK_STEPS * step, timeout=60)
        with pytest.raises(ServerTimeStuck, match="did not skip"):
            await gated.start_workflow(
                WaitsForSignal.run, id=f"never-{uuid.uuid4().hex[:6]}", task_queue="none"
            )
        with pytest.raises(ServerTimeStuck):
            driver.raise_if_failed()
    finally:
        await driver.stop()
        await plain_client.test_service.unlock_time_skipping(UnlockTimeSkippingRequest())
