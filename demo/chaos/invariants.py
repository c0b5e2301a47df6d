"""The promises the system keeps while its own parts are killed, checked after a run.

Each check is a pure function of :class:`~demo.chaos.facts.RunFacts` returning
an :class:`InvariantResult`: its name, what it looked at, and one line per
violation naming the node and the incident (workflow id and run id). The
checks:

- ``incidents_lost``: every trigger condition that stayed a problem past its
  grace (plus ``detection_slack_s``) overlapped an incident (or a burn-in) of
  its node, which may have started up to ``delivery_slack_s`` after it ended
  (a problem still open is judged once it has been owed that long); and, with
  alerts as the second trigger path, every alert the receiver acknowledged
  reached an incident of its node (its report id among the incident's evidence
  signals), and every alert still firing ``alert_delivery_slack_s`` after its
  first notification was acknowledged (the Alertmanager's retries got through);
- ``duplicate_incidents``: no node ever had two incidents open at once;
- ``reboots_per_decision``: each reboot decision's boot id before and after
  are one boot apart on the node, and every new boot is some decision's;
- ``resets_done_twice``: no more ``nvidia-smi -r`` commands reached a node
  than reset decisions were made for it;
- ``replacements_done_twice``: no node was replaced by two decisions, and no
  NodeClaim was deleted without one;
- ``replacements_within_cap``: the fleet never had more replacements in flight
  than the semaphore's capacity;
- ``permits_leaked``: every permit held at the end is held by a running run;
- ``nodes_left_quarantined``: no node ends cordoned or tainted by the project
  without an open incident or burn-in (escalated incidents hand the node to a
  human on purpose and are left out);
- ``workflows_failed_or_stuck``: no run failed, timed out or was terminated,
  no incident is still unsettled, no workflow task failed (a failure on a
  worker's cached copy that the next attempt's replay passed is shown, not
  judged: ``demo.chaos.collect.CACHED_STATE_FAILURE``);
- ``steps_within_budget``: the fleet never had more reboots or GPU resets
  running at once than the policy's ``disruption`` budget (issue 35);
- ``actions_on_pinned_machine``: every action an incident took carried the
  machine its triage read (the Node's uid and provider id), and every host
  action named that machine's instance, the fleet's own for the node (issue 35).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from itertools import pairwise

from pydantic import BaseModel, ConfigDict

from demo.chaos.facts import ActivityRecord, BootChange, NodeRecord, RunFacts, RunRecord
from gpu_remediation.contracts import QUARANTINE_TAINT_KEY
from gpu_remediation.ids import (
    ADMISSION_WORKFLOW_TYPE,
    NODE_WORKFLOW_TYPE,
    STARTUP_TAINT_KEY,
    Activities,
)
from gpu_remediation.models import Outcome, Rung
from gpu_remediation.policy import Policy

PROJECT_TAINTS = (QUARANTINE_TAINT_KEY, STARTUP_TAINT_KEY)
BAD_END = ("failed", "timed_out", "terminated", "canceled")


class InvariantResult(BaseModel):
    """One invariant: what was checked and what broke it."""

    model_config = ConfigDict(frozen=True)

    name: str
    checked: str
    violations: list[str]

    @property
    def holds(self) -> bool:
        """Whether no violation was found."""
        return not self.violations


def _incidents(facts: RunFacts) -> list[RunRecord]:
    return [r for r in facts.runs if r.workflow_type == NODE_WORKFLOW_TYPE]


def _by_node(runs: Iterable[RunRecord]) -> dict[str, list[RunRecord]]:
    grouped: dict[str, list[RunRecord]] = defaultdict(list)
    for run in runs:
        if run.node is not None:
            grouped[run.node].append(run)
    for node_runs in grouped.values():
        node_runs.sort(key=lambda r: r.started_at)
    return grouped


def _name(run: RunRecord) -> str:
    return f"{run.workflow_id} (run {run.run_id})"


def _decisions(runs: Iterable[RunRecord], activity: str) -> list[tuple[RunRecord, ActivityRecord]]:
    return [(run, a) for run in runs for a in run.activities if a.name == activity]


def _boots_after(node: NodeRecord, boot_id: str) -> list[BootChange]:
    boots = [b.boot_id for b in node.boot_ids]
    return node.boot_ids[boots.index(boot_id) + 1 :] if boot_id in boots else []


def _open_between(run: RunRecord, start: datetime, end: datetime) -> bool:
    return run.started_at <= end and (run.closed_at is None or run.closed_at >= start)


# ------------------------------------------------------------------ the checks


def incidents_lost(facts: RunFacts) -> InvariantResult:
    """Every problem that lasted past its grace met an incident (or a burn-in) of its node."""
    covering = _by_node(
        r for r in facts.runs if r.workflow_type in (NODE_WORKFLOW_TYPE, ADMISSION_WORKFLOW_TYPE)
    )
    slack = timedelta(seconds=facts.detection_slack_s)
    late = timedelta(seconds=facts.delivery_slack_s)
    due = 0
    violations = []
    for node in facts.nodes.values():
        if not node.watched:
            continue
        for episode in node.episodes:
            owed_from = episode.start + timedelta(seconds=episode.grace_s) + slack
            end = episode.end or facts.collected_at
            if end < owed_from:
                continue  # it ended (or the run did) before anyone owed it an incident
            runs = covering.get(node.name, [])
            covered = any(_open_between(r, episode.start, end + late) for r in runs)
            if not covered and episode.end is None and facts.collected_at < owed_from + late:
                continue  # still open, and its incident may yet be on its way
            due += 1
            if not covered:
                violations.append(
                    f"{node.name}: {episode.condition} was a problem from "
                    f"{episode.start.isoformat()} to {end.isoformat()} (grace "
                    f"{episode.grace_s:g}s) and no incident was open for it"
                )
    checked = (
        f"{due} problem(s) past their grace on watched nodes, "
        f"{len(_incidents(facts))} incident(s) started"
    )
    if facts.alerts:
        notified, acked, lost = _alerts_lost(facts)
        violations += lost
        checked += f", {notified} alert(s) notified, {acked} acknowledged by the receiver"
    return InvariantResult(name="incidents_lost", checked=checked, violations=violations)


def _alerts_lost(facts: RunFacts) -> tuple[int, int, list[str]]:
    """Alerts the receiver acknowledged but no incident got, and alerts never delivered."""
    reports: dict[str, set[str]] = defaultdict(set)
    for run in _incidents(facts):
        if run.node is not None:
            reports[run.node].update(run.report_ids)
    notified = acked = 0
    violations = []
    for alert in facts.alerts:
        since = alert.starts_at.isoformat()
        what = f"{alert.node}: alert {alert.fingerprint} (firing since {since})"
        if alert.first_notified_at is not None:
            notified += 1
        if alert.acknowledged_at is not None:
            acked += 1
            if alert.report_id not in reports.get(alert.node, set()):
                violations.append(
                    f"{what} was acknowledged by the receiver at "
                    f"{alert.acknowledged_at.isoformat()} and reached no incident"
                )
        elif alert.first_notified_at is not None:
            end = alert.ends_at or facts.collected_at
            waited = (end - alert.first_notified_at).total_seconds()
            if waited >= facts.alert_delivery_slack_s:
                violations.append(
                    f"{what} was first notified at {alert.first_notified_at.isoformat()} "
                    f"and still not delivered {waited:.0f}s later"
                )
    return notified, acked, violations


def duplicate_incidents(facts: RunFacts) -> InvariantResult:
    """No node had two incidents open at the same time."""
    violations = []
    by_node = _by_node(_incidents(facts))
    for node, runs in sorted(by_node.items()):
        for earlier, later in pairwise(runs):
            if earlier.closed_at is None or earlier.closed_at > later.started_at:
                violations.append(
                    f"{node}: {_name(later)} started while {_name(earlier)} was still open"
                )
    return InvariantResult(
        name="duplicate_incidents",
        checked=f"{len(_incidents(facts))} incident(s) on {len(by_node)} node(s)",
        violations=violations,
    )


def reboots_per_decision(facts: RunFacts) -> InvariantResult:
    """Each reboot decision rebooted its node exactly once, by the node's boot ids."""
    violations = []
    decisions = _decisions(facts.runs, Activities.REBOOT_NODE)
    for run, decision in decisions:
        node = facts.nodes.get(str(decision.input.get("node")))
        before = str(decision.input.get("boot_id_before"))
        if node is None:
            violations.append(f"{_name(run)}: rebooted a node the fleet never had")
            continue
        boots = [b.boot_id for b in node.boot_ids]
        if decision.status != "completed" or decision.result is None:
            # A decision that gave up (or is still waiting) rebooted at most once.
            until = decision.closed_at or facts.collected_at
            since = [b for b in _boots_after(node, before) if b.at <= until]
            if len(since) > 1:
                violations.append(
                    f"{node.name}: {_name(run)} rebooted {len(since)} times for one decision"
                )
            continue
        after = str(decision.result.get("boot_id_after"))
        if before not in boots or after not in boots:
            violations.append(
                f"{node.name}: {_name(run)} reports boot {before} -> {after}, "
                f"which the node never had ({boots})"
            )
            continue
        steps = boots.index(after) - boots.index(before)
        if steps != 1:
            violations.append(
                f"{node.name}: {_name(run)} made one reboot decision and the node booted "
                f"{steps} time(s) between {before} and {after}"
            )
    for node in facts.nodes.values():
        decided_from = {
            str(d.input.get("boot_id_before"))
            for _, d in decisions
            if d.input.get("node") == node.name
        }
        for earlier, later in pairwise(node.boot_ids):
            if earlier.boot_id in decided_from:
                continue  # a decision made on that boot (checked above to be one step)
            violations.append(
                f"{node.name}: booted {later.boot_id} at {later.at.isoformat()} "
                "with no reboot decision of any incident"
            )
    requests = sum(facts.ec2_reboot_requests.values())
    return InvariantResult(
        name="reboots_per_decision",
        checked=f"{len(decisions)} reboot decision(s), {requests} EC2 reboot request(s), "
        f"{sum(max(0, len(n.boot_ids) - 1) for n in facts.nodes.values())} new boot(s)",
        violations=violations,
    )


