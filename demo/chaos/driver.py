"""The chaos driver: the system's own parts killed at times drawn from the seed.

Kinds of fault (:data:`KINDS`):

- ``worker_kill``: SIGKILL the ``remediate worker`` process (its whole process
  group, no graceful shutdown), then start a new one and wait until it polls;
- ``watcher_restart``: the watcher (and the checkpoint relay beside it) dies
  as a crashed ``remediate watch`` would: its tasks are cancelled, their undelivered
  reports are lost, and a fresh watcher lists every node from scratch;
- ``server_restart``: the Temporal dev server stops and starts again on its file
  database (:mod:`demo.chaos.server_restart`);
- ``kube_api_429`` / ``kube_api_500`` / ``kube_api_410``: a burst of Kubernetes
  API errors through the emulator's fault injection (429 with Retry-After on
  any request, 500 on any request, 410 Gone on watch requests), for a few
  requests or a short window, whichever ends first; a burst runs beside the
  other faults. For 410 the emulator first restarts on its port with its watch
  history compacted, so the open watches end and resume from an expired version;
- ``ssm_throttle``: the next SSM ``SendCommand`` calls answer ``ThrottlingException``
  (moto's adapter, ``MotoCloud.throttle_send_command``), for a short window;
- ``receiver_kill``: SIGKILL the Alertmanager webhook receiver's process (the stack
  runs it with ``StackOptions.alerts``), then start a new one on the same port; the
  simulated Alertmanager retries what it could not deliver meanwhile;
- ``kube_api_latency``: every Kubernetes API request waits ``LATENCY_S`` before it is
  served, for a short window (the emulator's latency rule);
- ``ec2_throttle``: the next EC2 ``RunInstances`` / ``TerminateInstances`` /
  ``RebootInstances`` calls (Karpenter's launches and terminations, the worker's
  reboots) answer ``RequestLimitExceeded`` (``MotoCloud.throttle_ec2``), for a short window.

:func:`plan` draws the times from the seed (so a run can be repeated); the
driver injects them one after another, each after the previous part is back (a
restart that has not finished is not a fault to stack another on; bursts, and
receiver kills, run beside them: the receiver is a deployment of its own, and
its crash has nothing to wait for), and logs each with its real and simulated time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import Counter
from typing import TYPE_CHECKING, Literal, get_args

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from demo.chaos.server_restart import RestartableServer
    from demo.stack import DemoStack

log = logging.getLogger("gpu_remediation.demo.chaos")

ChaosKind = Literal[
    "worker_kill",
    "watcher_restart",
    "server_restart",
    "kube_api_429",
    "kube_api_500",
    "kube_api_410",
    "ssm_throttle",
    "receiver_kill",
    "kube_api_latency",
    "ec2_throttle",
]
KINDS: tuple[ChaosKind, ...] = get_args(ChaosKind)

WINDOW = (0.05, 0.8)
"""Faults fall within these fractions of the run's real duration (the rest is for settling)."""
BURST_REQUESTS = 25
BURST_SECONDS = 5.0
LATENCY_S = 1.5
"""How long each Kubernetes API request waits during a latency burst."""
BESIDE = ("kube_api_", "ssm_", "ec2_", "receiver_")
"""Kinds that run beside the restarts: windows of errors or latency, and receiver kills."""


class ChaosEvent(BaseModel):
    """One injected fault, as logged."""

    model_config = ConfigDict(frozen=True)

    kind: ChaosKind
    at_s: float
    """Real seconds since the driver started."""
    sim_s: float
    """The fleet's simulated seconds at that moment."""
    took_s: float
    """Real seconds until the part was back (or the burst over)."""
    detail: str


def parse_kinds(text: str) -> tuple[ChaosKind, ...]:
    """``all`` or a comma-separated list of :data:`KINDS`.

    Raises:
        ValueError: An unknown kind (the message lists the known ones).
    """
    if text.strip() == "all":
        return KINDS
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or not kinds:
        raise ValueError(f"unknown chaos kind(s) {unknown or [text]}; known: {', '.join(KINDS)}")
    return tuple(k for k in KINDS if k in kinds)


def plan(
    seed: int, kinds: tuple[ChaosKind, ...], per_kind: int, real_seconds: float
) -> list[tuple[float, ChaosKind]]:
    """When to inject what: ``per_kind`` faults of each kind, at seeded times, in time order."""
    rng = random.Random(f"chaos-{seed}")
    low, high = (real_seconds * f for f in WINDOW)
    times = [(rng.uniform(low, high), kind) for kind in kinds for _ in range(per_kind)]
    return sorted(times)


