"""One thread that runs the simulator's timed and deferred work in order.

Store hooks run under the store lock and moto's callbacks inside its request
handling, so neither may write to the cluster; they hand work to this
scheduler instead. Every callback runs on its one thread, one at a time, which
keeps the fleet's writes ordered without further locking.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import threading
import time
from collections.abc import Callable

from simulator.fleet.clock import FleetClock

log = logging.getLogger(__name__)

Callback = Callable[[], None]
_SOON = -1.0
"""The simulated time of ``call_soon`` work: before anything scheduled at a time."""


class Scheduler:
    """Runs callbacks at simulated times on one background thread.

    Args:
        clock: The simulated clock (started before :meth:`start`; work may be
            scheduled before that).
        name: Thread name.
    """

    def __init__(self, clock: FleetClock, name: str = "fleet-scheduler") -> None:
        self._clock = clock
        self._name = name
        self._heap: list[tuple[float, int, Callback]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.errors: list[BaseException] = []
        self.on_idle: Callable[[int], None] | None = None
        """Called (on the scheduler's thread) each time nothing is due, with the number
        of :meth:`wake` calls so far: a stepped clock's driver waits for the idle
        spell after its own wake before it lets simulated time move on."""
        self._idle = False
        self._wakes = 0

    def call_at(self, sim_t: float, fn: Callback) -> None:
        """Run ``fn`` once simulated time reaches ``sim_t``."""
        # Kept in simulated time (converted when waiting), so work scheduled
        # before the clock starts still waits its simulated delay after it.
        with self._cond:
            heapq.heappush(self._heap, (max(0.0, sim_t), next(self._seq), fn))
            self._cond.notify()

    def call_later(self, sim_delay: float, fn: Callback) -> None:
        """Run ``fn`` after ``sim_delay`` simulated seconds."""
        self.call_at(self._clock.now() + max(0.0, sim_delay), fn)

    def call_soon(self, fn: Callback) -> None:
        """Run ``fn`` as soon as the thread gets to it (after what is due already)."""
        # Stamped with the simulated time now, not ahead of everything: a stream of
        # deferred work must not starve timed events that are already due (they
        # ran hours of simulated time late at 1,000 nodes and a factor of 9600).
        # Before the clock starts, now() is 0: still before any timed work.
        with self._cond:
            heapq.heappush(self._heap, (self._clock.now(), next(self._seq), fn))
            self._cond.notify()

    def next_time(self) -> float | None:
        """The simulated time of the earliest callback waiting (None: none)."""
        with self._cond:
            return self._heap[0][0] if self._heap else None

    def wake(self) -> None:
        """Look again at what is due (a stepped clock moved on)."""
        with self._cond:
            self._idle = False
            self._wakes += 1
            self._cond.notify()

    def pending(self) -> int:
        """How many callbacks wait."""
        with self._cond:
            return len(self._heap)

    def start(self) -> None:
        """Start the thread."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop after the running callback; callbacks not yet due are dropped."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.warning("fleet scheduler still busy after %.0f s", timeout)
            self._thread = None

    def _next(self) -> Callback | None:
        with self._cond:
            while not self._stopping:
                if self._heap:
                    sim_t = self._heap[0][0]
                    if sim_t > self._clock.now():
                        self._clock.resume()  # caught up: a held clock runs again
                    due = self._clock.real_deadline(sim_t) if sim_t > _SOON else 0.0
                    wait = due - time.monotonic()
                    if wait <= 0:
                        if sim_t > _SOON:
                            # Late work holds simulated time back (clock.py: paced clock).
                            self._clock.pace(sim_t)
                        self._idle = False
                        return heapq.heappop(self._heap)[2]
                    self._went_idle()
                    # A stepped clock has no real deadline: woken by its next step.
                    self._cond.wait(None if math.isinf(wait) else wait)
                else:
                    self._clock.resume()
                    self._went_idle()
                    self._cond.wait()
            return None

    def _went_idle(self) -> None:
        # Caller holds the condition; told once per idle spell.
        self._clock.idle()
        if not self._idle:
            self._idle = True
            if self.on_idle is not None:
                self.on_idle(self._wakes)

    def _loop(self) -> None:
        while True:
            fn = self._next()
            if fn is None:
                return
            try:
                fn()
            except Exception as exc:
                # A broken simulation must not pass unnoticed: the fleet's stop()
                # raises it; the thread keeps serving the rest meanwhile.
                log.exception("fleet simulator callback failed")
                self.errors.append(exc)