def resets_done_twice(facts: RunFacts) -> InvariantResult:
    """No node got more GPU resets than reset decisions were made for it."""
    decisions = _decisions(facts.runs, Activities.RESET_GPUS)
    per_node: dict[str, list[RunRecord]] = defaultdict(list)
    for run, decision in decisions:
        per_node[str(decision.input.get("node"))].append(run)
    violations = []
    for node, sent in sorted(facts.gpu_resets_sent.items()):
        runs = per_node.get(node, [])
        if sent > len(runs):
            names = ", ".join(_name(r) for r in runs) or "no incident"
            violations.append(
                f"{node}: {sent} GPU reset command(s) sent for {len(runs)} reset "
                f"decision(s) ({names})"
            )
    return InvariantResult(
        name="resets_done_twice",
        checked=f"{len(decisions)} reset decision(s), "
        f"{sum(facts.gpu_resets_sent.values())} reset command(s) sent",
        violations=violations,
    )


def replacements_done_twice(facts: RunFacts) -> InvariantResult:
    """Each node was replaced at most once, and only by a decision."""
    decisions = _decisions(facts.runs, Activities.DELETE_NODE_CLAIM)
    deleting: dict[str, list[RunRecord]] = defaultdict(list)
    for run, decision in decisions:
        if decision.result is not None and decision.result.get("already_gone") is False:
            deleting[str(decision.input.get("node"))].append(run)
    violations = [
        f"{node}: replaced by {len(runs)} decisions ({', '.join(_name(r) for r in runs)})"
        for node, runs in sorted(deleting.items())
        if len(runs) > 1
    ]
    decided = {str(d.input.get("node")) for _, d in decisions}
    deleted = 0
    for node in facts.nodes.values():
        deleted += len(node.claim_deleted_at)
        if len(node.claim_deleted_at) > 1:
            violations.append(
                f"{node.name}: its NodeClaim was deleted {len(node.claim_deleted_at)}x"
            )
        if node.claim_deleted_at and node.name not in decided:
            violations.append(f"{node.name}: its NodeClaim was deleted with no replace decision")
    return InvariantResult(
        name="replacements_done_twice",
        checked=f"{len(decisions)} replace decision(s), {deleted} NodeClaim(s) deleted",
        violations=violations,
    )


