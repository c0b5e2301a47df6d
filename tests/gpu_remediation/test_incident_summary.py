"""The one-line summary and the first-evidence details an incident is shown with."""

from __future__ import annotations

from gpu_remediation.incident_summary import (
    MAX_DETAIL_ITEMS,
    evidence_details,
    start_summary,
    summary_line,
)
from gpu_remediation.policy_loader import load_policy
from tests.gpu_remediation.evidence_factories import condition, xid


def test_the_summary_names_node_pool_fault_and_where_the_ladder_stands() -> None:
    assert summary_line("gpu-1", "h100", "gpu_fallen_off_bus", start_rung="reboot") == (
        "gpu-1 (pool h100): gpu_fallen_off_bus, ladder from reboot"
    )
    assert summary_line("gpu-1", "h100", "gpu_fallen_off_bus", rung="reboot") == (
        "gpu-1 (pool h100): gpu_fallen_off_bus, at reboot"
    )
    assert summary_line(
        "gpu-1", "h100", "gpu_fallen_off_bus", rung="reboot", outcome="repaired"
    ) == ("gpu-1 (pool h100): gpu_fallen_off_bus, repaired after reboot")


def test_an_unknown_pool_or_class_is_left_out_or_said_so() -> None:
    assert summary_line("gpu-1", None, None) == "gpu-1: unclassified"
    assert summary_line("gpu-1", None, "application", outcome="application_fault") == (
        "gpu-1: application, application_fault"
    )
    assert summary_line("gpu-1", None, "application", in_service=True) == (
        "gpu-1: application, node stays in service"
    )


def test_a_started_incident_is_summed_up_by_its_first_evidence() -> None:
    summary, details = start_summary("gpu-1", [xid(79, gpu=3)], load_policy(), pool="h100")
    assert summary == "gpu-1 (pool h100): gpu_fallen_off_bus, ladder from reboot"
    assert details.startswith("**First evidence**")
    assert "- Xid 79 on GPU 3 (kernel-log, 2026-01-01 12:00:00 UTC)" in details


def test_an_application_fault_starts_no_ladder() -> None:
    summary, _ = start_summary("gpu-1", [xid(13)], load_policy())
    assert summary == "gpu-1: application, node stays in service"


def test_long_evidence_is_cut_and_counted() -> None:
    many = [condition("Ready", "False", message="x" * 1000) for _ in range(MAX_DETAIL_ITEMS + 3)]
    details = evidence_details(many)
    assert details.count("\n- ") == MAX_DETAIL_ITEMS + 1
    assert "... and 3 more" in details
    assert "x" * 300 not in details
