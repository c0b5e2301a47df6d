"""The clock-free comparison's time: the fleet steps with Temporal's time-skipping test server.

ADR 018. In the real-time comparison every real second the system spends
(Temporal round trips, API calls) is ``time_factor`` simulated seconds, so results
change with the factor. Here Temporal runs on its time-skipping test server,
whose clock stands still while anything is outstanding (a workflow task, an
activity, a lock someone holds) and jumps to the next timer when nothing is. The
fleet's :class:`~simulator.fleet.clock.SteppedClock` follows it:

1. The driver holds the server's time while the fleet's scheduler runs what is
   due (the server starts with one lock held; that lock is the driver's).
2. When the scheduler is idle and every barrier passed (parts outside Temporal that
   react to the fleet, such as the node-condition watcher, caught up), it asks the
   server to let time move ``step`` simulated seconds
   (``UnlockTimeSkippingWithSleep``): the server skips there unless workflows or
   activities hold it, in which case time moves at the real pace of their work.
3. The server re-takes the driver's lock at the step's end; the driver advances
   the fleet's clock to the server's time (the step, plus whatever real time the
   server's clock ran while something held it) and wakes the scheduler.

Activities that wait for the world sleep the same way (``activities.world_time``),
so waiting for a reboot costs no real time. What real latency is left is counted
at its real length (a factor of 1), not stretched by a factor.

While no open run on the server is busy (no workflow task, activity, child start
or signal under way: ``whatif.server_work`` reads it from their histories), the
server has nothing to do before its earliest timer, so the driver steps the fleet
alone up to that timer and leaves the server's clock behind (ADR 020, ADR 024):
the test server's step call slows with every call it has answered
(docs/scaling.md), and most of a month is quiet or waiting on a timer. Before the
step the timer falls in, the driver brings the server's clock to the fleet's and
steps both again. Every write to Temporal from outside the worker (the watcher
starting an incident, the relay signalling one) passes :class:`WriteGate`, which
first brings the server's clock to the fleet's and resumes stepping both; nothing
can start on the server without it, so the server only ever skips time in which
it had nothing to do.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Protocol

from temporalio.api.workflow.v1 import WorkflowExecutionInfo
from temporalio.api.workflowservice.v1 import ListOpenWorkflowExecutionsRequest
from temporalio.client import (
    CancelWorkflowInput,
    Client,
    Interceptor,
    OutboundInterceptor,
    SignalWorkflowInput,
    StartWorkflowInput,
    StartWorkflowUpdateInput,
    StartWorkflowUpdateWithStartInput,
    TerminateWorkflowInput,
    WorkflowHandle,
    WorkflowUpdateHandle,
)
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from activities.world_time import TestServerTime
from gpu_remediation.temporal_setup import register_search_attributes, time_skipping_server_path
from gpu_remediation.visibility import listing_retried
from simulator.fleet.clock import SteppedClock
from simulator.fleet.scheduler import Scheduler
from simulator.kube_api import KubeStore
from whatif.server_work import NEVER, ServerWork

log = logging.getLogger(__name__)

DEFAULT_STEP = 15.0
"""Simulated seconds the fleet's clock moves at most at once (an assumption of the
co-simulation, like the activities' 15-second polls): an event due between two steps
runs at the later one."""

AfterStep = Callable[[Sequence[WorkflowExecutionInfo]], Awaitable[bool]]
"""Given every open workflow after a step of both clocks; True when it gave the server work."""

Barrier = Callable[[], Awaitable[None]]
"""Awaited before each step: returns once a part that reacts to the fleet caught up."""

STUCK_STEPS = 8
"""Steps in a row that each took their whole length in real time: the server's time is
held by something that no longer works (``ServerTimeStuck``)."""

RECHECK_STEPS = 240
"""Steps the fleet takes alone between two looks at the server's open runs (an hour at
the default step): a net for a write that did not pass :class:`WriteGate`."""

CATCH_UP_LIMIT = 10.0
"""Real seconds a part may take to see the fleet's last change before the step goes on
anyway (logged): a liveness net for a watch that broke, not a duration of the model."""


@contextlib.asynccontextmanager
async def time_skipping_server() -> AsyncIterator[tuple[Client, str]]:
    """A time-skipping test server of its own, with the project's search attributes.

    Yields a plain client (the pydantic data converter, none of the SDK's automatic
    time skipping: the driver owns the server's time lock) and the server's address.
    """
    env = await WorkflowEnvironment.start_time_skipping(
        data_converter=pydantic_data_converter,
        test_server_existing_path=str(time_skipping_server_path()),
    )
    try:
        address = env.client.service_client.config.target_host
        client = await Client.connect(address, data_converter=pydantic_data_converter)
        await register_search_attributes(client)
        yield client, address
    finally:
        await env.shutdown()


class _Source(Protocol):
    delivered_version: int


class _Syncable(Protocol):
    async def synced(self) -> None: ...


def caught_up(
    source: Callable[[], _Source | None],
    part: Callable[[], _Syncable | None],
    store: KubeStore,
    resource: str,
) -> Barrier:
    """A barrier: ``part`` has seen every change to ``resource`` and acted on it.

    Waits until the part's watch handed on the store's last change to the
    resource (its resourceVersion), then until the part applied it and sent
    what it decided to Temporal (``synced``), which then holds the server's time.
    """

    async def barrier() -> None:
        watch, reacting = source(), part()
        if watch is None or reacting is None:
            return
        target = store.latest_version(resource)
        deadline = time.monotonic() + CATCH_UP_LIMIT
        while watch.delivered_version < target:
            if time.monotonic() > deadline:
                log.warning(
                    "%s watch at version %d, the store at %d after %.0fs: stepping on",
                    resource,
                    watch.delivered_version,
                    target,
                    CATCH_UP_LIMIT,
                )
                break
            await asyncio.sleep(0.0005)
        await reacting.synced()

    return barrier


class ServerTimeBypassed(RuntimeError):
    """A run opened or moved while the fleet stepped alone, and no write brought the server."""


class ServerTimeStuck(RuntimeError):
    """The test server's time moved only at the real pace for many steps: it is held.

    Seen once on the Java time-skipping server: a timer fired while its own workflow's
    task ran, the task then cancelled it, the server refused the completion halfway
    ("invalid history builder state for action") and kept that task's hold on its
    time. The run cannot go on at the model's pace, so it stops and says so.
    """


class ServerTimeDriver:
    """Steps ``clock`` with the test server's time until :meth:`stop`.

    Args:
        client: A plain client of the test server (no time-skipping interceptors).
        clock: The fleet's clock (not yet started).
        scheduler: The fleet's scheduler (its ``on_idle`` is taken over).
        step: Simulated seconds per step (> 0).
        barriers: Awaited (in order) before each step.
        phase: Where the step grid falls, as a fraction of a step (0 <= phase < 1):
            the first step is ``step * (1 - phase)`` long, every later one ``step``.
            Two runs at one step and different phases differ only in where events
            fall between steps: the factor check's measure of noise.
        step_alone: Step the fleet alone while no open run on the server is busy, up
            to the step its earliest timer falls in (``whatif.server_work``); writes
            from outside must pass a :class:`WriteGate` attached to this driver.
            False: always step both.
        after_step: Given every open workflow after each step of both clocks, does
            what the test server does not (``whatif.parent_close``); returns whether
            it gave the server work.
        waiting_to_write: Whether a part has a write to Temporal waiting to be sent
            again (after a failure it backs off in real seconds, which stepping alone
            would turn into hours of the fleet's time): both clocks step meanwhile.
    """

    def __init__(
        self,
        client: Client,
        clock: SteppedClock,
        scheduler: Scheduler,
        *,
        step: float = DEFAULT_STEP,
        barriers: Sequence[Barrier] = (),
        phase: float = 0.0,
        step_alone: bool = False,
        after_step: AfterStep | None = None,
        waiting_to_write: Callable[[], bool] = lambda: False,
    ) -> None:
        if not step > 0:
            raise ValueError(f"the step must be positive simulated seconds, got {step!r}")
        if not 0.0 <= phase < 1.0:
            raise ValueError(f"the phase must be a fraction of a step in [0, 1), got {phase!r}")
        self._server = TestServerTime(client)
        self._clock = clock
        self._scheduler = scheduler
        self._step = step
        self._next_step = step * (1.0 - phase)
        self._barriers = list(barriers)
        self._idle = asyncio.Event()
        self._idle_after = -1  # the scheduler's wake count at its last idle spell
        self._wakes = 0
        self._task: asyncio.Task[None] | None = None
        self._client = client
        self._work = ServerWork(client) if step_alone else None
        self._after_step = after_step
        self._waiting_to_write = waiting_to_write
        self._lock = asyncio.Lock()  # a step, or a catch-up: one at a time
        self._fleet_only = False
        self._horizon = math.inf  # stepping alone: the fleet's time the server's next timer is due
        self._writing = 0  # writes to Temporal under way (WriteGate)
        self._writes = 0  # and begun, ever
        self.steps = 0
        """Steps of both clocks (the server's step call)."""
        self.fleet_steps = 0
        """Steps of the fleet alone, the server idle or waiting on a timer."""
        self.catch_ups = 0
        """Times the server's clock was brought to the fleet's (a write, or a timer due)."""
        self.timer_waits = 0
        """Stretches the fleet stepped alone while the server waited on a timer."""
        self.real_waiting = 0.0
        """Real seconds spent in the server's sleep: time the system's work held."""
        self._held_steps = 0
        self.failure: BaseException | None = None
        """What ended the driver before :meth:`stop` (also raised by :meth:`raise_if_failed`)."""

    def add_barrier(self, barrier: Barrier) -> None:
        """Also wait for ``barrier`` before each step."""
        self._barriers.append(barrier)

    async def start(self) -> None:
        """Anchor the fleet's clock at the server's time now and step from when it starts.

        Call before the fleet starts its clock: the first step waits for the
        scheduler's first idle spell.
        """
        loop = asyncio.get_running_loop()

        def on_idle(wakes: int) -> None:
            loop.call_soon_threadsafe(self._went_idle, wakes)

        self._scheduler.on_idle = on_idle
        self._clock.anchor(await self._server.wall())
        self._task = asyncio.create_task(self._run(), name="server-time-driver")

    async def stop(self) -> None:
        """Stop stepping (the fleet's clock stays where it is)."""
        task, self._task = self._task, None
        if task is None:
            return
        if task.done():
            # Its failure, if any, is raise_if_failed's to report; stopping is not a second one.
            if not task.cancelled() and task.exception() is not None:
                self.failure = task.exception()
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    def raise_if_failed(self) -> None:
        """Raise what ended the driver, if something did."""
        if self.failure is not None:
            raise self.failure
        if self._task is not None and self._task.done() and not self._task.cancelled():
            self._task.result()

    def _went_idle(self, wakes: int) -> None:
        # On the loop (call_soon_threadsafe from the scheduler's thread).
        self._idle_after = max(self._idle_after, wakes)
        self._idle.set()

    def _wake(self) -> None:
        self._wakes += 1
        self._scheduler.wake()

    @contextlib.asynccontextmanager
    async def writing(self) -> AsyncIterator[None]:
        """Around a write to Temporal: the server's clock is at the fleet's when it lands.

        While the fleet steps alone the server's clock is behind; the first write
        brings it to the fleet's time (the server skips it: nothing was due in it)
        and stepping both resumes. A write under way keeps the fleet from stepping
        alone again until it returned.
        """
        if asyncio.current_task() is self._task:
            # The driver's own (``after_step``), made holding the lock at the fleet's time.
            yield
            return
        self._writing += 1
        self._writes += 1
        try:
            if self._fleet_only:
                async with self._lock:
                    if self._fleet_only:
                        await self._catch_up()
            yield
        finally:
            self._writing -= 1

    async def _run(self) -> None:
        while True:
            # Idle after our own last wake: everything due at this step has run (an
            # idle spell from before it, reported late, does not count).
            while self._idle_after < self._wakes:
                self._idle.clear()
                await self._idle.wait()
            for barrier in self._barriers:
                await barrier()
            async with self._lock:
                length, self._next_step = self._next_step, self._step
                if self._fleet_only and (
                    self._waiting_to_write() or self._clock.now() + length >= self._horizon
                ):
                    # A write waiting, or the server's next timer falls in this step:
                    # the server steps it too, and fires the timer at its time.
                    await self._catch_up()
                if self._fleet_only:
                    self._clock.advance(self._clock.now() + length)
                    self.fleet_steps += 1
                    if self.fleet_steps % RECHECK_STEPS == 0:
                        await self._still_quiet()
                else:
                    await self._step_both(length)
                    await self._look()
            self._wake()

    async def _step_both(self, length: float) -> None:
        began = time.monotonic()
        await self._server.sleep(length)
        took = time.monotonic() - began
        self.real_waiting += took
        self.steps += 1
        self._check_held(took)
        # The server's clock is not only the steps: while time skipping is locked
        # (by this driver between steps, a workflow task, an activity) it moves at
        # the real pace. The fleet follows where it is, or the two drift apart by
        # every step's real time: about 15 minutes over a month, enough for a
        # replacement node to look older than its NodeClaim's deletion.
        reached = self._clock.sim_at(await self._server.wall())
        self._clock.advance(max(reached, self._clock.now() + length))

    async def _look(self) -> None:
        """After a step of both: apply ``after_step``; step alone from now if nothing is busy.

        Alone up to the earliest timer of the open runs, read twice (a run that
        moved between the two listings is busy) and with no write under way.
        """
        if self._work is None and self._after_step is None:
            return
        writes = self._writes
        executions = await self._list_open()
        if self._after_step is not None and await self._after_step(executions):
            return
        if self._work is None:
            return
        deadline = await self._work.next_deadline(executions)
        if deadline is None or not self._work.unchanged(await self._list_open()):
            return
        # A write begun while the server was read may not show in it.
        if self._writing or self._writes != writes or self._waiting_to_write():
            return
        horizon = math.inf if deadline == NEVER else self._clock.sim_at(deadline)
        if horizon <= self._clock.now() + self._step:
            return  # due within the next step: the server steps it
        self._fleet_only, self._horizon = True, horizon
        if horizon < math.inf:
            self.timer_waits += 1

    async def _list_open(self) -> Sequence[WorkflowExecutionInfo]:
        response = await listing_retried(
            lambda: self._client.workflow_service.list_open_workflow_executions(
                ListOpenWorkflowExecutionsRequest(namespace=self._client.namespace)
            )
        )
        return response.executions

    async def _still_quiet(self) -> None:
        # Stepping alone, the server's runs are as last read: a write that did not
        # pass the gate would wait for timers the server never reaches. (A gated
        # write waiting for this step has changed nothing yet.)
        assert self._work is not None  # only stepping alone, which needs it
        if not self._work.unchanged(await self._list_open()):
            raise ServerTimeBypassed(
                f"a workflow opened or moved on the test server while the fleet stepped "
                f"alone (at {self._clock.now():.0f} simulated s), without passing the write "
                "gate: its timers would run late; give whatever wrote to it the gated "
                "client (WriteGate.wrap)"
            )

    async def _catch_up(self) -> None:
        # To the step's end, as a step of both would have left it (the fleet may be
        # running the step's events); held by this driver meanwhile, the server's
        # clock ran at the real pace.
        lead = self._clock.target() - self._clock.sim_at(await self._server.wall())
        if lead > 0:
            try:
                # Nothing is due on the server in the gap, so it skips it at once;
                # held, it would take the gap in real time.
                await asyncio.wait_for(self._server.sleep(lead), STUCK_STEPS * self._step)
            except TimeoutError:
                self.failure = ServerTimeStuck(
                    f"the test server's time did not skip {lead:.0f} simulated s to the "
                    f"fleet's ({self._clock.target():.0f} s) within "
                    f"{STUCK_STEPS * self._step:.0f} real s: something holds it and the "
                    "run cannot go on (ADR 020)"
                )
                if self._task is not None and self._task is not asyncio.current_task():
                    self._task.cancel()  # the writer's catch-up: stop stepping too
                raise self.failure from None
        self._fleet_only, self._horizon = False, math.inf
        self.catch_ups += 1

    def _check_held(self, took: float) -> None:
        # A step the server's clock took at the real pace: something held its time.
        self._held_steps = self._held_steps + 1 if took >= 0.9 * self._step else 0
        if self._held_steps >= STUCK_STEPS:
            raise ServerTimeStuck(
                f"the test server's time moved at the real pace for {self._held_steps} steps "
                f"in a row ({self._step:g} s each) at {self._clock.now():.0f} simulated s: "
                "something holds it and the run cannot go on (the worker's log may show "
                "'invalid history builder state for action'; ADR 018)"
            )


class WriteGate(Interceptor):
    """A client interceptor: every write to Temporal waits for the server's clock.

    Give the client of everything outside the worker that writes to Temporal (the
    watcher, the relay) this interceptor, and the driver to :meth:`attach`: a write
    then lands at the fleet's time even while the fleet steps alone
    (:meth:`ServerTimeDriver.writing`). Reads pass as they are: they change nothing.
    """

    def __init__(self) -> None:
        self._driver: ServerTimeDriver | None = None

    def attach(self, driver: ServerTimeDriver) -> None:
        """Gate writes on ``driver`` from now on (before it, they pass)."""
        self._driver = driver

    def wrap(self, client: Client) -> Client:
        """``client`` with this gate on its writes."""
        config = client.config()
        config["interceptors"] = [*config["interceptors"], self]
        return Client(**config)

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        """Gate ``next``'s writes."""
        return _GatedWrites(next, self)

    @contextlib.asynccontextmanager
    async def writing(self) -> AsyncIterator[None]:
        """The driver's :meth:`ServerTimeDriver.writing`, or nothing before one is attached."""
        if self._driver is None:
            yield
            return
        async with self._driver.writing():
            yield


class _GatedWrites(OutboundInterceptor):
    def __init__(self, next: OutboundInterceptor, gate: WriteGate) -> None:
        super().__init__(next)
        self._gate = gate

    async def start_workflow(self, input: StartWorkflowInput) -> WorkflowHandle[Any, Any]:
        async with self._gate.writing():
            return await super().start_workflow(input)

    async def signal_workflow(self, input: SignalWorkflowInput) -> None:
        async with self._gate.writing():
            await super().signal_workflow(input)

    async def start_workflow_update(
        self,
        input: StartWorkflowUpdateInput,
    ) -> WorkflowUpdateHandle[Any]:
        async with self._gate.writing():
            return await super().start_workflow_update(input)

    async def start_update_with_start_workflow(
        self,
        input: StartWorkflowUpdateWithStartInput,
    ) -> WorkflowUpdateHandle[Any]:
        async with self._gate.writing():
            return await super().start_update_with_start_workflow(input)

    async def cancel_workflow(self, input: CancelWorkflowInput) -> None:
        async with self._gate.writing():
            await super().cancel_workflow(input)

    async def terminate_workflow(self, input: TerminateWorkflowInput) -> None:
        async with self._gate.writing():
            await super().terminate_workflow(input)
