"""Simulated time: one time factor scales every delay of the fleet simulator.

The simulator thinks in simulated seconds since the fleet started: a reboot
takes 4 simulated minutes, a replacement node 5. ``time_factor`` is how many
simulated seconds pass per real second, so with a factor of 60 that reboot
takes 4 real seconds. Every duration in :class:`Durations` is simulated time
and is converted with :meth:`SimClock.to_real` only where a thread waits.

Kubernetes timestamps (creationTimestamp, lastTransitionTime) stay wall-clock
time: the real activities compare them with their own (real) clock.
"""

from __future__ import annotations

import bisect
import math
import threading
import time
from datetime import UTC, datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field

from agent.config import AgentConfig
from gpu_remediation.policy import Duration

DEFAULT_MAX_LAG = 60.0
"""Simulated seconds the clock may run ahead of the oldest due simulator event."""

LAG_EDGES = (1.0, 10.0, 60.0, 300.0, 900.0, 3600.0, math.inf)
"""Upper edges (simulated seconds) of the lateness histogram."""


class _Lateness:
    """How late the scheduler's events ran: a histogram over ``LAG_EDGES`` (callers lock)."""

    def __init__(self) -> None:
        self.counts = [0] * len(LAG_EDGES)
        self.most = 0.0
        self.events = 0

    def record(self, late: float) -> None:
        """One event ran ``late`` simulated seconds after its time."""
        self.events += 1
        self.most = max(self.most, late)
        self.counts[bisect.bisect_left(LAG_EDGES, late)] += 1

    def report(self) -> dict[str, float | int]:
        """Events, the p50 and p95 buckets' upper edges, the most, and how many were late."""
        return {
            "events": self.events,
            "late_p50_s": self._quantile(0.5),
            "late_p95_s": self._quantile(0.95),
            "late_max_s": round(self.most, 1),
            "late_over_60s": sum(self.counts[3:]),
            "late_over_15m": sum(self.counts[5:]),
        }

    def _quantile(self, q: float) -> float:
        seen = 0
        for edge, count in zip(LAG_EDGES, self.counts, strict=True):
            seen += count
            if self.events and seen >= q * self.events:
                return edge if math.isfinite(edge) else round(self.most, 1)
        return 0.0


