"""Incidents lost and incidents duplicated, judged from the nodes' problems and the runs."""

from __future__ import annotations

from demo.chaos.invariants import duplicate_incidents, incidents_lost
from gpu_remediation.ids import ADMISSION_WORKFLOW_TYPE
from tests.demo.chaos.builders import facts, incident, node


def test_a_problem_past_its_grace_with_an_incident_of_its_node_is_not_lost() -> None:
    result = incidents_lost(
        facts(
            [node("gpu-0001", episodes=[("GpuHealthProblem", 10, 100, 0)])],
            [incident("gpu-0001", 12, 200)],
        )
    )
    assert result.holds
    assert result.checked.startswith("1 problem(s) past their grace")


def test_a_problem_past_its_grace_and_slack_with_no_incident_is_lost_and_named() -> None:
    result = incidents_lost(
        facts(
            [
                node("gpu-0001", episodes=[("GpuHealthProblem", 10, 100, 0)]),
                node("gpu-0002", episodes=[("GpuHealthProblem", 10, None, 0)]),
            ],
            [incident("gpu-0001", 12, 200)],
        )
    )
    (violation,) = result.violations
    assert violation.startswith("gpu-0002: GpuHealthProblem was a problem")
    assert "no incident was open for it" in violation


def test_an_incident_of_another_time_does_not_cover_a_problem() -> None:
    result = incidents_lost(
        facts(
            [node("gpu-0001", episodes=[("Ready", 300, 400, 60)])],
            [incident("gpu-0001", 10, 100)],  # closed long before the problem began
        )
    )
    assert len(result.violations) == 1


def test_a_problem_shorter_than_grace_and_slack_owes_no_incident() -> None:
    result = incidents_lost(
        facts([node("gpu-0001", episodes=[("Ready", 10, 75, 60)])], [], end=600)
    )
    assert result.holds
    assert result.checked.startswith("0 problem(s)")


def test_a_problem_on_a_node_in_burn_in_is_covered_by_its_admission() -> None:
    admission = incident("gpu-0001", 5, 90, workflow_type=ADMISSION_WORKFLOW_TYPE)
    result = incidents_lost(
        facts([node("gpu-0001", episodes=[("GpuHealthProblem", 10, 100, 0)])], [admission])
    )
    assert result.holds


def test_an_unwatched_node_owes_no_incident() -> None:
    result = incidents_lost(
        facts([node("cpu-0001", watched=False, episodes=[("Ready", 10, None, 0)])], [])
    )
    assert result.holds


def test_two_incidents_of_one_node_open_at_once_are_a_duplicate_naming_both_runs() -> None:
    result = duplicate_incidents(
        facts(
            [node("gpu-0001")],
            [incident("gpu-0001", 10, 200, run_id="a"), incident("gpu-0001", 150, run_id="b")],
        )
    )
    (violation,) = result.violations
    assert "(run b) started while" in violation
    assert "(run a) was still open" in violation


def test_incidents_of_one_node_one_after_another_are_not_duplicates() -> None:
    result = duplicate_incidents(
        facts(
            [node("gpu-0001")],
            [incident("gpu-0001", 10, 200, run_id="a"), incident("gpu-0001", 210, run_id="b")],
        )
    )
    assert result.holds
    assert result.checked == "2 incident(s) on 1 node(s)"


def test_an_incident_started_soon_after_the_problem_ended_still_covers_it() -> None:
    # The report waited in the watcher's outbox while Temporal restarted.
    episode = [("GpuHealthProblem", 10, 40, 0)]
    late = incidents_lost(facts([node("gpu-0001", episodes=episode)], [incident("gpu-0001", 60)]))
    assert late.holds
    too_late = incidents_lost(
        facts([node("gpu-0001", episodes=episode)], [incident("gpu-0001", 90)])
    )
    assert len(too_late.violations) == 1


def test_a_problem_still_open_is_not_judged_before_its_incident_could_arrive() -> None:
    # Owed from 13 s (grace 0 + slack 3); its incident may take 30 s more to arrive.
    episode = [("GpuHealthProblem", 10, None, 0)]
    slack = {"detection_slack_s": 3.0, "delivery_slack_s": 30.0}
    early = incidents_lost(facts([node("gpu-0001", episodes=episode)], [], end=40, **slack))
    assert early.holds
    late = incidents_lost(facts([node("gpu-0001", episodes=episode)], [], end=44, **slack))
    assert len(late.violations) == 1


def test_a_problem_still_open_that_already_has_its_incident_is_counted_as_checked() -> None:
    result = incidents_lost(
        facts(
            [node("gpu-0001", episodes=[("GpuHealthProblem", 10, None, 0)])],
            [incident("gpu-0001", 12)],
            end=20,
            detection_slack_s=3.0,
        )
    )
    assert result.holds
    assert result.checked.startswith("1 problem(s) past their grace")
