"""One attempt of a training job: its work, its checkpoints, and what its end cost.

Pure arithmetic over simulated seconds, no fleet and no store, so it can be
read (and tested) alone. An attempt starts from the work its run had saved,
trains at one second of work per second, and stops training while it saves a
checkpoint. At its end, its GPU time is split exactly into:

- productive: work that is kept (saved in a checkpoint, or the run completed);
- checkpointing: saves the job does on its own schedule;
- requested: saves the remediation asked for (the handshake);
- lost: everything else, i.e. work since the last checkpoint, any save cut short, the
  restart's own start (``startup``: loading the checkpoint and the gang's rendezvous)
  and time hung.

An attempt may *hang* (issue 36): a fault that stops a rank without an error leaves
every rank waiting at its next collective, so the job makes no progress (and cannot
save) until the collective's timeout ends it, or until something evicts it first.
``hung`` reports that time on its own, as a part of ``lost``.

A running attempt counts its unsaved work as productive until it is lost.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from enum import StrEnum


class Why(StrEnum):
    """Why a checkpoint is being saved."""

    PERIODIC = "periodic"
    REQUESTED = "requested"


class Ending(StrEnum):
    """How an attempt ended."""

    COMPLETED = "completed"
    FAULT = "fault"
    """A fault broke work (or the job was placed on a node already broken)."""
    EVICTED = "evicted"
    """The remediation evicted a pod through the Eviction API (DisruptionTarget)."""
    DELETED = "deleted"
    """The remediation deleted a pod without an eviction (no DisruptionTarget)."""
    REBOOTED = "rebooted"
    """The remediation rebooted a node the job still ran on."""

    @property
    def spends_budget(self) -> bool:
        """Counted against the retry budget (a podFailurePolicy Ignores DisruptionTarget)."""
        return self in (Ending.FAULT, Ending.DELETED, Ending.REBOOTED)

    @property
    def by_remediation(self) -> bool:
        """Caused by the project's own actions (in the simulator only it drains and reboots)."""
        return self in (Ending.EVICTED, Ending.DELETED, Ending.REBOOTED)


@dataclass(slots=True)
class Usage:
    """GPU-seconds of one attempt (or a sum of them)."""

    allocated: float = 0.0
    productive: float = 0.0
    checkpointing: float = 0.0
    requested: float = 0.0
    lost: float = 0.0
    slowed: float = 0.0
    """Training time that a slow node (issue 37) turned into no work: at 1.34x
    slower, a quarter of every second."""
    hung: float = 0.0
    """Of ``lost``: time the attempt was hung, waiting at a collective (issue 36)."""

    def add(self, other: Usage) -> None:
        """Add ``other`` into this one."""
        self.allocated += other.allocated
        self.productive += other.productive
        self.checkpointing += other.checkpointing
        self.requested += other.requested
        self.lost += other.lost
        self.slowed += other.slowed
        self.hung += other.hung


