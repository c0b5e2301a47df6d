"""The watcher's clock rules, with explicit times: grace, flapping, recovery, restarts."""

from __future__ import annotations

from tests.triggers.tracker_support import NODE, T0, TRIGGERS, at, cond, ready
from triggers.condition_tracker import (
    SOURCE,
    ConditionReport,
    ConditionTracker,
    ObservedCondition,
    fault_detail,
    report_id,
)


def kinds(reports: list[ConditionReport]) -> list[str]:
    return [r.kind for r in reports]


def test_a_problem_is_reported_once_its_grace_has_passed_and_not_before() -> None:
    tracker = ConditionTracker(TRIGGERS)
    assert tracker.observe(NODE, ready("False", at(0)), at(0)) == []
    assert tracker.tick(at(4.99)) == []
    (report,) = tracker.tick(at(5))
    assert report.kind == "report"
    assert report.node == NODE
    assert report.report_id == "condition:gpu-1:Ready:2025-01-01T00:00:00+00:00"
    evidence = report.evidence
    assert (evidence.type, evidence.status, evidence.reason) == (
        "Ready",
        "False",
        "KubeletNotReady",
    )
    assert evidence.observed_at == at(0)  # the incident does not wait the grace again
    assert evidence.source == SOURCE
    assert not evidence.cleared
    assert tracker.tick(at(6)) == []
    assert tracker.observe(NODE, ready("False", at(0)), at(7)) == []


def test_a_problem_that_clears_within_its_grace_is_never_reported() -> None:
    tracker = ConditionTracker(TRIGGERS)
    tracker.observe(NODE, ready("False", at(0)), at(0))
    assert tracker.observe(NODE, ready("True", at(2)), at(2)) == []
    assert tracker.tick(at(20)) == []
    assert tracker.episodes() == []


def test_flapping_does_not_reset_the_clock() -> None:
    # The kubelet moves lastTransitionTime on every flip; a tracker that
    # restarted its clock on each one would never report this node.
    tracker = ConditionTracker(TRIGGERS)
    sent: list[ConditionReport] = []
    for minute, status in ((0, "False"), (1, "True"), (2, "False"), (3, "True"), (4.5, "False")):
        sent += tracker.observe(NODE, ready(status, at(minute)), at(minute))
        sent += tracker.tick(at(minute + 0.2))
    assert sent == []
    (report,) = tracker.tick(at(5))
    assert report.evidence.observed_at == at(0)
    assert report.report_id == report_id(NODE, "Ready", at(0))


def test_a_flapping_problem_healthy_when_its_grace_ends_is_reported_when_it_returns() -> None:
    tracker = ConditionTracker(TRIGGERS)
    tracker.observe(NODE, ready("False", at(0)), at(0))
    tracker.observe(NODE, ready("True", at(4)), at(4))
    assert tracker.tick(at(6)) == []  # healthy at the deadline, but only for 2 of 5 minutes
    (report,) = tracker.observe(NODE, ready("False", at(7)), at(7))
    assert report.evidence.observed_at == at(0)


def test_an_episode_ends_after_a_full_grace_of_health_and_the_next_one_starts_over() -> None:
    tracker = ConditionTracker(TRIGGERS)
    tracker.observe(NODE, ready("False", at(0)), at(0))
    tracker.observe(NODE, ready("True", at(1)), at(1))
    assert tracker.tick(at(6)) == []
    assert tracker.episodes() == []
    assert tracker.observe(NODE, ready("False", at(6.5)), at(6.5)) == []
    assert tracker.tick(at(11.4)) == []
    (report,) = tracker.tick(at(11.5))
    assert report.evidence.observed_at == at(6.5)


def test_recovery_after_a_report_is_sent_once_as_cleared_evidence() -> None:
    tracker = ConditionTracker(TRIGGERS)
    tracker.observe(NODE, ready("False", at(0)), at(0))
    (report,) = tracker.tick(at(5))
    assert tracker.observe(NODE, ready("True", at(10)), at(10)) == []
    assert tracker.tick(at(14)) == []  # healthy, but not yet for a whole grace period
    (clear,) = tracker.tick(at(15))
    assert clear.kind == "clear"
    assert clear.report_id == report.report_id + ":cleared"
    assert clear.evidence.cleared
    assert (clear.evidence.type, clear.evidence.status) == ("Ready", "True")
    assert clear.evidence.observed_at == at(10)
    assert tracker.tick(at(16)) == []
    assert tracker.observe(NODE, ready("True", at(10)), at(17)) == []
    assert tracker.episodes() == []


