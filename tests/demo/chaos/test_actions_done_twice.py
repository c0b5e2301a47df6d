"""Reboots, resets and replacements: exactly as many as were decided, within the cap."""

from __future__ import annotations

from demo.chaos.facts import ActivityRecord
from demo.chaos.invariants import (
    reboots_per_decision,
    replacements_done_twice,
    replacements_within_cap,
    resets_done_twice,
)
from gpu_remediation.ids import Activities
from tests.demo.chaos.builders import activity, at, facts, incident, node


def _reboot(start: float, end: float, before: str, after: str) -> list[ActivityRecord]:
    return [
        activity(
            Activities.REBOOT_NODE,
            start,
            end,
            node="gpu-0001",
            boot_id_before=before,
            result={"boot_id_after": after, "rebooted_by_this_call": True},
        )
    ]


def test_one_reboot_decision_and_one_new_boot_holds() -> None:
    result = reboots_per_decision(
        facts(
            [node("gpu-0001", boots=[(0, "b0"), (50, "b1")])],
            [incident("gpu-0001", 10, 100, activities=_reboot(40, 60, "b0", "b1"))],
            ec2_reboot_requests={"gpu-0001": 1},
        )
    )
    assert result.holds
    assert result.checked == ("1 reboot decision(s), 1 EC2 reboot request(s), 1 new boot(s)")


def test_a_decision_whose_node_booted_twice_is_a_double_reboot_naming_the_incident() -> None:
    result = reboots_per_decision(
        facts(
            [node("gpu-0001", boots=[(0, "b0"), (50, "b1"), (70, "b2")])],
            [incident("gpu-0001", 10, 100, activities=_reboot(40, 80, "b0", "b2"))],
        )
    )
    assert any(
        "gpu-remediation/demo/gpu-0001 (run r1) made one reboot decision and the node booted "
        "2 time(s)" in v
        for v in result.violations
    )


def test_a_new_boot_no_decision_asked_for_is_a_violation() -> None:
    result = reboots_per_decision(
        facts([node("gpu-0001", boots=[(0, "b0"), (50, "b1")])], [incident("gpu-0001", 10, 100)])
    )
    (violation,) = result.violations
    assert "booted b1" in violation
    assert "with no reboot decision" in violation


def test_a_decision_that_gave_up_after_two_boots_is_a_double_reboot() -> None:
    gave_up = activity(
        Activities.REBOOT_NODE, 40, 90, status="failed", node="gpu-0001", boot_id_before="b0"
    )
    result = reboots_per_decision(
        facts(
            [node("gpu-0001", boots=[(0, "b0"), (50, "b1"), (70, "b2")])],
            [incident("gpu-0001", 10, 100, activities=[gave_up])],
        )
    )
    assert any("rebooted 2 times for one decision" in v for v in result.violations)


def _resets(count: int) -> list[ActivityRecord]:
    return [activity(Activities.RESET_GPUS, 20 + i, 30 + i, node="gpu-0001") for i in range(count)]


def test_as_many_reset_commands_as_decisions_holds() -> None:
    result = resets_done_twice(
        facts(
            [node("gpu-0001")],
            [incident("gpu-0001", 10, 100, activities=_resets(2))],
            gpu_resets_sent={"gpu-0001": 2},
        )
    )
    assert result.holds


def test_more_reset_commands_than_decisions_is_a_reset_done_twice_naming_the_incident() -> None:
    result = resets_done_twice(
        facts(
            [node("gpu-0001")],
            [incident("gpu-0001", 10, 100, activities=_resets(1))],
            gpu_resets_sent={"gpu-0001": 2},
        )
    )
    (violation,) = result.violations
    assert violation.startswith("gpu-0001: 2 GPU reset command(s) sent for 1 reset decision(s)")
    assert "gpu-remediation/demo/gpu-0001 (run r1)" in violation


def _replace(start: float, *, already_gone: bool = False) -> ActivityRecord:
    return activity(
        Activities.DELETE_NODE_CLAIM,
        start,
        start + 1,
        node="gpu-0001",
        result={"node_claim": "gpu-0001", "already_gone": already_gone},
    )


def test_one_replace_decision_and_one_claim_deletion_holds() -> None:
    result = replacements_done_twice(
        facts(
            [node("gpu-0001", claim_deleted_at=[at(31)])],
            [incident("gpu-0001", 10, 100, activities=[_replace(30)])],
        )
    )
    assert result.holds
    assert result.checked == "1 replace decision(s), 1 NodeClaim(s) deleted"


def test_two_decisions_that_each_deleted_the_claim_are_a_replacement_done_twice() -> None:
    runs = [
        incident("gpu-0001", 10, 100, run_id="a", activities=[_replace(30)]),
        incident("gpu-0001", 110, 200, run_id="b", activities=[_replace(120)]),
    ]
    result = replacements_done_twice(facts([node("gpu-0001", claim_deleted_at=[at(31)])], runs))
    (violation,) = result.violations
    assert violation.startswith("gpu-0001: replaced by 2 decisions")


def test_a_retried_decision_that_found_the_claim_gone_is_not_a_second_replacement() -> None:
    runs = [
        incident(
            "gpu-0001",
            10,
            100,
            activities=[_replace(30), _replace(40, already_gone=True)],
        )
    ]
    result = replacements_done_twice(facts([node("gpu-0001", claim_deleted_at=[at(31)])], runs))
    assert result.holds


def test_a_claim_deleted_with_no_decision_is_a_violation() -> None:
    result = replacements_done_twice(facts([node("gpu-0001", claim_deleted_at=[at(31)])], []))
    (violation,) = result.violations
    assert "deleted with no replace decision" in violation


def test_more_replacements_in_flight_than_the_cap_is_a_violation() -> None:
    assert replacements_within_cap(facts([], [], max_replacements_in_flight=2)).holds
    result = replacements_within_cap(facts([], [], max_replacements_in_flight=3))
    assert result.violations == ["3 replacements were in flight at once, above the cap of 2"]