class SimClock:
    """Simulated seconds since :meth:`start`, running ``time_factor`` times as fast as real time.

    The clock is paced by the simulator's own processing: the fleet's scheduler
    tells it (:meth:`pace`) when it runs an event, and when that event is more
    than ``max_lag`` simulated seconds late, simulated time stands still until
    the scheduler has caught up (:meth:`resume`, called when no event is due).
    So a simulator at 100% of a core slows simulated time down instead of
    running its events late (a reboot that ends hours after it should, a job
    that completes late); the factor it then achieves is :meth:`lag_report`'s
    ``achieved_factor``. Work that does not run on this clock (Temporal timers,
    the real activities) keeps the requested factor, so a run whose achieved
    factor falls well below the requested one is not to be trusted: the
    reports show both.

    Args:
        time_factor: Simulated seconds per real second (> 0).
        max_lag: How late (simulated seconds) an event may run before simulated
            time is held; None: never (the clock is wall-clock x factor).
    """

    def __init__(
        self, time_factor: float = 1.0, *, max_lag: float | None = DEFAULT_MAX_LAG
    ) -> None:
        if not time_factor > 0:
            raise ValueError(f"time factor must be positive, got {time_factor!r}")
        if max_lag is not None and not max_lag >= 0:
            raise ValueError(f"max lag must be >= 0 simulated seconds, got {max_lag!r}")
        self.time_factor = float(time_factor)
        self.max_lag = max_lag
        self._t0: float | None = None
        self._wall0 = datetime.now(UTC)
        self._lock = threading.Lock()
        # now() = _sim_base + (monotonic - _real_base) * _rate; _rate is 0 while held.
        self._sim_base = 0.0
        self._real_base = 0.0
        self._rate = self.time_factor
        self._held_since: float | None = None
        self._held_real = 0.0
        self._holds = 0
        self._lateness = _Lateness()
        # (monotonic, simulated, rate) from each change of pace on: maps real moments
        # of the run to simulated time (sim_at), however often the clock was held.
        self._pace_starts: list[float] = []
        self._paces: list[tuple[float, float, float]] = []

    def start(self) -> None:
        """Start counting (simulated time is 0 until then)."""
        with self._lock:
            if self._t0 is None:
                self._t0 = self._real_base = time.monotonic()
                self._wall0 = datetime.now(UTC)
                self._paced(self._t0)

    @property
    def started(self) -> bool:
        """Whether :meth:`start` was called."""
        return self._t0 is not None

    def _at(self, mono: float) -> float:
        return self._sim_base + (mono - self._real_base) * self._rate

    def _paced(self, mono: float) -> None:
        # Caller holds the lock: the pace (base, rate) changed at ``mono``.
        self._pace_starts.append(mono)
        self._paces.append(
            (mono, self._sim_base + (mono - self._real_base) * self._rate, self._rate)
        )

    def now(self) -> float:
        """Simulated seconds since the start (never decreasing)."""
        if self._t0 is None:
            return 0.0
        with self._lock:
            return self._at(time.monotonic())

    def pace(self, sim_t: float) -> float:
        """The scheduler runs the event due at ``sim_t`` now; returns how late it is.

        Counts the lateness (simulated seconds); beyond ``max_lag`` simulated
        time stands still until :meth:`resume`.
        """
        if self._t0 is None:
            return 0.0
        with self._lock:
            mono = time.monotonic()
            now = self._at(mono)
            late = max(0.0, now - sim_t)
            self._lateness.record(late)
            if self.max_lag is not None and late > self.max_lag and self._held_since is None:
                self._sim_base, self._real_base, self._rate = now, mono, 0.0
                self._held_since = mono
                self._holds += 1
                self._paced(mono)
            return late

    def idle(self) -> None:
        """Nothing is due: nothing to do (a paced clock runs by itself)."""

    def resume(self) -> None:
        """The scheduler has no due event left: simulated time runs again (if held)."""
        with self._lock:
            if self._held_since is None:
                return
            mono = time.monotonic()
            self._held_real += mono - self._held_since
            self._held_since = None
            self._sim_base, self._real_base = self._at(mono), mono
            self._rate = self.time_factor
            self._paced(mono)

    def sim_at(self, moment: datetime) -> float:
        """Simulated seconds at wall-clock ``moment`` of this run (0 before the start).

        For times recorded in real time, such as an incident's start and its last
        decision (Temporal's clock): with the clock held now and then, the simulated
        time between two of them is not their real distance times ``time_factor``.
        A moment after now is extrapolated at the current pace.
        """
        with self._lock:
            if self._t0 is None:
                return 0.0
            mono = self._t0 + (moment - self._wall0).total_seconds()
            index = bisect.bisect_right(self._pace_starts, mono) - 1
            if index < 0:
                return 0.0
            since, sim, rate = self._paces[index]
            return sim + (mono - since) * rate

    def to_real(self, sim_seconds: float) -> float:
        """Real seconds that ``sim_seconds`` of simulated time take."""
        return max(0.0, sim_seconds) / self.time_factor

    def real_deadline(self, sim_t: float) -> float:
        """The ``time.monotonic()`` value at which simulated time reaches ``sim_t``.

        While the clock is held, any time it has reached is due now and a later one
        never (the scheduler resumes the clock before it waits).
        """
        if self._t0 is None:
            raise RuntimeError("the clock is not started")
        with self._lock:
            if self._rate == 0:
                return self._real_base if sim_t <= self._sim_base else math.inf
            return self._real_base + (sim_t - self._sim_base) / self._rate

    def wait_until(self, sim_t: float, stop: threading.Event) -> bool:
        """Block this thread until simulated time reaches ``sim_t``; True when ``stop`` was set."""
        while True:
            remaining = self.real_deadline(sim_t) - time.monotonic()
            if remaining <= 0:
                return stop.is_set()
            # A held clock has no deadline yet: look again shortly.
            if stop.wait(min(remaining, 0.25)):
                return True

    def wall(self, sim_t: float | None = None) -> datetime:
        """The simulated calendar time: start time plus simulated seconds (for reports)."""
        return self._wall0 + timedelta(seconds=self.now() if sim_t is None else sim_t)

    def lag_report(self) -> dict[str, float | int]:
        """Requested and achieved factor, time held, how late the simulator's events ran.

        ``late_p50_s`` / ``late_p95_s`` are the upper edges of the histogram bucket
        (simulated seconds) the median / 95th-percentile event fell into.
        """
        with self._lock:
            mono = time.monotonic()
            real = mono - self._t0 if self._t0 is not None else 0.0
            sim = self._at(mono) if self._t0 is not None else 0.0
            held = self._held_real + (mono - self._held_since if self._held_since else 0.0)
            return {
                "requested_factor": self.time_factor,
                "achieved_factor": round(sim / real, 1) if real > 0 else self.time_factor,
                "held_real_s": round(held, 2),
                "holds": self._holds,
                **self._lateness.report(),
            }


