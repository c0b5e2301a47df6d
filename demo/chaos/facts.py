"""What the invariant checker reads: the run's ground truth and its workflows, as plain data.

:mod:`demo.chaos.collect` fills these from the simulator (its store, moto) and
from Temporal (visibility, histories, the semaphore's state) after a run; the
checks in :mod:`demo.chaos.invariants` are pure functions of a :class:`RunFacts`,
so each can be tested against a planted violation without any server.

Times are real (UTC) throughout: Temporal's event times and the recorder's
clock are the same machine's.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

DETECTION_SLACK_S = 3.0
DELIVERY_SLACK_S = 35.0
ALERT_DELIVERY_SLACK_S = 30.0


class _Fact(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class BootChange(_Fact):
    """A node's ``status.nodeInfo.bootID`` as first seen (the first entry is its boot at birth)."""

    at: datetime
    boot_id: str


class ProblemEpisode(_Fact):
    """A span during which one of the policy's trigger conditions was a problem on a node."""

    condition: str
    start: datetime
    end: datetime | None = None
    """None: still a problem when the facts were collected."""
    grace_s: float
    """The rule's grace (real seconds): how long it must last before the watcher reports."""


class Taint(_Fact):
    """A taint on a Node."""

    key: str
    value: str | None = None
    effect: str


class NodeRecord(_Fact):
    """What really happened to one node (any node the fleet ever had)."""

    name: str
    watched: bool = True
    """Whether the watcher's node selector matches it."""
    instance_id: str | None = None
    boot_ids: list[BootChange] = Field(default_factory=list)
    episodes: list[ProblemEpisode] = Field(default_factory=list)
    claim_deleted_at: list[datetime] = Field(default_factory=list)
    """When its NodeClaim was deleted (a replacement began); at most once in a sane world."""
    deleted_at: datetime | None = None
    unschedulable: bool = False
    """At the end (or when it was deleted)."""
    taints: list[Taint] = Field(default_factory=list)
    """At the end (or when it was deleted)."""


ActivityStatus = Literal["completed", "failed", "timed_out", "canceled", "open"]


class ActivityRecord(_Fact):
    """One activity a workflow scheduled (one decision), with its retries folded in."""

    name: str
    scheduled_at: datetime
    closed_at: datetime | None = None
    status: ActivityStatus = "open"
    attempts: int = 0
    input: dict[str, Any] = Field(default_factory=dict)
    result: dict[str, Any] | None = None


RunStatus = Literal[
    "running", "completed", "failed", "canceled", "terminated", "continued_as_new", "timed_out"
]


class PermitReleased(_Fact):
    """A run signalled a semaphore to take one of its permits back."""

    at: datetime
    request_id: str


class RunRecord(_Fact):
    """One run of one workflow of the run's cluster (incident, admission or permit guard)."""

    workflow_id: str
    run_id: str
    workflow_type: str
    node: str | None = None
    status: RunStatus
    started_at: datetime
    closed_at: datetime | None = None
    outcome: str | None = None
    """An incident's outcome so far (the ``state`` query), ``escalated`` while handed over."""
    settled: bool = True
    """An incident has its outcome (or is escalated); other workflows: True."""
    activities: list[ActivityRecord] = Field(default_factory=list)
    task_failures: list[str] = Field(default_factory=list)
    """Causes of its failed workflow tasks (a bug or a non-determinism), benign ones left out."""
    task_failures_replayed: list[str] = Field(default_factory=list)
    """Failures on a worker's cached state whose next attempt, a full replay, passed
    (``demo.chaos.collect.CACHED_STATE_FAILURE``): shown, not a violation."""
    waiting_on: list[str] = Field(default_factory=list)
    """An open incident's pending activities at the end (name, attempt, last failure)."""
    waiting_for: str | None = None
    """What an open incident said it waits for at the end (its state's ``waiting_for``)."""
    report_ids: list[str] = Field(default_factory=list)
    """Idempotency keys of the evidence reports it was sent (its ``add_evidence`` signals)."""
    permits_released: list[PermitReleased] = Field(default_factory=list)
    """The permits it gave back itself (its ``release_permit`` signals), in order."""


class AlertRecord(_Fact):
    """One firing episode of an alert, as the simulated Alertmanager handled it."""

    node: str
    fingerprint: str
    report_id: str
    """The key of its firing report, as the receiver makes it (``triggers.alerts.report_id``)."""
    starts_at: datetime
    ends_at: datetime | None = None
    first_notified_at: datetime | None = None
    """The first notification that carried it firing (None: it never reached a flush)."""
    acknowledged_at: datetime | None = None
    """The receiver's first 2xx to a notification that carried it firing."""


class PermitHolder(_Fact):
    """A replacement permit held at the end."""

    holder_workflow_id: str
    holder_run_id: str
    request_id: str


class RunFacts(_Fact):
    """Everything the invariants are checked against."""

    collected_at: datetime
    replacement_cap: int
    step_caps: dict[str, int] = Field(default_factory=dict)
    """Fleet-wide caps of the disruptive steps by activity (the policy's ``disruption``)."""
    nodes: dict[str, NodeRecord]
    runs: list[RunRecord]
    permit_holders: list[PermitHolder] = Field(default_factory=list)
    max_replacements_in_flight: int = 0
    """The fleet's own figure: the most NodeClaims deleted whose Node was not gone yet."""
    ec2_reboot_requests: dict[str, int] = Field(default_factory=dict)
    """EC2 ``RebootInstances`` calls per node (moto's log)."""
    gpu_resets_sent: dict[str, int] = Field(default_factory=dict)
    """SSM ``nvidia-smi -r`` commands sent per node (moto's command list)."""
    alerts: list[AlertRecord] = Field(default_factory=list)
    """Every alert episode of the simulated Alertmanager (none when the run had no alerts)."""
    alert_delivery_slack_s: float = ALERT_DELIVERY_SLACK_S
    """Real seconds after its first notification by which an alert still firing must have
    been acknowledged (two group intervals of retries, plus a receiver restart)."""
    detection_slack_s: float = DETECTION_SLACK_S
    """Real seconds past its grace a problem must last to be owed an incident (a watcher
    restart, with its relisting, takes about a second; the tracker counts the grace from
    the condition's lastTransitionTime, so a restart does not wait it again)."""
    delivery_slack_s: float = DELIVERY_SLACK_S
    """Real seconds after a problem ended that its incident may still start (reports wait
    in the watcher's outbox, retried at most 30 s apart, while Temporal is down)."""
