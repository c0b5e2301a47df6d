"""The straggler detector: a pod slower than its gang's median, for long enough, names its node."""

import json
import random
import statistics
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from checkpoint_client.protocol import STEP_TIME_ANNOTATION
from gpu_remediation.policy import StragglerPolicy
from triggers.stragglers import StragglerDetector, StragglerReport, _Gang, _median

JOBSET = "jobset.sigs.k8s.io/jobset-name"
T0 = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
POLICY = StragglerPolicy(
    margin=0.2, min_steps=200, min_gang=3, stale_after=timedelta(minutes=15), min_span=timedelta(0)
)


def pod(
    rank: int,
    step: int,
    seconds: float,
    *,
    steps: int = 100,
    job: str = "llm",
    namespace: str = "ml",
    node: str | None = None,
    phase: str = "Running",
    raw: str | None = None,
) -> dict[str, Any]:
    value = raw or json.dumps({"version": 1, "step": step, "seconds": seconds, "steps": steps})
    return {
        "metadata": {
            "uid": f"uid-{namespace}-{job}-{rank}",
            "name": f"{job}-{rank}",
            "namespace": namespace,
            "labels": {JOBSET: job},
            "annotations": {STEP_TIME_ANNOTATION: value},
        },
        "spec": {
            "nodeName": node or f"gpu-{rank}",
            "containers": [{"name": "train", "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
        },
        "status": {"phase": phase},
    }


def gang_step(
    detector: StragglerDetector,
    step: int,
    times: list[float],
    now: datetime,
    **kwargs: Any,
) -> list[StragglerReport]:
    """Every rank of a gang reports the same step; the reports the detector answers."""
    reports: list[StragglerReport] = []
    for rank, seconds in enumerate(times):
        reports += detector.observe("MODIFIED", pod(rank, step, seconds, **kwargs), now)
    return reports


def detector(**changes: Any) -> StragglerDetector:
    return StragglerDetector(POLICY.model_copy(update=changes), [JOBSET])


def test_a_rank_slow_for_min_steps_names_its_node_once() -> None:
    d = detector()
    assert gang_step(d, 100, [2.0, 2.0, 2.6, 2.0], T0) == []  # slow for 100 steps so far
    [report] = gang_step(d, 200, [2.0, 2.0, 2.6, 2.0], T0 + timedelta(minutes=1))
    assert (report.node, report.kind) == ("gpu-2", "report")
    evidence = report.evidence
    assert (evidence.job, evidence.pod, evidence.steps, evidence.gang) == (
        "ml/llm",
        "ml/llm-2",
        200,
        4,
    )
    assert evidence.slower_by == pytest.approx(0.3)
    assert not evidence.cleared
    assert gang_step(d, 300, [2.0, 2.0, 2.6, 2.0], T0 + timedelta(minutes=2)) == []


def test_back_within_the_margin_clears_the_report_it_made() -> None:
    d = detector()
    gang_step(d, 100, [2.0, 2.0, 2.6, 2.0], T0)
    [report] = gang_step(d, 200, [2.0, 2.0, 2.6, 2.0], T0)
    [clear] = gang_step(d, 300, [2.0, 2.0, 2.1, 2.0], T0)
    assert (clear.node, clear.kind, clear.evidence.cleared) == ("gpu-2", "clear", True)
    assert clear.evidence.key == report.evidence.key
    assert clear.report_id == f"{report.report_id}:cleared"


def test_noisy_step_times_within_the_margin_name_nobody() -> None:
    rng = random.Random(7)
    d = detector()
    reports = []
    for step in range(100, 20_001, 100):
        times = [2.0 * (1 + rng.uniform(-0.08, 0.08)) for _ in range(8)]
        reports += gang_step(d, step, times, T0 + timedelta(seconds=step))
    assert reports == []


def test_one_slow_report_in_a_streak_of_fast_ones_starts_over() -> None:
    d = detector(min_steps=300)
    gang_step(d, 100, [2.0, 2.0, 2.6], T0)
    gang_step(d, 200, [2.0, 2.0, 2.6], T0)
    gang_step(d, 300, [2.0, 2.0, 2.0], T0)  # a fast report ends the streak
    assert gang_step(d, 400, [2.0, 2.0, 2.6], T0) == []
    assert gang_step(d, 500, [2.0, 2.0, 2.6], T0) == []
    assert len(gang_step(d, 600, [2.0, 2.0, 2.6], T0)) == 1


@pytest.mark.parametrize("size", [1, 2])
def test_a_gang_too_small_for_a_median_is_not_judged(size: int) -> None:
    d = detector()
    times = [2.0, 9.0][:size]
    reports = []
    for step in range(100, 2001, 100):
        reports += gang_step(d, step, times, T0)
    assert reports == []


def test_a_job_that_stops_reporting_is_left_out_not_judged() -> None:
    d = detector()
    gang_step(d, 100, [2.0, 2.0, 2.0, 2.0], T0)
    later = T0 + timedelta(minutes=20)  # past stale_after: ranks 0-2 went quiet
    reports = []
    for step in range(200, 1001, 100):
        reports += d.observe("MODIFIED", pod(3, step, 9.0), later)
    assert reports == [], "one fresh report is no gang"


def test_a_stale_peer_does_not_make_a_healthy_rank_look_slow() -> None:
    d = detector()
    gang_step(d, 100, [1.0, 1.0, 1.0, 1.0, 1.0], T0)  # an old, faster phase of the job
    later = T0 + timedelta(minutes=20)
    reports = []
    for step in range(200, 1001, 100):
        reports += gang_step(d, step, [2.0, 2.0, 2.0], later)
    assert reports == []


def test_the_same_report_seen_again_is_not_counted_twice() -> None:
    d = detector()
    gang_step(d, 100, [2.0, 2.0, 2.6], T0)
    for _ in range(5):  # other fields of the pods changed; the annotation did not
        assert gang_step(d, 100, [2.0, 2.0, 2.6], T0) == []
    assert len(gang_step(d, 200, [2.0, 2.0, 2.6], T0)) == 1


def test_a_step_that_goes_back_starts_the_rank_afresh() -> None:
    d = detector()
    gang_step(d, 1000, [2.0, 2.0, 2.6], T0)
    gang_step(d, 1100, [2.0, 2.0, 2.6], T0)
    # The job restarted from its step-900 checkpoint: the streak so far says nothing.
    assert gang_step(d, 950, [2.0, 2.0, 2.6], T0) == []
    assert len(gang_step(d, 1050, [2.0, 2.0, 2.6], T0)) == 1


def test_pods_that_do_not_take_part_are_ignored() -> None:
    d = detector()
    unlabelled = pod(0, 100, 9.0)
    unlabelled["metadata"]["labels"] = {"app": "x"}
    unbound = pod(1, 100, 9.0)
    unbound["spec"] = {}
    pending = pod(2, 100, 9.0, phase="Pending")
    for item in (unlabelled, unbound, pending):
        assert d.observe("ADDED", item, T0) == []
    assert len(d) == 0


@pytest.mark.parametrize(
    "raw",
    [
        "not json",
        "[1, 2]",
        '{"version": 2, "step": 1, "seconds": 1, "steps": 1}',
        '{"version": 1, "step": -1, "seconds": 1, "steps": 1}',
        '{"version": 1, "step": 10, "seconds": 0, "steps": 1}',
        '{"version": 1, "step": 10, "seconds": NaN, "steps": 1}',
        '{"version": 1, "step": 10, "seconds": 1, "steps": 12}',
        '{"version": 1, "step": true, "seconds": 1, "steps": 1}',
        "[" * 100_000,
        '{"version": 1, "step": 10, "seconds": 1, "steps": 1, "x": "' + "a" * 300 + '"}',
    ],
)
def test_values_that_break_the_contract_are_counted_not_used(raw: str) -> None:
    d = detector()
    assert d.observe("MODIFIED", pod(0, 0, 0, raw=raw), T0) == []
    assert d.observe("MODIFIED", pod(0, 0, 0, raw=raw), T0) == []
    assert (len(d), d.unreadable) == (0, 1)


def test_gangs_are_judged_apart_by_namespace_and_job() -> None:
    d = detector()
    # Two tenants' jobs of the same name: neither is compared with the other.
    for step in (100, 200, 300):
        assert gang_step(d, step, [2.0, 2.0], T0, namespace="team-a") == []
        assert gang_step(d, step, [9.0], T0, namespace="team-b") == []


def test_a_deleted_pod_is_forgotten_and_leaves_its_gang() -> None:
    d = detector()
    gang_step(d, 100, [2.0, 2.0, 2.0], T0)
    d.observe("DELETED", pod(0, 100, 2.0), T0)
    assert len(d) == 2
    assert gang_step(d, 200, [2.0, 2.0], T0, steps=100) == []


def test_an_ended_pod_neither_reports_nor_clears() -> None:
    d = detector()
    gang_step(d, 100, [2.0, 2.0, 2.6], T0)
    [report] = gang_step(d, 200, [2.0, 2.0, 2.6], T0)
    assert report.kind == "report"
    assert d.observe("MODIFIED", pod(2, 300, 2.0, phase="Succeeded"), T0) == []


def test_tracking_is_bounded() -> None:
    d = StragglerDetector(POLICY, [JOBSET], max_pods=3)
    assert gang_step(d, 100, [2.0, 2.0, 2.0, 2.0], T0) == []
    assert (len(d), d.refused) == (3, 1)
    d.observe("DELETED", pod(0, 100, 2.0), T0)
    assert d.observe("ADDED", pod(3, 100, 2.0), T0) == []
    assert (len(d), d.refused) == (3, 1)


def test_a_gang_of_a_thousand_pods_is_judged() -> None:
    d = detector()
    times = [2.0] * 1023 + [2.6]
    gang_step(d, 100, times, T0)
    assert [r.node for r in gang_step(d, 200, times, T0)] == ["gpu-1023"]


def test_one_write_claiming_many_steps_is_not_enough() -> None:
    # The job counts its own steps: a single report of 1,000 slow steps names nobody,
    # and the detector's own clock must see the pod slow for min_span too.
    d = detector(min_span=timedelta(minutes=10))
    assert gang_step(d, 1000, [2.0, 2.0, 2.6], T0, steps=1000) == []
    assert gang_step(d, 1100, [2.0, 2.0, 2.6], T0 + timedelta(minutes=5)) == []
    [report] = gang_step(d, 1200, [2.0, 2.0, 2.6], T0 + timedelta(minutes=10))
    assert report.node == "gpu-2"


def test_a_pod_flapping_slow_and_fast_reports_at_most_once_a_span() -> None:
    d = detector(min_span=timedelta(minutes=10))
    sent = []
    for minute in range(0, 60):  # slow, fast, slow, ... every minute for an hour
        slow = 2.6 if minute % 2 == 0 else 2.0
        now = T0 + timedelta(minutes=minute)
        sent += gang_step(d, 100 * (minute + 1), [2.0, 2.0, slow], now)
    assert sent == []


def test_a_pod_without_gpus_takes_no_part() -> None:
    d = detector()
    cpu_only = pod(2, 100, 9.0)
    cpu_only["spec"]["containers"] = [{"name": "x", "resources": {}}]
    gang_step(d, 100, [2.0, 2.0], T0)
    assert d.observe("MODIFIED", cpu_only, T0) == []
    assert len(d) == 2


def test_a_relist_forgets_pods_deleted_while_unwatched_and_silent_pods_age_out() -> None:
    d = detector()
    gang_step(d, 100, [2.0, 2.0, 2.0, 2.0], T0)
    d.resync({"uid-ml-llm-0", "uid-ml-llm-1"}, T0)
    assert len(d) == 2
    later = T0 + 5 * POLICY.stale_after  # silent for longer than four stale_after
    d.observe("MODIFIED", pod(7, 100, 2.0, job="other"), later)
    assert len(d) == 1


def test_an_unreadable_value_is_remembered_by_digest_not_kept() -> None:
    d = detector()
    huge = '{"version": 2, "pad": "' + "x" * 200_000 + '"}'
    d.observe("MODIFIED", pod(0, 0, 0, raw=huge), T0)
    assert d.unreadable == 1
    assert all(len(v) <= 16 for v in d._unreadable_seen.values())


@pytest.mark.unit
def test_a_gangs_fresh_times_are_its_members_latest_within_the_window_sorted() -> None:
    # The gang keeps its times sorted as reports come and go; it must give what a scan
    # of every member's latest report within the window and a sort would.
    rng = random.Random(7)
    gang = _Gang()
    latest: dict[str, tuple[datetime, float]] = {}
    now = T0
    window = timedelta(seconds=60)
    for _ in range(5000):
        now += timedelta(seconds=rng.choice([0, 1, 5, 20]))
        uid = f"rank-{rng.randrange(40)}"
        if rng.random() < 0.1:
            gang.drop(uid)
            latest.pop(uid, None)
        else:
            seconds = rng.choice([1.0, 1.5, 2.0, rng.uniform(0.5, 4.0)])  # ties too
            gang.update(uid, now, seconds)
            latest[uid] = (now, seconds)
        expected = sorted(s for seen, s in latest.values() if seen >= now - window)
        assert gang.fresh(now - window) == expected
        if expected:
            assert _median(expected) == pytest.approx(statistics.median(expected))
