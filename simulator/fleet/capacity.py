"""Capacity on the simulated fleet: how long a launch takes, and whether EC2 has an instance.

Issue 36: a replacement is only as cheap as the capacity behind it. Public reports say
GPU nodes take longer than CPU nodes to become Ready, and pools pinned to one GPU type
meet ``InsufficientInstanceCapacity``; a policy that replaces six times as often pays
for that six times. :class:`CapacityModel` states what the simulated Karpenter
(``karpenter.py``) assumes, each figure with its source or marked as an assumption:

- **Launch to Ready** is lognormal around ``Durations.node_launch`` (its median, so
  ``--node-launch`` and the ``node-launch`` sweep keep their meaning) with spread
  ``launch_sigma``.
- **A launch attempt finds no capacity** with ``insufficient_capacity_probability``;
  the next attempt comes ``capacity_retry`` later (Karpenter's unavailable-offerings
  cache), and a pool keeps trying until one succeeds: it stays short meanwhile.
- **A Capacity Block relaunch** (``capacity_block_relaunch``, off by default): the
  pool's instances fill a Capacity Block, so a replacement can launch only once the
  instance it replaces has been terminated and the block has cleaned its slot up.

Every draw comes from a generator of its own, seeded with the fleet's seed, the pool and
the pool's NodeClaim number (and the attempt), never from a shared stream: the pool's Nth
NodeClaim gets the same launch time and the same capacity answers under every policy,
and turning the model on changes neither the fault plan nor any other draw.

:class:`CapacityLedger` keeps what the comparison reports: node-hours short (launches
waiting for capacity) and overlap instance-hours (an old instance still running while
its replacement's is up); the definitions are on the class.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from datetime import timedelta

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpu_remediation.policy import Duration

UNAVAILABLE_OFFERINGS_TTL = timedelta(minutes=3)
"""How long Karpenter keeps an offering that answered InsufficientInstanceCapacity out of
its launches: aws/karpenter-provider-aws, ``pkg/cache/cache.go``,
``UnavailableOfferingsTTL = 3 * time.Minute`` ("the time before offerings that were marked
as unavailable are removed from the cache and are available for launch again"). A pool
pinned to one instance type in one zone has no other offering, so this is the delay
before its next attempt."""

MAX_CAPACITY_RETRY = timedelta(days=1)
"""The longest ``capacity_retry`` taken: any longer is a pool without capacity, which a
shortage probability of 1 says plainly."""


class InstanceLaunch(BaseModel):
    """The launch-to-Ready median of one instance type's pools."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    instance_type: str = Field(min_length=1, max_length=64)
    median: Duration = Field(gt=timedelta(0), le=timedelta(days=1))


class CapacityModel(BaseModel):
    """What a Karpenter launch on the simulated fleet meets: its time, and capacity or not.

    The defaults leave launches as they were before the model (every launch takes
    exactly ``Durations.node_launch`` and finds capacity): no public figure gives a
    launch-time spread or a per-launch shortage rate, so both are assumptions a user
    states (``--capacity-shortage``, a model file's ``capacity`` section).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    launch_sigma: float = Field(
        default=0.0,
        ge=0.0,
        le=2.0,
        description="Spread of launch-to-Ready (lognormal sigma around durations.node_launch, "
        "its median). Assumption: 0 (every launch takes the median); public reports give "
        "only single GPU nodes that took 10 minutes or more (aws/karpenter-provider-aws#3033, "
        "kubernetes-sigs/karpenter#357), not a distribution.",
    )
    insufficient_capacity_probability: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="Chance a launch attempt finds no instance (EC2 "
        "InsufficientInstanceCapacity, as GPU pools pinned to one type meet: "
        "aws/karpenter-provider-aws#4165, #8514). Assumption: 0; no per-launch rate is "
        "published (--capacity-shortage sets it).",
    )
    capacity_retry: Duration = Field(
        default=UNAVAILABLE_OFFERINGS_TTL,
        gt=timedelta(0),
        le=MAX_CAPACITY_RETRY,
        description="After an attempt found no capacity, the next comes this much later: "
        "Karpenter's UnavailableOfferingsTTL, 3 minutes "
        "(aws/karpenter-provider-aws pkg/cache/cache.go).",
    )
    capacity_block_relaunch: Duration | None = Field(
        default=None,
        ge=timedelta(0),
        le=MAX_CAPACITY_RETRY,
        description="The pools fill EC2 Capacity Blocks: a replacement launches only this "
        "long after the instance it replaces was terminated (AWS EC2 user guide, "
        "capacity-blocks-launch: cleaning an instance up 'takes several minutes' before "
        "another can replace it; the number is an assumption). None: on-demand pools, a "
        "replacement launches at once.",
    )

    launch_by_instance_type: tuple[InstanceLaunch, ...] = Field(
        default=(),
        max_length=64,
        description="Launch-to-Ready medians of pools of these instance types, instead of "
        "durations.node_launch (e.g. [{instance_type: p5.48xlarge, median: 15m}]). "
        "Assumption: none; no public per-type figures were found.",
    )

    @model_validator(mode="after")
    def _one_median_per_type(self) -> CapacityModel:
        types = [entry.instance_type for entry in self.launch_by_instance_type]
        if len(set(types)) != len(types):
            raise ValueError(f"launch_by_instance_type: each instance type once, got {types}")
        return self

    def launch_median(self, instance_type: str, default: timedelta) -> timedelta:
        """The launch-to-Ready median of a pool of ``instance_type`` (``default`` if unlisted)."""
        for entry in self.launch_by_instance_type:
            if entry.instance_type == instance_type:
                return entry.median
        return default

    def launch_seconds(self, median: timedelta, rng: random.Random) -> float:
        """One launch-to-Ready time in simulated seconds: ``median`` times exp(sigma * N(0, 1)).

        With ``launch_sigma`` 0 this is ``median`` exactly (the draw is still made, so the
        generator's use does not depend on the sigma).
        """
        return float(median.total_seconds() * math.exp(self.launch_sigma * rng.gauss(0.0, 1.0)))

    def finds_capacity(self, rng: random.Random) -> bool:
        """Whether one launch attempt gets an instance."""
        return rng.random() >= self.insufficient_capacity_probability


def launch_draws(seed: int, pool: str, number: int) -> random.Random:
    """The generator of the launch time of ``pool``'s ``number``-th NodeClaim."""
    return random.Random(f"{seed}/capacity/{pool}/{number}/launch")


def attempt_draws(seed: int, pool: str, number: int, attempt: int) -> random.Random:
    """The generator of attempt ``attempt`` (from 1) of ``pool``'s ``number``-th NodeClaim."""
    return random.Random(f"{seed}/capacity/{pool}/{number}/attempt/{attempt}")


class CapacityReport(BaseModel):
    """Capacity and the cost of replacements, as far as the fleet has run.

    ``launches``: instances Karpenter launched whose nodes registered.
    ``insufficient_capacity``: launch attempts that found no capacity.
    ``capacity_block_waits``: replacements that had to wait for a Capacity Block's slot.
    ``node_hours_short`` and ``overlap_instance_hours``: see :class:`CapacityLedger`.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    launches: int = 0
    insufficient_capacity: int = 0
    capacity_block_waits: int = 0
    node_hours_short: float = 0.0
    overlap_instance_hours: float = 0.0


@dataclass(slots=True)
class _Pair:
    """An old instance being replaced, and the NodeClaim replacing it now."""

    new: str | None
    started: float | None
    """When ``new``'s instance started launching (None: not yet)."""


class CapacityLedger:
    """Node-hours short and overlap instance-hours, kept as Karpenter works (callers lock).

    **Node-hours short**: for every NodeClaim, the simulated time from its first launch
    attempt that found no capacity (or, in a Capacity Block, from its creation while the
    slot it needs is still taken) until the attempt that found capacity started its
    instance, or until the NodeClaim was deleted, or until now if it is still waiting.
    It is the time the pool had one node fewer than its size *because of capacity*: the
    launch time that follows is not in it (a launch with capacity takes that too).

    **Overlap instance-hours**: for every node replaced (its NodeClaim deleted while it
    ran), the simulated time both its instance and its replacement's existed: from the
    moment the replacement's instance started launching (the attempt that found
    capacity; its pending time is in it, as EC2's pending state is short next to the
    launch-to-Ready time) until the old instance was terminated (Karpenter's
    TerminateInstances after the drain; EC2 bills neither pending nor shutting-down,
    AWS EC2 user guide, "instance lifecycle"). When the replacement's NodeClaim is
    deleted before its node registers, the overlap runs until then and the NodeClaim
    that takes its place continues the pair. It is the instance cost of replacing
    before terminating; a Capacity Block relaunch has none (the new instance waits for
    the old one's slot).
    """

    def __init__(self) -> None:
        self._short_s = 0.0
        self._waiting: dict[str, float] = {}
        """NodeClaims waiting for capacity: name -> since."""
        self._overlap_s = 0.0
        self._pairs: dict[str, _Pair] = {}
        """Old NodeClaims whose instance still runs, by name."""
        self._new_of: dict[str, str] = {}
        """Replacing NodeClaim -> the old one it replaces."""

    def terminating(self, old: str) -> None:
        """``old``'s NodeClaim was deleted while its instance runs: a replacement follows."""
        self._pairs.setdefault(old, _Pair(None, None))

    def replacing(self, new: str, old: str) -> None:
        """NodeClaim ``new`` replaces ``old`` (ignored once ``old``'s instance is gone)."""
        pair = self._pairs.get(old)
        if pair is None:
            return
        if pair.new is not None:
            self._new_of.pop(pair.new, None)
        pair.new, pair.started = new, None
        self._new_of[new] = old

    def waiting(self, claim: str, now: float) -> None:
        """``claim`` found no capacity at ``now`` (a wait already under way goes on)."""
        self._waiting.setdefault(claim, now)

    def launch_started(self, claim: str, now: float) -> None:
        """``claim``'s attempt found capacity at ``now``: its instance is launching."""
        self._stop_waiting(claim, now)
        old = self._new_of.get(claim)
        if old is not None:
            self._pairs[old].started = now

    def dropped(self, claim: str, now: float) -> None:
        """``claim`` was deleted before its node registered."""
        self._stop_waiting(claim, now)
        old = self._new_of.pop(claim, None)
        if old is None:
            return
        pair = self._pairs[old]
        if pair.started is not None:
            self._overlap_s += now - pair.started
        pair.new, pair.started = None, None

    def _stop_waiting(self, claim: str, now: float) -> None:
        """``claim`` no longer waits for capacity: its wait, if any, is short time."""
        since = self._waiting.pop(claim, None)
        if since is not None:
            self._short_s += now - since

    def instance_ended(self, old: str, now: float) -> None:
        """``old``'s instance was terminated at ``now`` (or it had none)."""
        pair = self._pairs.pop(old, None)
        if pair is None:
            return
        if pair.new is not None:
            self._new_of.pop(pair.new, None)
        if pair.started is not None:
            self._overlap_s += now - pair.started

    def node_hours_short(self, now: float) -> float:
        """Node-hours short so far, the waits still under way counted up to ``now``."""
        open_s = sum(max(0.0, now - since) for since in self._waiting.values())
        return (self._short_s + open_s) / 3600.0

    def overlap_instance_hours(self, now: float) -> float:
        """Overlap instance-hours so far, the overlaps still under way counted up to ``now``."""
        open_s = sum(
            max(0.0, now - p.started) for p in self._pairs.values() if p.started is not None
        )
        return (self._overlap_s + open_s) / 3600.0
