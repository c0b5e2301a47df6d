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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Protocol

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from activities.world_time import TestServerTime
from gpu_remediation.temporal_setup import register_search_attributes, time_skipping_server_path
from simulator.fleet.clock import SteppedClock
from simulator.fleet.scheduler import Scheduler
from simulator.kube_api import KubeStore

log = logging.getLogger(__name__)

DEFAULT_STEP = 15.0
"""Simulated seconds the fleet's clock moves at most at once (an assumption of the
co-simulation, like the activities' 15-second polls): an event due between two steps
runs at the later one."""

Barrier = Callable[[], Awaitable[None]]
"""Awaited before each step: returns once a part that reacts to the fleet caught up."""

STUCK_STEPS = 8
"""Steps in a row that each took their whole length in real time: the server's time is
held by something that no longer works (``ServerTimeStuck``)."""

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
        self.steps = 0
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

    async def _run(self) -> None:
        while True:
            # Idle after our own last wake: everything due at this step has run (an
            # idle spell from before it, reported late, does not count).
            while self._idle_after < self._wakes:
                self._idle.clear()
                await self._idle.wait()
            for barrier in self._barriers:
                await barrier()
            length, self._next_step = self._next_step, self._step
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
            self._wake()

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