@dataclass(slots=True)
class Attempt:
    """The timeline of one attempt (simulated seconds).

    Args:
        started_at: When its pods were placed.
        resumed_from: Work its run had saved then (0 for a fresh run).
        total: Work the run needs.
        interval: Work between periodic checkpoints.
        cost: Time one checkpoint takes.
        startup: Time from the placement until training starts (a restart loads its
            checkpoint and the gang meets again first).
    """

    started_at: float
    resumed_from: float
    total: float
    interval: float
    cost: float
    startup: float = 0.0
    work: float = field(init=False)
    since: float = field(init=False)
    saved: float = field(init=False)
    saving_since: float | None = None
    saving_for: Why | None = None
    periodic_s: float = 0.0
    requested_s: float = 0.0
    last_save_requested: bool = False
    """Whether the latest complete checkpoint was one the remediation asked for."""
    answered: bool = False
    """Whether a checkpoint of this attempt answered a request (a periodic save answers a
    ``when_idle`` one): the drain that follows comes after a checkpoint saved for it."""
    rate: float = 1.0
    """Work per second while training: below 1 while a rank's node is slow (issue 37)."""
    slowed_s: float = 0.0
    """Training seconds lost to slowness up to ``since``."""
    hung_since: float | None = None
    """When the attempt hung (None: it is not hung)."""

    def __post_init__(self) -> None:
        self.work = self.saved = self.resumed_from
        self.since = self.started_at + self.startup

    @property
    def saving(self) -> bool:
        """Whether a checkpoint is being saved."""
        return self.saving_since is not None

    @property
    def hung(self) -> bool:
        """Whether the attempt waits at a collective that will not complete."""
        return self.hung_since is not None

    def work_at(self, now: float) -> float:
        """Work done by ``now`` (frozen while saving or hung)."""
        if self.saving or self.hung:
            return self.work
        return min(self.total, self.work + self.rate * max(0.0, now - self.since))

    def slowed_at(self, now: float) -> float:
        """Training seconds lost to slowness by ``now``."""
        if self.saving or self.hung:
            return self.slowed_s
        return self.slowed_s + (1.0 - self.rate) * max(0.0, now - self.since)

    def hung_at(self, now: float) -> float:
        """Seconds hung by ``now``."""
        return max(0.0, now - self.hung_since) if self.hung_since is not None else 0.0

    def hang(self, now: float) -> bool:
        """Every rank waits from ``now`` on: no work, and a save under way never completes.

        Returns:
            Whether it was not hung already.
        """
        if self.hung:
            return False
        self._settle(now)
        self.saving_since = None  # the save's time stays in ``lost``: it is never kept
        self.saving_for = None
        self.hung_since = now
        return True

    def next_event(self) -> tuple[float, str]:
        """When the next thing happens by itself: ``saved``, ``checkpoint`` or ``done``.

        A hung attempt has none (the caller schedules nothing for it).
        """
        if self.saving_since is not None:
            return self.saving_since + self.cost, "saved"
        to_done = self.total - self.work
        to_checkpoint = self.saved + self.interval - self.work
        if to_checkpoint < to_done:
            return self.since + max(0.0, to_checkpoint) / self.rate, "checkpoint"
        return self.since + max(0.0, to_done) / self.rate, "done"

    def set_rate(self, now: float, rate: float) -> bool:
        """Train at ``rate`` from ``now`` on; whether it changed (the next event moves)."""
        if rate == self.rate:
            return False
        self._settle(now)
        self.rate = rate
        return True

    def _settle(self, now: float) -> None:
        """Account the training since ``since`` at the current rate, up to ``now``."""
        if self.saving or self.hung or now <= self.since:
            return  # nothing trained since ``since`` (or training has not started yet)
        self.work = self.work_at(now)
        self.slowed_s = self.slowed_at(now)
        self.since = now

    def begin_save(self, now: float, why: Why) -> None:
        """Stop training and start saving a checkpoint of the work done by ``now``.

        Asked before training has started (the restart's startup), the save begins
        when it does; a hung attempt saves nothing.
        """
        if self.saving or self.hung:
            return
        self._settle(now)
        self.saving_since = max(now, self.since)
        self.saving_for = why

    def finish_save(self, now: float) -> float:
        """The checkpoint is durable: training resumes. Returns the work it saved."""
        if self.saving_since is None:
            return self.saved
        spent = now - self.saving_since
        if self.saving_for is Why.REQUESTED:
            self.requested_s += spent
        else:
            self.periodic_s += spent
        self.last_save_requested = self.saving_for is Why.REQUESTED
        self.saved = self.work
        self.since = now
        self.saving_since = None
        self.saving_for = None
        return self.saved

    def usage(self, now: float, gpus: int, ending: Ending | None) -> Usage:
        """The attempt's GPU time up to ``now``, split as the module says.

        Args:
            now: The end (or the present, for a running attempt).
            gpus: GPUs the attempt holds.
            ending: How it ended; None while it runs.
        """
        elapsed = max(0.0, now - self.started_at)
        periodic, requested = self.periodic_s, self.requested_s
        if ending is None:
            in_flight = max(0.0, now - self.saving_since) if self.saving_since is not None else 0.0
            if self.saving_for is Why.REQUESTED:
                requested += in_flight
            else:
                periodic += in_flight
            productive = self.work_at(now) - self.resumed_from
        elif ending is Ending.COMPLETED:
            productive = self.total - self.resumed_from
        else:
            productive = self.saved - self.resumed_from
        slowed = self.slowed_at(now)
        lost = max(0.0, elapsed - productive - periodic - requested - slowed)
        return Usage(
            allocated=elapsed * gpus,
            productive=productive * gpus,
            checkpointing=periodic * gpus,
            requested=requested * gpus,
            lost=lost * gpus,
            slowed=slowed * gpus,
            hung=min(lost, self.hung_at(now)) * gpus,
        )

    @property
    def saved_for_remediation(self) -> bool:
        """Whether the job saved for the remediation (asked or answering) before its drain."""
        return self.last_save_requested or self.answered

    def lost_work(self, now: float) -> float:
        """Work an interruption at ``now`` throws away (since the last checkpoint)."""
        return self.work_at(now) - self.saved


