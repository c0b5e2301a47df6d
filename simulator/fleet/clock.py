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

import time
from datetime import UTC, datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field

from gpu_remediation.policy import Duration


class SimClock:
    """Simulated seconds since :meth:`start`, running ``time_factor`` times as fast as real time.

    Args:
        time_factor: Simulated seconds per real second (> 0).
    """

    def __init__(self, time_factor: float = 1.0) -> None:
        if not time_factor > 0:
            raise ValueError(f"time factor must be positive, got {time_factor!r}")
        self.time_factor = float(time_factor)
        self._t0: float | None = None
        self._wall0 = datetime.now(UTC)

    def start(self) -> None:
        """Start counting (simulated time is 0 until then)."""
        if self._t0 is None:
            self._t0 = time.monotonic()
            self._wall0 = datetime.now(UTC)

    @property
    def started(self) -> bool:
        """Whether :meth:`start` was called."""
        return self._t0 is not None

    def now(self) -> float:
        """Simulated seconds since the start."""
        if self._t0 is None:
            return 0.0
        return (time.monotonic() - self._t0) * self.time_factor

    def to_real(self, sim_seconds: float) -> float:
        """Real seconds that ``sim_seconds`` of simulated time take."""
        return max(0.0, sim_seconds) / self.time_factor

    def real_deadline(self, sim_t: float) -> float:
        """The ``time.monotonic()`` value at which simulated time reaches ``sim_t``."""
        if self._t0 is None:
            raise RuntimeError("the clock is not started")
        return self._t0 + sim_t / self.time_factor

    def wall(self, sim_t: float | None = None) -> datetime:
        """The simulated calendar time: start time plus simulated seconds (for reports)."""
        return self._wall0 + timedelta(seconds=self.now() if sim_t is None else sim_t)


def seconds(value: timedelta) -> float:
    """A duration in seconds (as a float)."""
    return value.total_seconds()


class Durations(BaseModel):
    """How long things take on the simulated fleet, in simulated time.

    Defaults follow the reference (gpu-faults.md section 6). Accepts "30s", "4m", "2h".
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu_reset: Duration = Field(
        default=timedelta(seconds=20), description="nvidia-smi -r, per GPU."
    )
    reboot: Duration = Field(
        default=timedelta(minutes=4), description="Host down until the kubelet is Ready again."
    )
    node_launch: Duration = Field(
        default=timedelta(minutes=5),
        description="Karpenter: NodeClaim created until the new node is Ready (GPU stack up).",
    )
    instance_termination: Duration = Field(
        default=timedelta(seconds=60), description="Instance shutdown until the Node is deleted."
    )
    drain_retry: Duration = Field(
        default=timedelta(seconds=5), description="Karpenter retries blocked evictions this often."
    )
    drain_timeout: Duration = Field(
        default=timedelta(minutes=15),
        description="Karpenter's terminationGracePeriod: pods left after it are deleted.",
    )
    diag_level_1: Duration = timedelta(seconds=60)
    diag_level_2: Duration = timedelta(minutes=5)
    diag_level_3: Duration = timedelta(minutes=12)
    diag_level_4: Duration = timedelta(minutes=60)
    health_check: Duration = Field(default=timedelta(seconds=5), description="dcgmi health -c.")
    unreachable_command: Duration = Field(
        default=timedelta(seconds=30),
        description="A command sent to a host that is down ends TimedOut after this.",
    )
    npd_interval: Duration = Field(
        default=timedelta(seconds=30), description="Node Problem Detector plugin invoke interval."
    )
    node_monitor_grace: Duration = Field(
        default=timedelta(seconds=40),
        description="A hung kubelet's node turns Ready=Unknown after this (node controller).",
    )
    application_clear: Duration = Field(
        default=timedelta(minutes=10),
        description="An application fault (Xid 13/31) is reported until the job restarts.",
    )
    false_positive_clear: Duration = Field(
        default=timedelta(minutes=30),
        description="A spurious health report clears by itself after this (or on a diagnostic).",
    )
    efa_link_clear: Duration = Field(
        default=timedelta(hours=2),
        description="A network link fault outside the node is repaired after this.",
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
