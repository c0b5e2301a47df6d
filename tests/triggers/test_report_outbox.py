"""The watcher's outbox: a bounded queue per node, in order, each node backing off alone."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpu_remediation.models import ConditionEvidence
from triggers.condition_tracker import ConditionReport
from triggers.report_outbox import ReportOutbox, backoff_delay


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def report(node: str, n: int) -> ConditionReport:
    evidence = ConditionEvidence(
        observed_at=datetime(2026, 12, 5, tzinfo=UTC),
        source="test",
        type="GpuHealthProblem",
        status="True",
        reason=f"r{n}",
    )
    return ConditionReport(node=node, kind="report", report_id=f"{node}-{n}", evidence=evidence)


def ids(reports: list[ConditionReport]) -> list[str]:
    return [r.report_id for r in reports]


def outbox(clock: Clock, **options: int) -> ReportOutbox:
    return ReportOutbox(backoff_initial=1.0, backoff_max=8.0, clock=clock, **options)


def test_each_node_hands_out_one_report_at_a_time_in_the_order_seen() -> None:
    box = outbox(Clock())
    box.extend([report("a", 0), report("a", 1), report("b", 0)])
    wave = box.take(10)
    assert ids(wave) == ["a-0", "b-0"]
    assert box.take(10) == []  # a-1 waits until a-0 is settled
    box.done(wave[0])
    box.done(wave[1])
    assert ids(box.take(10)) == ["a-1"]


def test_a_failed_report_stays_first_and_only_its_node_backs_off() -> None:
    clock = Clock()
    box = outbox(clock)
    box.extend([report("a", 0), report("a", 1), report("b", 0), report("b", 1)])
    a0, b0 = box.take(10)
    assert box.failed(a0) == 1.0
    box.done(b0)
    assert ids(box.take(10)) == ["b-1"]  # b goes on while a backs off
    box.release_due()
    assert box.take(10) == []
    clock.now = 1.0
    box.release_due()
    (again,) = box.take(10)
    assert again is a0
    assert box.failed(again) == 2.0  # doubled
    clock.now = 3.0
    box.release_due()
    box.done(box.take(10)[0])
    assert ids(box.take(10)) == ["a-1"]  # a's later report only after a-0
    assert ids(list(box)) == ["a-1", "b-1"]


def test_a_node_that_fails_is_not_retried_before_the_next_release() -> None:
    box = ReportOutbox(backoff_initial=0.0, backoff_max=0.0, clock=Clock())
    box.add(report("a", 0))
    (a0,) = box.take(10)
    box.failed(a0)
    assert box.take(10) == []
    box.release_due()
    assert box.take(10) == [a0]


def test_a_full_node_queue_refuses_the_newest_and_keeps_what_waits() -> None:
    box = outbox(Clock(), per_node=2)
    assert box.add(report("a", 0)) is None
    assert box.add(report("a", 1)) is None
    assert box.add(report("a", 2)) == "node_queue_full"
    assert box.add(report("b", 0)) is None  # other nodes still have room
    assert ids(list(box)) == ["a-0", "a-1", "b-0"]
    assert box.refused == {"node_queue_full": 1, "outbox_full": 0}
    assert (len(box), box.nodes, box.waiting("a")) == (3, 2, 2)


def test_a_full_outbox_refuses_the_newest_of_any_node() -> None:
    box = outbox(Clock(), total=3)
    refused = box.extend([report(f"n{i}", 0) for i in range(5)])
    assert ids(refused) == ["n3-0", "n4-0"]
    assert box.refused["outbox_full"] == 2
    assert ids(list(box)) == ["n0-0", "n1-0", "n2-0"]
    box.done(box.take(1)[0])
    assert box.add(report("n3", 0)) is None  # room again once one went out


def test_settling_a_report_that_was_not_handed_out_is_a_bug() -> None:
    box = outbox(Clock())
    box.add(report("a", 0))
    with pytest.raises(RuntimeError, match="not handed out"):
        box.done(report("a", 0))


def test_the_backoff_doubles_up_to_its_cap_and_never_overflows() -> None:
    assert [backoff_delay(n, 0.5, 30.0) for n in (1, 2, 3, 7, 8)] == [0.5, 1.0, 2.0, 30.0, 30.0]
    assert backoff_delay(100_000, 0.5, 30.0) == 30.0