class SteppedClock:
    """Simulated seconds since :meth:`start`, advanced from outside, never by real time.

    The clock-free comparison (ADR 018) runs Temporal on its time-skipping test
    server and steps this clock with the server's: simulated time is the server's
    time since the start, so a workflow timer and the fleet's events are on one
    timeline, and real latency (Temporal round trips, API calls) adds none of it
    beyond the real seconds it takes while the server holds its time still. The
    driver (``whatif.server_time``) calls :meth:`advance` when the server's time
    has reached the next step; the scheduler runs what is due up to it, each
    event at its own time (:meth:`now` is the running event's time, so work it
    schedules is not shifted by the step), and once it is idle (:meth:`idle`)
    the clock stands at the step.

    ``time_factor`` is 1: policy durations are not scaled on this clock.
    """

    time_factor = 1.0

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._now = 0.0
        self._until = 0.0  # the server's time: what is due up to here may run
        self._t0: float | None = None
        self._wall0 = datetime.now(UTC)
        self._steps = 0
        self._lateness = _Lateness()

    def anchor(self, wall: datetime) -> None:
        """Simulated time 0 is ``wall`` on the driver's calendar (before :meth:`start`)."""
        with self._cond:
            if self._t0 is not None:
                raise RuntimeError("the clock is already started")
            self._wall0 = wall

    def start(self) -> None:
        """Start counting at simulated time 0 (the anchor's moment)."""
        with self._cond:
            if self._t0 is None:
                self._t0 = time.monotonic()

    @property
    def started(self) -> bool:
        """Whether :meth:`start` was called."""
        return self._t0 is not None

    def now(self) -> float:
        """Simulated seconds since the start: the running event's time, else the step's."""
        with self._cond:
            return self._now

    def target(self) -> float:
        """How far the last :meth:`advance` let the fleet run (the step's end)."""
        with self._cond:
            return self._until

    def advance(self, to: float) -> None:
        """The server's time has reached ``to``: what is due up to it may run."""
        with self._cond:
            if to > self._until:
                self._until = to
                self._steps += 1
                self._cond.notify_all()

    def pace(self, sim_t: float) -> float:
        """The scheduler runs the event due at ``sim_t`` now, at its own time.

        Returns how long after its time the server's clock showed it (at most a step).
        """
        with self._cond:
            self._now = max(self._now, sim_t)
            late = max(0.0, self._until - sim_t)
            self._lateness.record(late)
            return late

    def idle(self) -> None:
        """Nothing is due any more: simulated time is the step's."""
        with self._cond:
            if self._until > self._now:
                self._now = self._until
                self._cond.notify_all()

    def resume(self) -> None:
        """Nothing to do: this clock never runs by itself, so it is never held."""

    def real_deadline(self, sim_t: float) -> float:
        """Due now once the server's time reached ``sim_t``; otherwise only after a step."""
        with self._cond:
            return 0.0 if sim_t <= self._until else math.inf

    def wait_until(self, sim_t: float, stop: threading.Event) -> bool:
        """Block this thread until simulated time reaches ``sim_t``; True when ``stop`` was set."""
        with self._cond:
            while self._now < sim_t:
                if stop.is_set():
                    return True
                # Woken by each step; the timeout only notices ``stop``.
                self._cond.wait(0.2)
        return stop.is_set()

    def sim_at(self, moment: datetime) -> float:
        """Simulated seconds at ``moment`` of the server's clock (0 before the start)."""
        if self._t0 is None:
            return 0.0
        return max(0.0, (moment - self._wall0).total_seconds())

    def to_real(self, sim_seconds: float) -> float:
        """Real seconds a wait of ``sim_seconds`` takes: none of them are real."""
        del sim_seconds
        return 0.0

    def wall(self, sim_t: float | None = None) -> datetime:
        """The server's calendar time at ``sim_t`` (now when None)."""
        return self._wall0 + timedelta(seconds=self.now() if sim_t is None else sim_t)

    def lag_report(self) -> dict[str, float | int]:
        """How far simulated time got, in how many steps and real seconds; events' lateness.

        Lateness here is how long after its time an event ran: at most one step
        (events between two steps run at the later one).
        """
        with self._cond:
            real = time.monotonic() - self._t0 if self._t0 is not None else 0.0
            sim = self._until
            return {
                "requested_factor": 0.0,
                "achieved_factor": round(sim / real, 1) if real > 0 else 0.0,
                "held_real_s": 0.0,
                "holds": 0,
                "steps": self._steps,
                **self._lateness.report(),
            }


FleetClock = SimClock | SteppedClock
"""Either clock: paced by real time, or stepped by the time-skipping server."""


def seconds(value: timedelta) -> float:
    """A duration in seconds (as a float)."""
    return value.total_seconds()