class ChaosDriver:
    """Injects the planned faults into a running :class:`~demo.stack.DemoStack`.

    Args:
        stack: The running stack.
        schedule: ``(real seconds after start, kind)`` pairs, from :func:`plan`.
        server: Restarts the Temporal server (needed for ``server_restart``).
        seed: Seeds the short pauses a killed part stays down.
        sim_clock: The schedule's times are the fleet's simulated seconds, not real
            seconds after start (runs of the same seed then see each fault at the same
            simulated moment, however their real pace differs: the what-if comparison).
    """

    def __init__(
        self,
        stack: DemoStack,
        schedule: list[tuple[float, ChaosKind]],
        *,
        server: RestartableServer | None = None,
        seed: int = 0,
        sim_clock: bool = False,
    ) -> None:
        if server is None and any(kind == "server_restart" for _, kind in schedule):
            raise ValueError("server_restart needs the server to restart")
        if stack.options.alerts is None and any(k == "receiver_kill" for _, k in schedule):
            raise ValueError("receiver_kill needs the stack's receiver (StackOptions.alerts)")
        self._stack = stack
        self._schedule = schedule
        self._server = server
        self._sim_clock = sim_clock
        self._rng = random.Random(f"chaos-downtime-{seed}")
        self.events: list[ChaosEvent] = []
        self.worker_down = False
        """True while the driver has the worker dead on purpose (the demo's health check waits)."""
        self.server_down = False
        """True while the Temporal server is restarting (the demo's progress skips a refresh)."""
        self.receiver_down = False
        """True while the driver has the alert receiver dead on purpose."""
        self._started = 0.0
        self._api_restart = asyncio.Lock()
        """Two 410 bursts may overlap; the emulator restarts one at a time."""
        self._receiver_restart = asyncio.Lock()
        """Two receiver kills may overlap; the second waits for the first's restart."""

    @property
    def faults_injected(self) -> dict[str, int]:
        """Injected faults by kind (every kind planned, zero included)."""
        counts: Counter[str] = Counter({kind: 0 for _, kind in self._schedule})
        counts.update(e.kind for e in self.events)
        return dict(counts)

    @property
    def busy(self) -> bool:
        """Whether a part is down on purpose right now."""
        return self.worker_down or self.server_down or self.receiver_down

    async def run(self, stop: asyncio.Event) -> None:
        """Inject the schedule until it is done or ``stop`` is set.

        Raises:
            RuntimeError, TimeoutError: A part did not come back (the system did
                not survive its own restart: the demo fails with it).
        """
        self._started = time.monotonic()
        bursts: set[asyncio.Task[ChaosEvent]] = set()
        try:
            for at, kind in self._schedule:
                await self._until(at, stop)
                if stop.is_set():
                    return
                if kind.startswith(BESIDE):
                    # A burst lasts a while; the next restart need not wait for its end.
                    bursts.add(asyncio.create_task(self.inject(kind)))
                else:
                    await self.inject(kind)
        finally:
            if bursts:
                await asyncio.gather(*bursts)

    async def _until(self, at: float, stop: asyncio.Event) -> None:
        """Wait until ``at`` (real seconds after start, or simulated seconds) or ``stop``."""
        while not stop.is_set():
            if self._sim_clock:
                clock = self._stack.fleet.clock
                # The simulated clock may be held back: asked again, at most each second.
                delay = min((at - clock.now()) / clock.time_factor, 1.0)
            else:
                delay = at - (time.monotonic() - self._started)
            if delay <= 0:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)

    async def inject(self, kind: ChaosKind) -> ChaosEvent:
        """Inject one fault now and wait until the part is back; returns its log entry."""
        began = time.monotonic()
        sim_s = self._stack.fleet.clock.now()
        detail = await getattr(self, f"_{kind}")()
        event = ChaosEvent(
            kind=kind,
            at_s=round(began - (self._started or began), 3),
            sim_s=round(sim_s, 1),
            took_s=round(time.monotonic() - began, 3),
            detail=detail,
        )
        self.events.append(event)
        log.warning(
            "chaos: %s at %.1fs (simulated %.0fs), back after %.1fs: %s",
            kind,
            event.at_s,
            event.sim_s,
            event.took_s,
            detail,
        )
        return event

    # ------------------------------------------------------------------ kinds

    async def _worker_kill(self) -> str:
        worker = self._stack.worker
        pid = worker.process.pid if worker.process is not None else None
        self.worker_down = True
        try:
            await asyncio.to_thread(worker.kill)
            await asyncio.sleep(self._rng.uniform(0.0, 1.0))
            await self._stack.restart_worker()
        finally:
            self.worker_down = False
        new = worker.process.pid if worker.process is not None else None
        return f"SIGKILL worker pid {pid}; new worker pid {new} polling"

    async def _watcher_restart(self) -> str:
        pending = await self._stack.crash_watcher()
        await asyncio.sleep(self._rng.uniform(0.0, 1.0))
        self._stack.start_watcher()
        return f"watcher cancelled with {pending} undelivered report(s); a fresh one lists anew"

    async def _server_restart(self) -> str:
        assert self._server is not None
        down = self._rng.uniform(0.5, 2.0)
        self.server_down = True
        try:
            await self._server.restart(down_s=down)
        finally:
            self.server_down = False
        return f"Temporal server stopped, down {down:.1f}s, restarted on its database"

    async def _burst(
        self, status: int, *, query: str | None = None, retry_after: int | None = None
    ) -> str:
        faults = self._stack.fleet.kube.faults
        rule = faults.inject(
            ".*",
            status=status,
            query=query,
            retry_after=retry_after,
            times=BURST_REQUESTS,
            message="chaos: injected burst",
        )
        deadline = time.monotonic() + BURST_SECONDS
        while rule.hits < BURST_REQUESTS and time.monotonic() < deadline:  # noqa: ASYNC110
            # The emulator's rule counts its hits on the server's threads: polled.
            await asyncio.sleep(0.05)
        faults.remove(rule.id)
        return f"{rule.hits} request(s) answered {status}" + (f" ({query})" if query else "")

    async def _kube_api_429(self) -> str:
        return await self._burst(429, retry_after=1)

    async def _kube_api_500(self) -> str:
        return await self._burst(500)

    async def _kube_api_410(self) -> str:
        # Open watches never see a rule made after they began: end them as an API server
        # restart does, with the history compacted, so each one resumes from a version
        # that is gone (410 Expired) and must list again.
        fleet = self._stack.fleet
        async with self._api_restart:
            await asyncio.to_thread(fleet.kube.restart, fleet.store.compact)
        detail = await self._burst(410, query="watch=")
        return f"API server restarted with its watch history compacted; {detail}"

    async def _ssm_throttle(self) -> str:
        cloud = self._stack.fleet.cloud
        cloud.throttle_send_command += BURST_REQUESTS
        deadline = time.monotonic() + BURST_SECONDS
        while cloud.throttle_send_command > 0 and time.monotonic() < deadline:  # noqa: ASYNC110
            # moto's adapter counts them down on its request threads: polled.
            await asyncio.sleep(0.05)
        left = max(0, cloud.throttle_send_command)
        cloud.throttle_send_command = 0
        return f"{BURST_REQUESTS - left} SSM SendCommand call(s) throttled"

    async def _receiver_kill(self) -> str:
        receiver = self._stack.receiver
        if receiver is None:
            raise RuntimeError("receiver_kill needs the stack's receiver (StackOptions.alerts)")
        async with self._receiver_restart:
            pid = receiver.process.pid if receiver.process is not None else None
            self.receiver_down = True
            try:
                await asyncio.to_thread(receiver.kill)
                await asyncio.sleep(self._rng.uniform(0.0, 1.0))
                await self._stack.restart_receiver()
            finally:
                self.receiver_down = False
            new = receiver.process.pid if receiver.process is not None else None
        return f"SIGKILL receiver pid {pid}; new receiver pid {new} serving on the same port"

    async def _kube_api_latency(self) -> str:
        faults = self._stack.fleet.kube.faults
        rule = faults.inject(".*", latency=LATENCY_S, message="chaos: injected latency")
        try:
            await asyncio.sleep(BURST_SECONDS)
        finally:
            faults.remove(rule.id)
        return f"{rule.hits} request(s) delayed {LATENCY_S:g}s within {BURST_SECONDS:g}s"

    async def _ec2_throttle(self) -> str:
        cloud = self._stack.fleet.cloud
        before = len(cloud.ec2_throttled)
        cloud.throttle_ec2 += BURST_REQUESTS
        deadline = time.monotonic() + BURST_SECONDS
        while cloud.throttle_ec2 > 0 and time.monotonic() < deadline:  # noqa: ASYNC110
            # moto's adapter counts them down on its request threads: polled.
            await asyncio.sleep(0.05)
        cloud.throttle_ec2 = 0
        hit = Counter(cloud.ec2_throttled[before:])
        calls = ", ".join(f"{op} {n}" for op, n in sorted(hit.items())) or "no call came"
        return f"EC2 answered {cloud.ec2_throttle_code} for {BURST_SECONDS:g}s ({calls})"