def replacements_within_cap(facts: RunFacts) -> InvariantResult:
    """The fleet never had more replacements in flight than the cap."""
    most = facts.max_replacements_in_flight
    violations = []
    if most > facts.replacement_cap:
        violations.append(
            f"{most} replacements were in flight at once, above the cap of {facts.replacement_cap}"
        )
    return InvariantResult(
        name="replacements_within_cap",
        checked=f"most in flight {most}, cap {facts.replacement_cap}",
        violations=violations,
    )


def permits_leaked(facts: RunFacts) -> InvariantResult:
    """Every permit still held belongs to a run that is still running."""
    running = {(r.workflow_id, r.run_id) for r in facts.runs if r.status == "running"}
    violations = [
        f"permit {h.request_id} held by {h.holder_workflow_id} (run {h.holder_run_id}), "
        "which is no longer running"
        for h in facts.permit_holders
        if (h.holder_workflow_id, h.holder_run_id) not in running
    ]
    return InvariantResult(
        name="permits_leaked",
        checked=f"{len(facts.permit_holders)} permit(s) held at the end",
        violations=violations,
    )


def nodes_left_quarantined(facts: RunFacts) -> InvariantResult:
    """No node ends cordoned or tainted by the project with nobody owning it.

    Its owner is a burn-in, an incident handed to a person, or an open incident
    that is acting (an activity pending) or waiting on a stated reason (issue
    35): an incident that holds a node for nothing is a node lost.
    """
    owners = _by_node(
        r for r in facts.runs if r.workflow_type in (NODE_WORKFLOW_TYPE, ADMISSION_WORKFLOW_TYPE)
    )
    violations = []
    held = 0
    for node in sorted(facts.nodes.values(), key=lambda n: n.name):
        if node.deleted_at is not None or node.claim_deleted_at:
            continue  # replaced or being replaced: its cordon goes with it
        ours = [t.key for t in node.taints if t.key in PROJECT_TAINTS]
        if not node.unschedulable and not ours:
            continue
        held += 1
        runs = owners.get(node.name, [])
        open_runs = [r for r in runs if r.status == "running"]
        if any(r.workflow_type == ADMISSION_WORKFLOW_TYPE for r in open_runs):
            continue  # in burn-in
        if any(r.waiting_on or r.waiting_for for r in open_runs):
            continue
        if open_runs:
            violations.append(
                f"{node.name}: held by {_name(open_runs[-1])}, which neither acts nor "
                "says what it waits for"
            )
            continue
        incidents = [r for r in runs if r.workflow_type == NODE_WORKFLOW_TYPE]
        if incidents and incidents[-1].outcome == Outcome.ESCALATED.value:
            continue  # handed to a human, who takes the node back
        what = ", ".join([*(["cordoned"] if node.unschedulable else []), *ours])
        last = _name(incidents[-1]) if incidents else "no incident"
        violations.append(f"{node.name}: left {what} with no open incident (last: {last})")
    return InvariantResult(
        name="nodes_left_quarantined",
        checked=f"{len(facts.nodes)} node(s), {held} cordoned or tainted by the project at the end",
        violations=violations,
    )