def test_npd_polarity_true_is_the_problem_and_zero_grace_reports_and_clears_at_once() -> None:
    tracker = ConditionTracker(TRIGGERS)
    healthy = [cond("GpuHealthProblem", "False", since=at(0), reason="GpuHealthy")]
    assert tracker.observe(NODE, healthy, at(0)) == []
    sick = [
        cond(
            "GpuHealthProblem",
            "True",
            since=at(1),
            reason="GpuXidError",
            message="Xid 79 on GPU 3 (0000:53:00): reboot required",
        )
    ]
    (report,) = tracker.observe(NODE, sick, at(1))
    assert (report.evidence.status, report.evidence.message) == (
        "True",
        "Xid 79 on GPU 3 (0000:53:00): reboot required",
    )
    (clear,) = tracker.observe(NODE, healthy, at(2))
    assert clear.evidence.cleared
    assert clear.evidence.status == "False"


def test_a_restarted_watcher_keeps_the_clock_from_last_transition_time() -> None:
    first = ConditionTracker(TRIGGERS)
    first.observe(NODE, ready("False", at(0)), at(0.1))
    (original,) = first.tick(at(5))
    # A new process sees the node for the first time, three minutes in.
    restarted = ConditionTracker(TRIGGERS)
    assert restarted.observe(NODE, ready("False", at(0)), at(3)) == []
    (again,) = restarted.tick(at(5))
    assert again.evidence.observed_at == at(0)
    assert again.report_id == original.report_id  # the incident drops the repeat


def test_last_transition_time_is_ignored_when_the_condition_was_seen_healthy_since() -> None:
    # The status stays False; only the reason moves into the rule's pattern, so
    # lastTransitionTime (minute 0) says nothing about when the problem began.
    tracker = ConditionTracker(TRIGGERS)
    benign = [cond("AcceleratedHardwareReady", "False", since=at(0), reason="NvidiaXID13Error")]
    fatal = [cond("AcceleratedHardwareReady", "False", since=at(0), reason="NvidiaXID79Error")]
    assert tracker.observe(NODE, benign, at(1)) == []
    assert tracker.observe(NODE, fatal, at(2)) == []
    assert tracker.tick(at(2.9)) == []
    (report,) = tracker.tick(at(3))
    assert report.evidence.observed_at == at(2)
    assert report.evidence.reason == "NvidiaXID79Error"


def test_a_last_transition_time_in_the_future_starts_the_clock_now() -> None:
    tracker = ConditionTracker(TRIGGERS)
    tracker.observe(NODE, ready("False", at(60)), at(0))
    assert tracker.tick(at(4.9)) == []
    (report,) = tracker.tick(at(5))
    assert report.evidence.observed_at == at(0)


def test_a_new_fault_detail_after_the_report_is_sent_as_an_update() -> None:
    tracker = ConditionTracker(TRIGGERS)

    def gpu(message: str) -> list[ObservedCondition]:
        return [
            cond("GpuHealthProblem", "True", since=at(0), reason="GpuXidError", message=message)
        ]

    (first,) = tracker.observe(NODE, gpu("Xid 13 on GPU 0: application error"), at(0))
    # Same Xid and GPU, other words: not news.
    assert tracker.observe(NODE, gpu("Xid 13 on GPU 0: application error (2 times)"), at(1)) == []
    (update,) = tracker.observe(NODE, gpu("Xid 79 on GPU 3 (0000:53:00): reboot required"), at(2))
    assert update.kind == "update"
    assert update.evidence.observed_at == at(2)
    assert update.report_id not in (first.report_id, first.report_id + ":cleared")
    assert update.report_id.startswith(first.report_id)


def test_ready_turning_from_false_to_unknown_is_not_reported_again() -> None:
    tracker = ConditionTracker(TRIGGERS)
    tracker.observe(NODE, ready("False", at(0)), at(0))
    assert kinds(tracker.tick(at(5))) == ["report"]
    unknown = [cond("Ready", "Unknown", since=at(6), reason="NodeStatusUnknown")]
    assert tracker.observe(NODE, unknown, at(6)) == []