class Durations(BaseModel):
    """How long things take on the simulated fleet, in simulated time.

    Each default names its source or says it is an assumption (the report lists them
    all). Accepts "30s", "4m", "2h".
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu_reset: Duration = Field(
        default=timedelta(seconds=20),
        description="nvidia-smi -r, per GPU: an assumption inside the 'seconds to 2 minutes' "
        "operators report (gpu-faults.md section 6); NVIDIA publishes no figure.",
    )
    reboot: Duration = Field(
        default=timedelta(minutes=4),
        description="Host down until the kubelet is Ready again: an assumption inside the "
        "'3-5 minutes' operators report for a GPU host with its GPU stack (gpu-faults.md "
        "section 6); no public figure for a p5 was found.",
    )
    node_launch: Duration = Field(
        default=timedelta(minutes=5),
        description="Karpenter: NodeClaim created until the new node is Ready (GPU stack "
        "up): an assumption. Ordinary nodes take 40-100 s (aws/karpenter-provider-aws#3102, "
        "#6128); GPU types 'take much longer' (awslabs/amazon-eks-ami#1099), some near "
        "Karpenter's 15-minute registration limit (kubernetes-sigs/karpenter#357). "
        "Sweep it: remediate compare --sweep node-launch=...",
    )
    instance_termination: Duration = Field(
        default=timedelta(seconds=60),
        description="Instance shutdown until the Node is deleted: an assumption.",
    )
    drain_retry: Duration = Field(
        default=timedelta(seconds=5),
        description="Karpenter retries blocked evictions this often: an assumption.",
    )
    drain_timeout: Duration = Field(
        default=timedelta(minutes=15),
        description="Karpenter's terminationGracePeriod: pods left after it are deleted "
        "(a NodePool setting; 15 min is an assumption).",
    )
    diag_level_1: Duration = Field(
        default=timedelta(seconds=30),
        description="dcgmi diag -r 1: NVIDIA, 'normally lasting seconds' (dcgmi diag "
        "reference); 30 s is an assumption within that.",
    )
    diag_level_2: Duration = Field(
        default=timedelta(minutes=2),
        description="dcgmi diag -r 2: NVIDIA, 'normally lasting approximately two minutes' "
        "(dcgmi diag reference; dcgmi's help: '~ 2 minutes').",
    )
    diag_level_3: Duration = Field(
        default=timedelta(minutes=15),
        description="dcgmi diag -r 3: NVIDIA, 'normally lasting approximately 15 minutes' "
        "(dcgmi diag reference; dcgmi's help: '~ 15 minutes').",
    )
    diag_level_4: Duration = Field(
        default=timedelta(minutes=60),
        description="dcgmi diag -r 4: NVIDIA says only 'extended, longer-running'; an hour "
        "is an assumption.",
    )
    health_check: Duration = Field(
        default=timedelta(seconds=5), description="dcgmi health -c: an assumption."
    )
    efa_loopback: Duration = Field(
        default=timedelta(seconds=90),
        description="The EFA loopback on 32 devices: each a second to start its server and "
        "about 1.75 s to move 20 GiB at the simulated 12,000 MB/s (an assumption).",
    )
    unreachable_command: Duration = Field(
        default=timedelta(seconds=30),
        description="A command sent to a host that is down ends TimedOut after this: an "
        "assumption.",
    )
    npd_interval: Duration = Field(
        default=timedelta(seconds=30),
        description="Node Problem Detector plugin invoke interval: the node agent's own "
        "(deploy/npd), as the mission states (every 30 s).",
    )
    node_monitor_grace: Duration = Field(
        default=timedelta(seconds=40),
        description="A hung kubelet's node turns Ready=Unknown after this: "
        "kube-controller-manager's --node-monitor-grace-period, 40 s by default until "
        "Kubernetes 1.32 raised it to 50 s (kubernetes/kubernetes#121793, #127352).",
    )
    application_clear: Duration = Field(
        # A crashing job prints its Xid 13/31 once; the node agent keeps reporting an
        # Xid for its xid_hold after the line (agent/config.py), then the GPU shows
        # healthy again. The default is that hold, not a figure of its own.
        default=timedelta(seconds=AgentConfig.xid_hold),
        description="An application fault (Xid 13/31) is reported this long: the node "
        "agent's xid_hold after the crash's one Xid line.",
    )
    false_positive_clear: Duration = Field(
        default=timedelta(minutes=30),
        description="A spurious health report clears by itself after this (or on a "
        "diagnostic): an assumption.",
    )
    efa_link_clear: Duration = Field(
        default=timedelta(hours=2),
        description="A network link fault outside the node is repaired after this: an assumption.",
    )

    def diag(self, level: int) -> float:
        """Simulated seconds of ``dcgmi diag -r level`` on a node."""
        table = {
            1: self.diag_level_1,
            2: self.diag_level_2,
            3: self.diag_level_3,
            4: self.diag_level_4,
        }
        return seconds(table[level])