def workflows_failed_or_stuck(facts: RunFacts) -> InvariantResult:
    """No run failed or was killed, no incident is stuck, no workflow task failed."""
    violations = []
    for run in facts.runs:
        if run.status in BAD_END:
            violations.append(f"{_name(run)}: {run.status}")
        elif run.status == "running" and not run.settled:
            waiting = f" (waiting on {', '.join(run.waiting_on)})" if run.waiting_on else ""
            violations.append(f"{_name(run)}: still working, no outcome at the end{waiting}")
        violations += [f"{_name(run)}: workflow task failed ({c})" for c in run.task_failures]
    replayed = [f"{_name(run)}: {c}" for run in facts.runs for c in run.task_failures_replayed]
    passed = (
        f"; {len(replayed)} task(s) failed once on a worker's cached state and passed on "
        f"replay (sdk-core, docs/operations.md): {'; '.join(replayed)}"
        if replayed
        else ""
    )
    return InvariantResult(
        name="workflows_failed_or_stuck",
        checked=f"{len(facts.runs)} workflow run(s){passed}",
        violations=violations,
    )


def step_caps(policy: Policy) -> dict[str, int]:
    """The fleet-wide cap of each disruptive step, by the activity that does it."""
    disruption = policy.disruption
    if not disruption.enabled:
        return {}
    return {
        Activities.DRAIN_GPU_PODS: disruption.stop_gpu_work.fleet,
        Activities.REBOOT_NODE: disruption.reboot.fleet,
        Activities.RESET_GPUS: disruption.gpu_reset.fleet,
    }


def _drained_until(run: RunRecord, drain: ActivityRecord, collected_at: datetime) -> datetime:
    """When a drained node stopped counting: its drain permit given back, else the run's end.

    A drain's permit is held until the node is back in service or handed to a
    person; a run that ends holding it (a replaced node) leaves it to its guard,
    which gives it back after the run has closed.
    """
    marker = f"/{Rung.STOP_GPU_WORK.value}/"
    for released in run.permits_released:
        if marker in released.request_id and released.at >= drain.scheduled_at:
            return released.at
    return run.closed_at or collected_at