def test_fault_detail_is_the_parsed_npd_findings_and_the_reason_elsewhere() -> None:
    def detail(type_: str, reason: str, message: str = "") -> str:
        return fault_detail(cond(type_, "True", reason=reason, message=message))

    xid = "Xid 79 on GPU 3 (0000:53:00): fallen off the bus, reboot required"
    assert detail("GpuHealthProblem", "GpuXidError", xid) == "GpuXidError/xid/79/3"
    # Findings in another order, or other words around them, are the same detail.
    both = "DCGM error 85 on GPU 2: pending row remap; " + xid
    assert detail("GpuHealthProblem", "R", both) == detail(
        "GpuHealthProblem", "R", f"{xid}; {both}"
    )
    assert detail("GpuHealthProblem", "R", both) == "R/dcgm/health/85/2,xid/79/3"
    recovery = (
        "Xid 154 on GPU 1: GPU recovery action changed, recovery action 2 (node reboot required)"
    )
    assert detail("GpuHealthProblem", "R", recovery) == "R/xid/154/1/action/2"
    assert detail("EfaHealthProblem", "R", "EFA link (efa0): link down") == "R/efa/link/efa0"
    # Outside the agent's grammar, what the classifier reads from the message.
    assert detail("GpuHealthProblem", "R", "Xid 79 on GPU 0") == "R/xid/79/0"
    assert detail("GpuHealthProblem", "R", "DCGM error 85 on GPU 2") == "R/dcgm/85/2"
    assert detail("GpuHealthProblem", "GpuCheckFailed", "nvidia-smi hung") == "GpuCheckFailed"
    assert detail("AcceleratedHardwareReady", "NvidiaXID48Error") == "NvidiaXID48Error"
    assert detail("Ready", "KubeletNotReady") == ""


def test_a_vanished_condition_counts_as_recovered() -> None:
    tracker = ConditionTracker(TRIGGERS)
    tracker.observe(NODE, [cond("GpuHealthProblem", "True", since=at(0))], at(0))
    (clear,) = tracker.observe(NODE, [], at(1))
    assert clear.evidence.cleared
    assert clear.evidence.status == "Unknown"


def test_forgotten_and_unlisted_nodes_are_dropped_without_a_report() -> None:
    tracker = ConditionTracker(TRIGGERS)
    for node in ("gpu-1", "gpu-2", "gpu-3"):
        tracker.observe(node, [cond("GpuHealthProblem", "True", since=at(0))], at(0))
    tracker.forget("gpu-1")
    still_bad = [cond("GpuHealthProblem", "True", since=at(0))]
    # A re-list that no longer has gpu-3: dropped; gpu-2 unchanged: not re-sent.
    assert tracker.resync({"gpu-2": still_bad}, at(1)) == []
    assert [e.node for e in tracker.episodes()] == ["gpu-2"]
    # gpu-1 comes back with the problem: a new episode, reported again.
    assert kinds(tracker.observe("gpu-1", still_bad, at(2))) == ["report"]


def test_conditions_no_rule_is_about_are_ignored() -> None:
    tracker = ConditionTracker(TRIGGERS)
    conditions = [
        cond("MemoryPressure", "True", since=at(0)),
        cond("AcceleratedHardwareReady", "False", since=at(0), reason="NvidiaXID13Error"),
        cond("GpuHealthProblem", "Unknown", since=at(0)),
    ]
    assert tracker.observe(NODE, conditions, at(0)) == []
    assert tracker.tick(at(100)) == []
    assert tracker.episodes() == []


def test_next_deadline_is_the_earliest_grace_or_clear_that_can_fire() -> None:
    tracker = ConditionTracker(TRIGGERS)
    assert tracker.next_deadline() is None
    tracker.observe(NODE, ready("False", at(0)), at(0))
    assert tracker.next_deadline() == at(5)
    tracker.tick(at(5))
    assert tracker.next_deadline() is None  # reported and still bad: nothing pending
    tracker.observe(NODE, ready("True", at(6)), at(6))
    assert tracker.next_deadline() == at(11)


def test_report_ids_stay_within_the_limit_for_the_longest_names() -> None:
    node = ".".join(["a" * 63] * 4)[:253]
    long_type = "t" * 316
    rid = report_id(node, long_type, T0, ":cleared")
    assert len(rid) <= 256
    assert rid.endswith(":cleared")
    assert rid == report_id(node, long_type, T0, ":cleared")
    assert rid != report_id(node, long_type, at(1), ":cleared")


def test_long_or_missing_reason_and_message_are_accepted() -> None:
    observed = ObservedCondition.model_validate(
        {"type": "Ready", "status": "False", "reason": None, "message": "x" * 10_000}
    )
    assert observed.reason == ""
    assert len(observed.message) == 4096
    assert observed.last_transition is None
