"""What a run must not leave behind: permits, quarantined nodes, failed or stuck workflows."""

from __future__ import annotations

from demo.chaos.facts import PermitHolder, Taint
from demo.chaos.invariants import (
    check_all,
    nodes_left_quarantined,
    permits_leaked,
    workflows_failed_or_stuck,
)
from gpu_remediation.contracts import QUARANTINE_TAINT_KEY
from tests.demo.chaos.builders import at, facts, incident, node

QUARANTINE = Taint(key=QUARANTINE_TAINT_KEY, value="gpu", effect="NoSchedule")


def _holder(run_id: str) -> PermitHolder:
    return PermitHolder(
        holder_workflow_id="gpu-remediation/demo/gpu-0001", holder_run_id=run_id, request_id="q1"
    )


def test_a_permit_held_by_a_running_incident_is_not_leaked() -> None:
    result = permits_leaked(
        facts([], [incident("gpu-0001", 10, run_id="live")], permit_holders=[_holder("live")])
    )
    assert result.holds


def test_a_permit_held_by_a_closed_incident_is_leaked_and_named() -> None:
    result = permits_leaked(
        facts([], [incident("gpu-0001", 10, 50, run_id="gone")], permit_holders=[_holder("gone")])
    )
    assert result.violations == [
        "permit q1 held by gpu-remediation/demo/gpu-0001 (run gone), which is no longer running"
    ]


def test_a_cordoned_node_without_an_open_incident_is_left_quarantined() -> None:
    result = nodes_left_quarantined(
        facts(
            [node("gpu-0001", unschedulable=True, taints=[QUARANTINE])],
            [incident("gpu-0001", 10, 50)],
        )
    )
    (violation,) = result.violations
    assert violation.startswith(f"gpu-0001: left cordoned, {QUARANTINE_TAINT_KEY}")
    assert "(last: gpu-remediation/demo/gpu-0001 (run r1))" in violation


def test_a_quarantined_node_of_an_open_incident_or_an_escalation_is_fine() -> None:
    result = nodes_left_quarantined(
        facts(
            [
                node("gpu-0001", unschedulable=True, taints=[QUARANTINE]),
                node("gpu-0002", unschedulable=True, taints=[QUARANTINE]),
                node("gpu-0003", unschedulable=True, claim_deleted_at=[at(20)]),
            ],
            [
                incident("gpu-0001", 10).model_copy(update={"waiting_for": "a reboot permit"}),
                incident("gpu-0002", 10, 50, outcome="escalated"),
            ],
        )
    )
    assert result.holds
    assert result.checked == "3 node(s), 2 cordoned or tainted by the project at the end"


def test_a_node_held_by_an_open_incident_that_neither_acts_nor_waits_is_named() -> None:
    quarantined = [node(f"gpu-000{i}", unschedulable=True, taints=[QUARANTINE]) for i in (1, 2)]
    acting = incident("gpu-0002", 10, run_id="acting").model_copy(
        update={"waiting_on": ["reboot_node (attempt 1)"]}
    )
    result = nodes_left_quarantined(facts(quarantined, [incident("gpu-0001", 10), acting]))
    assert result.violations == [
        "gpu-0001: held by gpu-remediation/demo/gpu-0001 (run r1), which neither acts nor "
        "says what it waits for"
    ]


def test_failed_unsettled_and_task_failing_runs_are_each_named() -> None:
    result = workflows_failed_or_stuck(
        facts(
            [],
            [
                incident("gpu-0001", 10, 50, status="failed"),
                incident("gpu-0002", 10, settled=False, outcome=None).model_copy(
                    update={"waiting_on": ["check_breaker (attempt 2, after: timeout)"]}
                ),
                incident("gpu-0003", 10, 50, task_failures=["NON_DETERMINISTIC_ERROR: x"]),
                incident("gpu-0004", 10),  # in cooldown: settled
            ],
        )
    )
    assert result.violations == [
        "gpu-remediation/demo/gpu-0001 (run r1): failed",
        "gpu-remediation/demo/gpu-0002 (run r1): still working, no outcome at the end "
        "(waiting on check_breaker (attempt 2, after: timeout))",
        "gpu-remediation/demo/gpu-0003 (run r1): workflow task failed (NON_DETERMINISTIC_ERROR: x)",
    ]


def test_every_invariant_holds_on_a_quiet_run_and_each_is_named_once() -> None:
    results = check_all(facts([node("gpu-0001")], [incident("gpu-0001", 10, 50)]))
    assert [r.name for r in results] == [
        "incidents_lost",
        "duplicate_incidents",
        "reboots_per_decision",
        "resets_done_twice",
        "replacements_done_twice",
        "replacements_within_cap",
        "permits_leaked",
        "nodes_left_quarantined",
        "workflows_failed_or_stuck",
        "steps_within_budget",
        "actions_on_pinned_machine",
    ]
    assert all(r.holds for r in results)
