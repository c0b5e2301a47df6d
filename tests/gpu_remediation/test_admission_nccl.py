"""Reading ``all_reduce_perf``'s output and judging it for the NCCL burn-in check."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpu_remediation.admission_nccl import (
    NCCL_CONDITION,
    NcclOutputError,
    judge,
    nccl_evidence,
    parse_all_reduce,
)
from gpu_remediation.classifier import classify
from gpu_remediation.models import FaultClass
from gpu_remediation.policy_loader import load_policy
from tests.gpu_remediation.nccl_outputs import NCCL_ERROR, all_reduce_output


def test_the_rows_the_largest_size_and_the_summary_lines_are_read() -> None:
    run = parse_all_reduce(all_reduce_output(480.0))
    assert len(run.rows) == 8
    assert (run.largest.size, run.largest.busbw_gbps) == (8 << 30, 480.0)
    assert run.out_of_bounds == 0
    assert run.avg_bus_bandwidth_gbps == pytest.approx(270.0)


def test_a_healthy_run_at_the_floor_passes_with_its_figures() -> None:
    verdict = judge(0, all_reduce_output(480.0), 300.0, 8)
    assert verdict.passed
    assert verdict.bus_bandwidth_gbps == 480.0
    assert "busbw 480.0 GB/s at 8589934592 B on 8 GPUs" in verdict.summary


def test_a_bandwidth_under_the_floor_fails_even_when_the_average_looks_fine() -> None:
    verdict = judge(0, all_reduce_output(120.0), 300.0, 8)
    assert (verdict.passed, verdict.reason) == (False, "BusBandwidthLow")
    assert "under the floor of 300" in verdict.summary


def test_wrong_results_fail_whatever_the_bandwidth() -> None:
    verdict = judge(0, all_reduce_output(480.0, wrong=3), 300.0, 8)
    assert (verdict.passed, verdict.reason) == (False, "WrongResults")
    assert verdict.summary.startswith("6 wrong")  # the row's count plus the summary line's


def test_a_run_that_died_without_results_fails_with_the_tools_last_words() -> None:
    with pytest.raises(NcclOutputError):
        parse_all_reduce(NCCL_ERROR)
    verdict = judge(1, NCCL_ERROR, 300.0, 8)
    assert (verdict.passed, verdict.reason) == (False, "AllReduceFailed")
    assert "unhandled cuda error" in verdict.summary
    assert verdict.bus_bandwidth_gbps is None


def test_the_evidence_is_a_problem_the_incident_quarantines_and_diagnoses() -> None:
    verdict = judge(0, all_reduce_output(90.0), 300.0, 8)
    evidence = nccl_evidence(verdict, datetime.now(UTC))
    assert (evidence.type, evidence.status, evidence.reason) == (
        NCCL_CONDITION,
        "True",
        "BusBandwidthLow",
    )
    assert classify([evidence], load_policy()).fault_class is FaultClass.UNKNOWN
