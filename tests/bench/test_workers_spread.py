"""The workers benchmark's accounting: each worker's share, incidents that moved."""

from collections import Counter

import pytest

from bench.workers import tuning_env
from bench.workers_history import IncidentTrace, moved, shares


def incident(
    closed_by: str | None, tasks: dict[str, int], activities: dict[str, int]
) -> IncidentTrace:
    return IncidentTrace(
        workflow_id=f"wf-{closed_by}-{sorted(tasks)}",
        closed_by=closed_by,
        workflow_tasks=Counter(tasks),
        activities=Counter(activities),
    )


def test_each_incident_counts_for_the_worker_that_closed_it() -> None:
    traces = [
        incident("w0", {"w0": 5}, {"w0": 14}),
        incident("w1", {"w1": 5}, {"w0": 3, "w1": 11}),
        incident("w1", {"w1": 6}, {"w1": 14}),
    ]
    by_worker = shares(traces)
    assert {name: s.incidents_closed for name, s in by_worker.items()} == {"w0": 1, "w1": 2}
    assert by_worker["w0"].incidents_touched == 2
    assert by_worker["w0"].activities == 17
    assert by_worker["w1"].workflow_tasks == 11


def test_an_open_incident_is_closed_by_nobody() -> None:
    by_worker = shares([incident(None, {"w0": 2}, {})])
    assert by_worker["w0"].incidents_closed == 0
    assert by_worker["w0"].incidents_touched == 1


def test_an_incident_whose_tasks_ran_on_two_workers_has_moved() -> None:
    traces = [
        incident("w1", {"w0": 2, "w1": 4}, {"w0": 5}),
        incident("w0", {"w0": 6}, {"w1": 9}),
    ]
    # Activities on another worker are normal; only the workflow's own tasks count.
    assert moved(traces) == 1


def test_tuning_travels_as_the_workers_own_variables() -> None:
    env = tuning_env({"workflow_task_pollers": 4, "max_concurrent_activities": None})
    assert env == {"GPU_REMEDIATION_WORKFLOW_TASK_POLLERS": "4"}


def test_tuning_that_is_no_worker_setting_is_refused() -> None:
    with pytest.raises(ValueError, match="pollers_per_core"):
        tuning_env({"pollers_per_core": 2})
