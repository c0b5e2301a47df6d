"""A restarted watcher takes over episodes its predecessor reported: their recovery is not lost."""

from __future__ import annotations

from gpu_remediation.models import ConditionEvidence
from tests.triggers.tracker_support import NODE, TRIGGERS, at, cond, ready
from triggers.condition_tracker import SOURCE, ConditionTracker, report_id


def not_ready_evidence(minutes: float) -> ConditionEvidence:
    """What the earlier watcher reported: Ready=False seen from ``minutes``."""
    return ConditionEvidence(
        observed_at=at(minutes),
        source=SOURCE,
        type="Ready",
        status="False",
        reason="KubeletNotReady",
    )


def test_a_condition_healthy_since_before_the_restart_is_cleared_at_once() -> None:
    tracker = ConditionTracker(TRIGGERS)
    tracker.resync({NODE: ready("True", at(10))}, at(30))
    (clear,) = tracker.adopt(NODE, not_ready_evidence(0), at(0), ready("True", at(10))[0], at(30))
    assert clear.kind == "clear"
    assert clear.evidence.cleared
    assert clear.evidence.observed_at == at(10)
    # The same id the earlier watcher would have used: a repeat is dropped.
    assert clear.report_id == report_id(NODE, "Ready", at(0), ":cleared")
    assert tracker.episodes() == []


def test_a_recent_recovery_is_cleared_only_after_the_rules_grace() -> None:
    tracker = ConditionTracker(TRIGGERS)
    current = ready("True", at(28))[0]
    tracker.resync({NODE: [current]}, at(30))
    assert tracker.adopt(NODE, not_ready_evidence(0), at(0), current, at(30)) == []
    assert tracker.tick(at(32.9)) == []
    (clear,) = tracker.tick(at(33))  # the Ready rule's grace is 5 minutes
    assert clear.kind == "clear"


def test_a_condition_that_is_gone_counts_as_healthy_from_now() -> None:
    tracker = ConditionTracker(TRIGGERS)
    tracker.resync({NODE: []}, at(30))
    assert tracker.adopt(NODE, not_ready_evidence(0), at(0), None, at(30)) == []
    (clear,) = tracker.tick(at(35))
    assert clear.kind == "clear"
    assert clear.evidence.observed_at == at(30)


def test_a_transition_time_before_the_episode_does_not_date_the_recovery() -> None:
    # The node's Ready flipped to True before the incident's streak began (a
    # stale or skewed timestamp): the recovery counts from now instead.
    tracker = ConditionTracker(TRIGGERS)
    current = ready("True", at(-60))[0]
    tracker.resync({NODE: [current]}, at(30))
    assert tracker.adopt(NODE, not_ready_evidence(0), at(0), current, at(30)) == []
    assert kinds_at(tracker, 35) == ["clear"]


def test_a_condition_that_is_a_problem_again_goes_on_as_its_own_episode() -> None:
    tracker = ConditionTracker(TRIGGERS)
    tracker.resync({NODE: ready("False", at(20))}, at(30))
    assert (
        tracker.adopt(NODE, not_ready_evidence(0), at(0), ready("False", at(20))[0], at(30)) == []
    )
    (episode,) = tracker.episodes()
    assert episode.problem
    assert episode.start == at(20)


def test_a_condition_no_rule_covers_any_more_is_left_alone() -> None:
    tracker = ConditionTracker(TRIGGERS)
    gone_rule = ConditionEvidence(
        observed_at=at(0), source=SOURCE, type="DiskPressure", status="True", reason="Full"
    )
    current = cond("DiskPressure", "False", since=at(10))
    assert tracker.adopt(NODE, gone_rule, at(0), current, at(30)) == []
    assert tracker.episodes() == []


def kinds_at(tracker: ConditionTracker, minutes: float) -> list[str]:
    return [report.kind for report in tracker.tick(at(minutes))]
