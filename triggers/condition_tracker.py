"""The node-condition watcher's clock: when a bad condition becomes a report.

Pure logic, no I/O and no clock of its own: the watcher feeds it what it sees
on each node (with "now") and periodic ticks, and it answers with the reports
to send. Everything about grace periods, flapping and recovery lives here so
it can be tested with explicit times.

The rules (also in docs/architecture.md, "Node-condition watcher"):

- A condition is a *problem* when a rule of the policy's ``triggers`` section
  matches its type, status and reason (``TriggerPolicy.rule_for``); anything
  else, including a watched condition that is absent from the node, is healthy.
- An *episode* starts at the first sighting of the problem, or at the
  condition's ``lastTransitionTime`` when that is earlier and the watcher has
  not seen the condition healthy since then (so a restarted watcher does not
  restart the clock).
- The episode ends only after the condition has been healthy continuously for
  the rule's grace period. A problem that clears and comes back sooner
  continues the same episode: flapping never resets the clock.
- The episode is reported once, as soon as the grace period has passed since
  its start *and* the condition is a problem at that moment (or the first
  time it is a problem again afterwards). The evidence is observed at the
  episode's start, so the incident does not wait the grace period again.
- A reported episode whose fault detail changes (see :func:`fault_detail`)
  is reported again as an update; when it ends, one recovery report
  (``cleared=True``) is sent. An episode that ends unreported sends nothing.
- A reported episode still a problem after the node rebooted (a new
  ``status.nodeInfo.bootID``) is reported again once the problem has held
  its grace period on the new boot: the fault survived the reboot, which is
  news to the incident (in its cooldown it climbs), or, when that incident has
  closed, it starts a new one. The boot, not the condition, tells: a
  restarted Node Problem Detector rewrites the same status (or flaps within
  the grace), so the episode itself looks unbroken. Its clear keeps the
  episode's first report id.
- Report ids are derived from node, condition type and episode start, so a
  restarted watcher that reports the same episode again is deduplicated by
  the incident.
- A restarted watcher adopts (``adopt``) the conditions an open incident
  still holds on a node that is healthy now: the episode ends after the
  rule's grace of health, counted from the condition's last transition, and
  its recovery is sent as if the watcher had never stopped.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, BeforeValidator, ConfigDict, Field

from gpu_remediation import catalog
from gpu_remediation.models import ConditionEvidence, Evidence, XidEvidence
from gpu_remediation.npd_message import parse_condition_message
from gpu_remediation.policy import TriggerPolicy

SOURCE = "node-condition-watcher"
"""``source`` of every piece of evidence the watcher sends."""

_REPORT_ID_MAX = 256  # EvidenceReport.report_id
_REASON_MAX = 1024  # ConditionEvidence.reason
_MESSAGE_MAX = 4096  # ConditionEvidence.message


def _clip(limit: int) -> Any:
    def clip(value: Any) -> Any:
        # Kubernetes leaves reason/message out or null; a kubelet message may be
        # longer than the evidence allows: keep the head rather than drop it.
        if value is None:
            return ""
        return value[:limit] if isinstance(value, str) else value

    return BeforeValidator(clip)


class ObservedCondition(BaseModel):
    """One entry of a Node's ``status.conditions``, validated.

    Built from the API's JSON (``lastTransitionTime`` by alias); fields the
    watcher does not use (``lastHeartbeatTime``) are ignored.
    """

    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    type: str = Field(min_length=1, max_length=316)
    status: Literal["True", "False", "Unknown"]
    reason: Annotated[str, _clip(_REASON_MAX)] = ""
    message: Annotated[str, _clip(_MESSAGE_MAX)] = ""
    last_transition: AwareDatetime | None = Field(default=None, alias="lastTransitionTime")


def fault_detail(condition: ObservedCondition) -> str:
    """What in a problem condition names the fault; a change re-reports the episode.

    This is the hook where the Node Problem Detector message parser plugs in
    (``gpu_remediation.npd_message``). This project's NPD conditions
    (``GpuHealthProblem``, ``EfaHealthProblem``) carry their findings in the
    message ("Xid 79 on GPU 3 (0000:53:00): reboot required; ..."), so the
    parsed findings (code, GPU, recovery action, EFA check and device) are the
    detail (for a message outside the agent's grammar, the Xid or DCGM error
    the classifier itself reads from it); free text around them is not, or
    every rewrite of the message would re-report. Other conditions name their
    fault in the reason (EKS ``NvidiaXID79Error``); ``Ready`` has none:
    False/Unknown and its reasons all mean "not ready", and re-reporting them
    would only restart the incident's own grace period.
    """
    if condition.type == catalog.READY_CONDITION:
        return ""
    if condition.type in catalog.NPD_CONDITIONS:
        findings = parse_condition_message(condition.message, observed_at=_EPOCH, source=SOURCE)
        if findings:
            return f"{condition.reason}/" + ",".join(sorted({_finding_key(f) for f in findings}))
        # Not in the agent's grammar: what the classifier itself reads from it.
        xid = catalog.parse_message_xid(condition.message)
        if xid is not None:
            return f"{condition.reason}/xid/{xid[0]}/{xid[1]}"
        dcgm = catalog.parse_message_dcgm(condition.message)
        if dcgm is not None:
            return f"{condition.reason}/dcgm/{dcgm[0]}/{dcgm[1]}"
    return condition.reason


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)  # findings are compared, never sent


def _finding_key(evidence: Evidence) -> str:
    if isinstance(evidence, XidEvidence) and evidence.recovery_action is not None:
        return f"{evidence.key}/action/{evidence.recovery_action}"
    return evidence.key


ReportKind = Literal["report", "update", "clear"]


@dataclass(frozen=True)
class ConditionReport:
    """Evidence the watcher must deliver to a node's incident.

    Attributes:
        node: Node name.
        kind: ``report`` (the episode passed its grace), ``update`` (its
            fault detail changed after the report) or ``clear`` (it ended
            after a report; the evidence has ``cleared=True``).
        report_id: Idempotency key (deterministic per episode).
        evidence: What to send.
    """

    node: str
    kind: ReportKind
    report_id: str
    evidence: ConditionEvidence


@dataclass(frozen=True)
class EpisodeView:
    """A read-only view of one tracked episode (for logs, status and tests)."""

    node: str
    type: str
    start: datetime
    grace: timedelta
    problem: bool
    healthy_since: datetime | None
    reported: bool


@dataclass
class _Episode:
    start: datetime
    grace: timedelta
    latest: ObservedCondition  # the latest problem observation
    healthy_since: datetime | None = None
    healthy: ObservedCondition | None = None  # None: the condition vanished
    reported_detail: str | None = None  # None: not reported yet
    boot: str | None = None  # boot id at the latest report (until reported: the latest seen)
    latest_boot: str | None = None  # the boot id of the latest problem observation
    new_boot_since: datetime | None = None  # first seen a problem on a later boot, not yet reported


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat()


def report_id(node: str, condition_type: str, start: datetime, suffix: str = "") -> str:
    """The idempotency key of an episode's report (``suffix`` for updates and clears).

    ``condition:<node>:<type>:<episode start>[suffix]``; hashed when node and
    type are so long that it would exceed the 256 characters a report id may have.
    """
    plain = f"condition:{node}:{condition_type}:{_iso(start)}{suffix}"
    if len(plain) <= _REPORT_ID_MAX:
        return plain
    digest = hashlib.sha256(f"{node}\0{condition_type}\0{_iso(start)}".encode()).hexdigest()
    return f"condition:{digest}{suffix}"


class ConditionTracker:
    """Grace periods and episodes of the watched conditions of every node.

    Not thread-safe: one watcher loop drives it.

    Args:
        triggers: Which conditions count and their grace periods.
        source: ``source`` of the evidence produced.
    """

    def __init__(self, triggers: TriggerPolicy, *, source: str = SOURCE) -> None:
        self._triggers = triggers
        self._source = source
        self._episodes: dict[str, dict[str, _Episode]] = {}
        # When each watched condition was last seen healthy (decides whether a
        # problem's lastTransitionTime may start its episode).
        self._healthy_seen: dict[str, dict[str, datetime]] = {}

    @property
    def source(self) -> str:
        """``source`` of the evidence this tracker produces."""
        return self._source

    # ---------------------------------------------------------------- inputs

    def observe(
        self,
        node: str,
        conditions: Iterable[ObservedCondition],
        now: datetime,
        *,
        boot_id: str | None = None,
    ) -> list[ConditionReport]:
        """Take a node's current conditions; return what to send now.

        Conditions of types no rule is about are ignored. A tracked condition
        missing from ``conditions`` counts as healthy.

        Args:
            node: Node name.
            conditions: Its ``status.conditions``.
            now: The current time.
            boot_id: Its ``status.nodeInfo.bootID`` (None: unknown); a reported
                problem seen on a later boot is reported again after its grace.
        """
        current = {c.type: c for c in conditions if self._triggers.watches(c.type)}
        reports: list[ConditionReport] = []
        for condition in current.values():
            reports += self._observe_one(node, condition.type, condition, now, boot_id)
        for condition_type in list(self._episodes.get(node, {})):
            if condition_type not in current:
                reports += self._observe_one(node, condition_type, None, now)
        return reports

    def forget(self, node: str) -> None:
        """Drop a node (deleted, or no longer selected) without sending anything.

        A replaced node's incident finishes by itself; a node that left the
        selector is no longer the watcher's to report.
        """
        self._episodes.pop(node, None)
        self._healthy_seen.pop(node, None)

    def resync(
        self,
        nodes: Mapping[str, Sequence[ObservedCondition]],
        now: datetime,
        *,
        boot_ids: Mapping[str, str | None] | None = None,
    ) -> list[ConditionReport]:
        """Replace the view of the fleet with a fresh list (after a re-list).

        Nodes missing from ``nodes`` are forgotten; the others are observed
        (with their boot id from ``boot_ids``, as :meth:`observe` takes it).
        """
        for node in set(self._episodes) | set(self._healthy_seen):
            if node not in nodes:
                self.forget(node)
        boots = boot_ids or {}
        reports: list[ConditionReport] = []
        for node, conditions in nodes.items():
            reports += self.observe(node, conditions, now, boot_id=boots.get(node))
        return reports

    def adopt(
        self,
        node: str,
        reported: ConditionEvidence,
        start: datetime,
        current: ObservedCondition | None,
        now: datetime,
    ) -> list[ConditionReport]:
        """Take over an episode reported before this tracker existed; return what to send now.

        A watcher that was down while a condition recovered finds, when it lists
        again, a healthy node whose open incident still holds the condition: no
        episode of its own would ever send that recovery. The episode is taken
        over as reported and healthy: since the condition's
        ``lastTransitionTime`` when that lies between the episode's start and
        now, else since now (the moment it recovered is unknown). It then ends
        like any other, sending the clear once healthy for the rule's grace.

        Nothing changes when an episode of this condition is open already (it
        is a problem now, so it goes on as usual) or when no rule covers the
        reported condition any more.

        Args:
            node: The node whose incident holds the condition.
            reported: The condition evidence still in force in the incident.
            start: When the incident's streak of this condition began (the
                episode start a watcher reports as the evidence's time).
            current: The node's condition of that type in the listing, or None
                if it has none.
            now: The current time.
        """
        if reported.type in self._episodes.get(node, {}):
            return []
        rule = self._triggers.rule_for(reported.type, reported.status, reported.reason)
        if rule is None:
            return []
        healthy_since = now
        if current is not None:
            transition = current.last_transition
            if transition is not None and start <= transition <= now:
                healthy_since = transition
        latest = ObservedCondition(
            type=reported.type,
            status=reported.status,
            reason=reported.reason,
            message=reported.message,
        )
        episode = _Episode(
            start=start,
            grace=rule.grace,
            latest=latest,
            healthy_since=healthy_since,
            healthy=current,
            reported_detail=fault_detail(latest),
        )
        self._episodes.setdefault(node, {})[reported.type] = episode
        return self._maybe_end(node, reported.type, episode, now)

    def tick(self, now: datetime) -> list[ConditionReport]:
        """Fire grace periods and clear periods that ran out with no new observation."""
        reports: list[ConditionReport] = []
        for node, episodes in list(self._episodes.items()):
            for condition_type, episode in list(episodes.items()):
                if episode.healthy_since is None:
                    reports += self._maybe_report(node, episode, now)
                else:
                    reports += self._maybe_end(node, condition_type, episode, now)
        return reports

    # ---------------------------------------------------------------- views

    def episodes(self) -> list[EpisodeView]:
        """Every open episode, in the order they were opened per node."""
        return [
            EpisodeView(
                node=node,
                type=condition_type,
                start=ep.start,
                grace=ep.grace,
                problem=ep.healthy_since is None,
                healthy_since=ep.healthy_since,
                reported=ep.reported_detail is not None,
            )
            for node, episodes in self._episodes.items()
            for condition_type, ep in episodes.items()
        ]

    def next_deadline(self) -> datetime | None:
        """The earliest time a tick could produce a report (None: nothing pending)."""
        deadlines = [
            _deadline(ep)
            for episodes in self._episodes.values()
            for ep in episodes.values()
            if ep.healthy_since is not None
            or ep.reported_detail is None
            or ep.new_boot_since is not None
        ]
        return min(deadlines, default=None)

    # ---------------------------------------------------------------- rules

    def _observe_one(
        self,
        node: str,
        condition_type: str,
        condition: ObservedCondition | None,
        now: datetime,
        boot_id: str | None = None,
    ) -> list[ConditionReport]:
        rule = (
            None
            if condition is None
            else self._triggers.rule_for(condition.type, condition.status, condition.reason)
        )
        episodes = self._episodes.setdefault(node, {})
        episode = episodes.get(condition_type)
        if rule is not None and condition is not None:
            if episode is None:
                episode = _Episode(
                    start=self._episode_start(node, condition, now),
                    grace=rule.grace,
                    latest=condition,
                )
                episodes[condition_type] = episode
            # A problem back within the clear period continues its episode:
            # the clock keeps its original start (flapping does not reset it).
            episode.healthy_since = None
            episode.healthy = None
            episode.latest = condition
            episode.grace = rule.grace
            _note_boot(episode, boot_id, now)
            return self._maybe_report(node, episode, now)
        if condition is not None:
            self._healthy_seen.setdefault(node, {})[condition_type] = now
        if episode is None:
            if not episodes:
                del self._episodes[node]
            return []
        if episode.healthy_since is None:
            episode.healthy_since = now
        episode.healthy = condition
        return self._maybe_end(node, condition_type, episode, now)

    def _episode_start(self, node: str, condition: ObservedCondition, now: datetime) -> datetime:
        # The API's lastTransitionTime says when the status flipped; it is the
        # true start unless it lies in the future (clock skew) or we saw the
        # condition healthy after it (the reason, not the status, turned bad).
        transition = condition.last_transition
        if transition is None or transition > now:
            return now
        seen_healthy = self._healthy_seen.get(node, {}).get(condition.type)
        if seen_healthy is not None and transition <= seen_healthy:
            return now
        return transition

    def _maybe_report(self, node: str, episode: _Episode, now: datetime) -> list[ConditionReport]:
        if episode.healthy_since is not None:
            return []
        if episode.new_boot_since is not None:
            return self._maybe_report_after_reboot(node, episode, now)
        if now - episode.start < episode.grace:
            return []
        detail = fault_detail(episode.latest)
        if episode.reported_detail is None:
            episode.reported_detail = detail
            return [self._report(node, episode, "report", episode.start, suffix="")]
        if detail != episode.reported_detail:
            episode.reported_detail = detail
            return [self._report(node, episode, "update", now, suffix=f":update:{_iso(now)}")]
        return []

    def _maybe_report_after_reboot(
        self, node: str, episode: _Episode, now: datetime
    ) -> list[ConditionReport]:
        # A fresh report, observed when the problem was first seen on the new boot,
        # with an id of its own: the incident takes it as news, or, if it closed,
        # signal-with-start opens the node's next incident with it.
        since = episode.new_boot_since
        assert since is not None
        if now - since < episode.grace:
            return []
        episode.new_boot_since = None
        episode.boot = episode.latest_boot
        episode.reported_detail = fault_detail(episode.latest)
        return [self._report(node, episode, "report", since, suffix=f":boot:{_iso(since)}")]

    def _maybe_end(
        self, node: str, condition_type: str, episode: _Episode, now: datetime
    ) -> list[ConditionReport]:
        assert episode.healthy_since is not None
        if now - episode.healthy_since < episode.grace:
            return []
        episodes = self._episodes[node]
        del episodes[condition_type]
        if not episodes:
            del self._episodes[node]
        if episode.reported_detail is None:
            return []  # transient: it never lasted long enough to report
        healthy = episode.healthy
        evidence = ConditionEvidence(
            observed_at=episode.healthy_since,
            source=self._source,
            cleared=True,
            type=condition_type,
            status=healthy.status if healthy is not None else "Unknown",
            reason=healthy.reason if healthy is not None else "",
            message=(
                healthy.message if healthy is not None else "the condition is no longer reported"
            ),
        )
        return [
            ConditionReport(
                node=node,
                kind="clear",
                report_id=report_id(node, condition_type, episode.start, ":cleared"),
                evidence=evidence,
            )
        ]

    def _report(
        self,
        node: str,
        episode: _Episode,
        kind: ReportKind,
        observed_at: datetime,
        *,
        suffix: str,
    ) -> ConditionReport:
        latest = episode.latest
        evidence = ConditionEvidence(
            observed_at=observed_at,
            source=self._source,
            type=latest.type,
            status=latest.status,
            reason=latest.reason,
            message=latest.message,
        )
        return ConditionReport(
            node=node,
            kind=kind,
            report_id=report_id(node, latest.type, episode.start, suffix),
            evidence=evidence,
        )


def _note_boot(episode: _Episode, boot_id: str | None, now: datetime) -> None:
    """Remember the boot a problem is seen on; a reported one seen on a later boot re-arms.

    For a moment after a reboot the node still shows the condition written before
    it (the kubelet posts the new boot id before the restarted agent writes); the
    rule's grace, counted from this sighting, lets the agent's rewrite clear it.
    """
    if boot_id is None:
        return
    episode.latest_boot = boot_id
    if episode.reported_detail is None or episode.boot is None:
        episode.boot = boot_id
    elif boot_id != episode.boot and episode.new_boot_since is None:
        episode.new_boot_since = now


def _deadline(episode: _Episode) -> datetime:
    """When a tick could next send something for ``episode``."""
    if episode.healthy_since is not None:
        return episode.healthy_since + episode.grace
    if episode.new_boot_since is not None:
        return episode.new_boot_since + episode.grace
    return episode.start + episode.grace
