"""The summary's ``jobs``: the fleet's job accounting and what the incidents' job stage did."""

from __future__ import annotations

from typing import Any

from demo.incidents import Incident
from demo.summary import DemoSummary, job_lines, jobs_summary, summarize
from gpu_remediation.models import Outcome, Rung
from gpu_remediation.workflow_models import Decision
from simulator.fleet import Fleet, FleetConfig, PoolSpec, WorkloadConfig
from tests.demo.test_summary import at, incident, snapshot


def with_log(node: str, outcome: Outcome | None, log: list[tuple[str, str]]) -> Incident:
    """An incident whose decision log has these job-stage (action, reason) entries."""
    base = incident(node, outcome, [], rung=Rung.GPU_RESET)
    assert base.state is not None
    decisions = [
        Decision(at=at(t), stage="jobs", action=action, reason=reason)
        for t, (action, reason) in enumerate(log)
    ]
    base.state = base.state.model_copy(update={"decisions": decisions})
    return base


def fleet_jobs(**changes: float) -> dict[str, Any]:
    """A real fleet's job summary (not started: nothing ran), with ``changes``."""
    fleet = Fleet(FleetConfig(pools=[PoolSpec(name="h100", nodes=10)], workloads=WorkloadConfig()))
    assert fleet.workloads is not None
    return {**fleet.workloads.summary(), **changes}


def test_job_outcomes_gpu_hours_and_project_caused_failures_come_from_the_fleet() -> None:
    jobs = fleet_jobs(
        runs_succeeded=9,
        runs_failed=1,
        runs_failed_by_remediation=0,
        ettr=0.9123456,
        gpu_seconds_allocated=36_000,
        gpu_seconds_lost_to_faults=7_200,
        gpu_seconds_lost_to_remediation=1_800,
        gpu_seconds_lost_to_slowness=900,
        disruptions=3,
        failures_caused_by_remediation=2,
        handshake_failures_caused_by_remediation=0,
        **{"failures_caused_by_remediation.on.false_positive": 2},
    )
    summary = jobs_summary(jobs, [])
    assert summary is not None
    assert (summary.jobs, summary.handshake_jobs) == (2, 1)  # 10 nodes * 0.9 / 4; half opt in
    assert (summary.runs_succeeded, summary.runs_failed, summary.success_rate) == (9, 1, 0.9)
    assert summary.ettr == 0.912346
    assert (summary.gpu_hours_allocated, summary.gpu_hours_lost_to_faults) == (10.0, 2.0)
    assert summary.gpu_hours_lost_to_remediation == 0.5
    assert summary.gpu_hours_lost_to_slowness == 0.25
    assert summary.restarts_from_checkpoint == 3
    assert summary.remediation_caused_failures == 2
    assert summary.remediation_caused_failures_handshake == 0
    assert summary.remediation_caused_failures_by_fault == {"false_positive": 2}
    lines = dict(job_lines(summary))
    assert lines["Job failures caused by remediation"].endswith("on nodes with false_positive 2")


def test_requests_answers_and_deferrals_are_read_from_the_incidents_decision_logs() -> None:
    asked = with_log(
        "a",
        Outcome.REPAIRED,
        [
            ("on the node: training/llm (4 nodes, checkpoints)", ""),
            (
                "asked training/llm (4 nodes, checkpoints) to checkpoint",
                "urgency checkpoint_first for gpu_reset_required; 4 pod(s) asked",
            ),
            ("checkpoint answered", "training/llm-0: step 120, saved ..."),
            ("wait over", "saved at step 120"),
        ],
    )
    deferred = with_log(
        "b",
        Outcome.REPAIRED,
        [("waiting for jobs to end", "urgency when_idle for row_remap_pending")],
    )
    deferred_asked = with_log(
        "c",
        None,
        [
            (
                "asked training/x (1 node, checkpoints) to checkpoint",
                "urgency when_idle for row_remap_pending; 1 pod(s) asked",
            )
        ],
    )
    untouched = with_log("d", Outcome.REPAIRED, [("no wait", "urgency immediate")])
    summary = jobs_summary(fleet_jobs(), [asked, deferred, deferred_asked, untouched])
    assert summary is not None
    assert summary.checkpoint_requests == 2
    assert summary.checkpoints_answered == 1
    assert summary.deferred == 2
    assert summary.success_rate is None  # no run finished yet


def test_the_summary_prints_and_serialises_the_jobs_and_has_none_without_workloads() -> None:
    without = summarize(
        [],
        snapshot(),
        replacement_cap=2,
        time_factor=1,
        wall_seconds=1,
        temporal_address="a",
        temporal_ui=None,
    )
    assert without.jobs is None
    with_jobs = without.model_copy(update={"jobs": jobs_summary(fleet_jobs(runs_succeeded=3), [])})
    data = DemoSummary.model_validate(with_jobs.model_dump(mode="json")).model_dump()
    assert data["jobs"]["runs_succeeded"] == 3
    assert data["jobs"].keys() >= {
        "runs_succeeded",
        "runs_failed",
        "success_rate",
        "ettr",
        "gpu_hours_lost_to_faults",
        "gpu_hours_lost_to_remediation",
        "checkpoint_requests",
        "checkpoints_answered",
        "deferred",
        "remediation_caused_failures",
    }
    assert with_jobs.jobs is not None
    lines = dict(job_lines(with_jobs.jobs))
    assert lines["Training job runs"].startswith("3 succeeded, 0 failed (success 100.0%)")
    assert lines["Job failures caused by remediation"].startswith("0 (0 of jobs that speak")
