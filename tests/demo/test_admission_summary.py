"""The admission part of the demo summary: counts by outcome, percentiles in simulated time."""

from __future__ import annotations

from datetime import UTC, datetime

from demo.admission_summary import admission_text, summarize_admissions
from demo.summary import duration_text
from gpu_remediation.admission_models import AdmissionOutcome, AdmissionResult

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def result(
    outcome: AdmissionOutcome, wait: float | None = None, **fields: object
) -> AdmissionResult:
    values: dict[str, object] = {
        "cluster": "c",
        "node": "n",
        "boot_id": "b",
        "trigger": "new_node",
        "first_boot": True,
        "stage": "closed",
        "outcome": outcome,
        "started_at": T0,
        "ready_to_schedulable_s": wait,
        **fields,
    }
    return AdmissionResult.model_validate(values)


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
    assert summary.model_dump(exclude={"by_arrival_group"}) == {
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


def test_the_dead_on_arrival_rate_is_per_pool_instance_type_and_zone_over_first_boots() -> None:
    p5 = {"node_pool": "h100", "instance_type": "p5.48xlarge", "zone": "us-west-2a"}
    p4 = {"node_pool": "a100", "instance_type": "p4d.24xlarge", "zone": "us-west-2b"}
    summary = summarize_admissions(
        [
            result(AdmissionOutcome.ADMITTED, 1.0, **p5),
            result(AdmissionOutcome.DEAD_ON_ARRIVAL, **p5),
            result(AdmissionOutcome.ADMITTED, 1.0, **p5),
            result(AdmissionOutcome.ADMITTED, 1.0, **p5, first_boot=False),  # a reboot
            result(AdmissionOutcome.BOOT_CHANGED, **p5),  # no verdict on that boot
            result(AdmissionOutcome.ADMITTED, 2.0, **p4),
        ],
        time_factor=1,
    )
    assert [
        (
            g.node_pool,
            g.instance_type,
            g.zone,
            g.arrivals,
            g.dead_on_arrival,
            g.dead_on_arrival_rate,
        )
        for g in summary.by_arrival_group
    ] == [
        ("a100", "p4d.24xlarge", "us-west-2b", 1, 0, 0.0),
        ("h100", "p5.48xlarge", "us-west-2a", 3, 1, 0.3333),
    ]
    assert admission_text(summary, duration_text).endswith(
        "; dead on arrival of first boots: h100/p5.48xlarge/us-west-2a 1/3"
    )
