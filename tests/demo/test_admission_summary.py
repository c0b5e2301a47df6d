"""The admission part of the demo summary: counts by outcome, percentiles in simulated time."""

from __future__ import annotations

from datetime import UTC, datetime

from demo.admission_summary import admission_text, summarize_admissions
from demo.summary import duration_text
from gpu_remediation.admission_models import AdmissionOutcome, AdmissionResult

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def result(outcome: AdmissionOutcome, wait: float | None = None) -> AdmissionResult:
    return AdmissionResult(
        cluster="c",
        node="n",
        boot_id="b",
        trigger="new_node",
        first_boot=True,
        stage="closed",
        outcome=outcome,
        started_at=T0,
        ready_to_schedulable_s=wait,
    )


def test_admitted_doa_and_failures_are_counted_and_waits_scaled_to_simulated_time() -> None:
    summary = summarize_admissions(
        [
            result(AdmissionOutcome.ADMITTED, 1.0),
            result(AdmissionOutcome.ADMITTED, 3.0),
            result(AdmissionOutcome.OVERRIDDEN, 2.0),
            result(AdmissionOutcome.DEAD_ON_ARRIVAL),
            result(AdmissionOutcome.BURN_IN_FAILED),
            result(AdmissionOutcome.BOOT_CHANGED),
        ],
        time_factor=60,
        running=1,
    )
    assert summary.model_dump() == {
        "nodes_admitted": 3,
        "dead_on_arrival": 1,
        "burn_in_failures": 2,
        "ready_to_schedulable_p50_s": 120.0,
        "ready_to_schedulable_p95_s": 174.0,
        "running": 1,
    }
    assert admission_text(summary, duration_text).startswith(
        "3 admitted after burn-in, 1 dead on arrival caught, 2 burn-in failures"
    )


def test_no_admissions_give_zero_counts_and_no_percentiles() -> None:
    summary = summarize_admissions([], time_factor=10)
    assert summary.nodes_admitted == 0
    assert summary.ready_to_schedulable_p50_s is None
