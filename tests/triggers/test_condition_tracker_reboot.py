"""The watcher's clock across reboots: a problem that survives a reboot is reported again."""

from __future__ import annotations

from tests.triggers.tracker_support import NODE, T0, TRIGGERS, at, cond
from triggers.condition_tracker import (
    ConditionReport,
    ConditionTracker,
    ObservedCondition,
    report_id,
)

# AcceleratedHardwareReady has a 1-minute grace in TRIGGERS.
TYPE = "AcceleratedHardwareReady"


def gpu_bad() -> list[ObservedCondition]:
    return [cond(TYPE, "False", since=T0, reason="NvidiaXID48Error")]


def gpu_good(minutes: float) -> list[ObservedCondition]:
    return [cond(TYPE, "True", since=at(minutes), reason="AcceleratedHardwareIsReady")]


def reported(tracker: ConditionTracker, boot: str = "boot-a") -> ConditionReport:
    tracker.observe(NODE, gpu_bad(), at(0), boot_id=boot)
    (report,) = tracker.tick(at(1))
    assert report.kind == "report"
    return report


def test_a_reported_problem_still_there_after_a_reboot_is_reported_again_after_its_grace() -> None:
    # The condition never flips (a restarted NPD writes the same status), so
    # only the new boot id says the node rebooted and the fault survived it.
    tracker = ConditionTracker(TRIGGERS)
    first = reported(tracker)
    assert tracker.observe(NODE, gpu_bad(), at(10), boot_id="boot-b") == []
    assert tracker.tick(at(10.9)) == []
    (again,) = tracker.tick(at(11))
    assert again.kind == "report"
    assert again.report_id != first.report_id
    assert again.report_id == report_id(NODE, TYPE, at(0), ":boot:" + at(10).isoformat())
    assert again.evidence.observed_at == at(10)  # first seen on the new boot
    assert not again.evidence.cleared
    assert tracker.tick(at(30)) == []  # once per boot
    assert tracker.observe(NODE, gpu_bad(), at(31), boot_id="boot-b") == []


def test_a_reported_problem_on_the_same_boot_is_not_reported_again() -> None:
    tracker = ConditionTracker(TRIGGERS)
    reported(tracker)
    assert tracker.observe(NODE, gpu_bad(), at(10), boot_id="boot-a") == []
    assert tracker.tick(at(60)) == []


def test_a_problem_gone_after_the_reboot_sends_the_episodes_clear_and_no_new_report() -> None:
    # The stale condition is seen for a moment on the new boot before the agent
    # rewrites it: that alone must not report the fault again.
    tracker = ConditionTracker(TRIGGERS)
    first = reported(tracker)
    tracker.observe(NODE, gpu_bad(), at(10), boot_id="boot-b")
    assert tracker.observe(NODE, gpu_good(10.1), at(10.1), boot_id="boot-b") == []
    (clear,) = tracker.tick(at(11.1))
    assert clear.kind == "clear"
    assert clear.report_id == first.report_id + ":cleared"
    assert tracker.episodes() == []


def test_a_problem_flapping_on_the_new_boot_is_reported_from_its_first_sighting_there() -> None:
    tracker = ConditionTracker(TRIGGERS)
    reported(tracker)
    tracker.observe(NODE, gpu_bad(), at(10), boot_id="boot-b")
    tracker.observe(NODE, gpu_good(10.3), at(10.3), boot_id="boot-b")
    assert tracker.observe(NODE, gpu_bad(), at(10.6), boot_id="boot-b") == []
    (again,) = tracker.tick(at(11))
    assert again.evidence.observed_at == at(10)


def test_a_reboot_before_the_first_report_does_not_report_twice() -> None:
    tracker = ConditionTracker(TRIGGERS)
    tracker.observe(NODE, gpu_bad(), at(0), boot_id="boot-a")
    tracker.observe(NODE, gpu_bad(), at(0.5), boot_id="boot-b")
    (report,) = tracker.tick(at(1))
    assert report.report_id == report_id(NODE, TYPE, at(0))
    assert tracker.tick(at(5)) == []


def test_an_unknown_boot_id_never_reports_again() -> None:
    tracker = ConditionTracker(TRIGGERS)
    tracker.observe(NODE, gpu_bad(), at(0))
    tracker.tick(at(1))
    assert tracker.observe(NODE, gpu_bad(), at(10)) == []
    assert tracker.observe(NODE, gpu_bad(), at(11), boot_id="boot-b") == []  # first one known
    assert tracker.tick(at(20)) == []


def test_the_next_deadline_includes_a_report_pending_after_a_reboot() -> None:
    tracker = ConditionTracker(TRIGGERS)
    reported(tracker)
    assert tracker.next_deadline() is None
    tracker.observe(NODE, gpu_bad(), at(10), boot_id="boot-b")
    assert tracker.next_deadline() == at(11)


def test_a_relisted_fleet_carries_the_boot_ids() -> None:
    tracker = ConditionTracker(TRIGGERS)
    reported(tracker)
    assert tracker.resync({NODE: gpu_bad()}, at(10), boot_ids={NODE: "boot-b"}) == []
    (again,) = tracker.tick(at(11))
    assert again.kind == "report"