@dataclass(slots=True)
class JobStats:
    """What the fleet's jobs did so far (runs, attempts, handshakes, GPU time)."""

    runs_succeeded: int = 0
    runs_failed: int = 0
    """Runs that spent their whole retry budget."""
    runs_failed_by_remediation: int = 0
    """Of those, runs whose last, budget-exhausting failure the remediation caused."""
    interrupted_by_fault: int = 0
    interrupted_by_remediation: int = 0
    restarts_spending_budget: int = 0
    disruptions: int = 0
    """Restarts after an eviction (DisruptionTarget): the budget is not spent."""
    evictions_spending_budget: int = 0
    """The remediation ended an attempt in a way that spent the budget (delete, reboot)."""
    drains_without_checkpoint: int = 0
    """Evictions that lost work: the job had not just saved for the remediation."""
    handshake_failures_caused_by_remediation: int = 0
    """Of :attr:`failures_caused_by_remediation`, those of jobs that speak the handshake."""
    failures_caused_by_remediation_by_fault: Counter[str] = field(default_factory=Counter)
    """Of :attr:`failures_caused_by_remediation`, by the faults the node had (``+``-joined
    kinds, ``none`` for none): says what the project acted on."""
    checkpoint_requests: int = 0
    deferred: int = 0
    """Requests with urgency when_idle."""
    checkpoints_answered: int = 0
    malformed_requests: int = 0
    hangs: int = 0
    """Attempts that hung at a collective (issue 36)."""
    hang_timeouts: int = 0
    """Of those, attempts the collective's timeout failed (nothing ended them before)."""
    hangs_ended_by_remediation: int = 0
    """Of those, attempts the remediation ended (a drain, reboot or delete) while hung; the
    rest of the hangs another fault ended, or they still hang."""
    runs_by_gang: dict[int, list[int]] = field(default_factory=dict)
    """Gang size -> [runs succeeded, runs failed] of jobs of that size."""

    def run_ended(self, size: int, *, succeeded: bool) -> None:
        """Count a run of a job of ``size`` nodes that succeeded or spent its budget."""
        counts = self.runs_by_gang.setdefault(size, [0, 0])
        counts[0 if succeeded else 1] += 1

    finished: Usage = field(default_factory=Usage)
    lost_to_faults: float = 0.0
    lost_to_remediation: float = 0.0
    """GPU-seconds of work thrown away by the remediation's drains, deletes and reboots."""

    @property
    def failures_caused_by_remediation(self) -> int:
        """Job failures the project itself caused.

        A drain, delete or reboot that cost the job its work since the last checkpoint
        (no fresh one was saved for it) or its retry budget.
        """
        return self.evictions_spending_budget + self.drains_without_checkpoint

    def record(self, usage: Usage, ending: Ending, *, blamed: bool | None = None) -> None:
        """Add a finished attempt's GPU time, its loss charged to what ended it.

        Args:
            usage: The attempt's GPU time.
            ending: How it ended.
            blamed: Whether the loss is the remediation's (None: whether the ending is;
                a hung attempt's loss is the fault's, whoever ended the hang).
        """
        self.finished.add(usage)
        if ending is Ending.COMPLETED:
            return
        if ending.by_remediation if blamed is None else blamed:
            self.lost_to_remediation += usage.lost
        else:
            self.lost_to_faults += usage.lost