def steps_within_budget(facts: RunFacts) -> InvariantResult:
    """No more drains, reboots or resets were in force at once than their budget allows.

    A reset's or reboot's permit is taken before its activity is scheduled and
    given back after it closes, so the activities' spans (from Temporal's
    histories) never overlap more than the cap. A drained node counts from its
    drain until it gives its drain permit back (issue 35). So a step done
    without a permit shows up here as one more at once.
    """
    violations = []
    most: dict[str, int] = {}
    for activity, cap in sorted(facts.step_caps.items()):
        edges: list[tuple[datetime, int]] = []
        for run, record in _decisions(facts.runs, activity):
            edges.append((record.scheduled_at, 1))
            if activity == Activities.DRAIN_GPU_PODS:
                edges.append((_drained_until(run, record, facts.collected_at), -1))
            else:
                edges.append((record.closed_at or facts.collected_at, -1))
        running = peak = 0
        for _, delta in sorted(edges):  # a close sorts before a start at the same moment
            running += delta
            peak = max(peak, running)
        most[activity] = peak
        if peak > cap:
            violations.append(f"{peak} {activity} in force at once, above the budget of {cap}")
    shown = ", ".join(f"{a} {most[a]}/{facts.step_caps[a]}" for a in sorted(most))
    return InvariantResult(
        name="steps_within_budget",
        checked=f"most at once: {shown or 'no budget'}",
        violations=violations,
    )


# Activities that act on a node or its instance (reads and bookkeeping elsewhere are not).
_MUTATING = frozenset(
    {
        Activities.QUARANTINE_NODE,
        Activities.RELEASE_NODE,
        Activities.DRAIN_GPU_PODS,
        Activities.RESET_GPUS,
        Activities.REBOOT_NODE,
        Activities.RUN_DIAGNOSTIC,
        Activities.RUN_EFA_LOOPBACK,
        Activities.RECORD_STEP,
        Activities.ESCALATE,
        Activities.DELETE_NODE_CLAIM,
    }
)
_HOST = frozenset(
    {
        Activities.RESET_GPUS,
        Activities.REBOOT_NODE,
        Activities.RUN_DIAGNOSTIC,
        Activities.RUN_EFA_LOOPBACK,
    }
)


def _pinned(run: RunRecord) -> tuple[str, str] | None:
    """(uid, provider id) of the node as the incident's triage read it."""
    for record in run.activities:
        if record.name == Activities.READ_NODE_HEALTH and record.result is not None:
            if not record.result.get("exists"):
                return None
            return str(record.result.get("uid", "")), str(record.result.get("provider_id", ""))
    return None


def actions_on_pinned_machine(facts: RunFacts) -> InvariantResult:
    """Every action of an incident was pinned to the machine its triage read."""
    violations = []
    checked = 0
    for run in _incidents(facts):
        pinned = _pinned(run)
        if pinned is None:
            continue
        node = facts.nodes.get(run.node or "")
        for record in run.activities:
            if record.name not in _MUTATING and not record.name.startswith("run_rung_"):
                continue
            checked += 1
            pin = record.input.get("pin") or {}
            if (pin.get("uid"), pin.get("provider_id")) != pinned:
                violations.append(
                    f"{_name(run)}: {record.name} carried pin {pin or None}, triage read {pinned}"
                )
            provider_id = record.input.get("provider_id")
            if record.name in _HOST or record.name == Activities.DELETE_NODE_CLAIM:
                if provider_id != pinned[1]:
                    violations.append(
                        f"{_name(run)}: {record.name} named {provider_id}, pinned {pinned[1]}"
                    )
                elif (
                    node is not None
                    and node.instance_id
                    and not str(provider_id).endswith("/" + node.instance_id)
                ):
                    violations.append(
                        f"{_name(run)}: {record.name} named {provider_id}, but {node.name} "
                        f"is instance {node.instance_id}"
                    )
    return InvariantResult(
        name="actions_on_pinned_machine",
        checked=f"{checked} action(s) of incidents",
        violations=violations,
    )


CHECKS: tuple[Callable[[RunFacts], InvariantResult], ...] = (
    incidents_lost,
    duplicate_incidents,
    reboots_per_decision,
    resets_done_twice,
    replacements_done_twice,
    replacements_within_cap,
    permits_leaked,
    nodes_left_quarantined,
    workflows_failed_or_stuck,
    steps_within_budget,
    actions_on_pinned_machine,
)


def check_all(facts: RunFacts) -> list[InvariantResult]:
    """Every invariant, in the order of :data:`CHECKS`."""
    return [check(facts) for check in CHECKS]
