"""The strict factor check's judge: what passes, what fails, what it refuses to judge."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from whatif.factor_check import (
    FactorCheck,
    FactorCheckError,
    Judged,
    html_section,
    judge,
    text_table,
)

DIGEST = "d1g35t"


def policy_row(**over: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "incidents": 400,
        "availability": 0.99900,
        "mttr_clock_p50_s": 3000.0,
        "outcomes": {"repaired": 250, "replaced": 100, "escalated": 50},
        "rung_attempts": {"reboot": 300, "replace": 100, "gpu_reset": 120},
        "nodes_replaced": 100,
        "replacements": 100,
        "reboots": 300,
        "resets": 120,
        "escalations": 50,
        "breaker_trips": 0,
        "jobs": {
            "runs_succeeded": 20000,
            "runs_failed": 40,
            "runs_failed_by_remediation": 10,
            "remediation_caused_failures": 30,
        },
        "policy_source": "policies/graded.yaml",
        "timeline": {"digest": DIGEST, "planned": 420},
        "settled": True,
    }
    row.update(over)
    return row


def run(
    factor: float,
    seed: int = 0,
    policies: dict[str, dict[str, Any]] | None = None,
    **rows: dict[str, Any],
) -> dict[str, Any]:
    """A bench.compare run result (the fields the judge reads); ``rows`` replace policies'."""
    if policies is None:
        policies = {"graded": policy_row(), "replace-always": policy_row(), **rows}
    return {
        "time_factor": factor,
        "seed": seed,
        "fleet": {"nodes": 1000, "pools": "h100,p5:no-reset", "multiplier": 10, "duration_s": 3e5},
        "digest": DIGEST,
        "comparison": {"policies": policies},
    }


def failing(check: FactorCheck) -> list[str]:
    return [f"{r.policy} {r.metric}" for r in check.failures]


def row_of(check: FactorCheck, policy: str, metric: str) -> Judged:
    return next(r for r in check.rows if r.policy == policy and r.metric == metric)


# What passes and what fails.


def test_two_identical_results_pass() -> None:
    check = judge(run(6000), run(1500))
    assert check.passed
    assert check.failures == []
    # Every count, availability and MTTR were judged, for every policy.
    metrics = {r.metric for r in check.rows if r.policy == "graded"}
    assert {"availability", "mttr_clock_p50_s", "incidents", "reboots", "escalations"} <= metrics
    assert {"outcomes.replaced", "rung_attempts.reboot", "jobs.runs_failed"} <= metrics
    assert "PASSED" in text_table(check)


def test_availability_two_hundredths_of_a_point_apart_fails() -> None:
    check = judge(run(6000), run(1500, graded=policy_row(availability=0.99880)))
    assert failing(check) == ["graded availability"]
    row = row_of(check, "graded", "availability")
    assert row.difference == pytest.approx(0.02)
    assert row.tolerance == 0.01


def test_availability_within_a_hundredth_of_a_point_passes() -> None:
    assert judge(run(6000), run(1500, graded=policy_row(availability=0.99891))).passed


def test_a_count_ten_percent_apart_fails() -> None:
    check = judge(run(6000), run(1500, graded=policy_row(reboots=330)))
    assert failing(check) == ["graded reboots"]
    row = row_of(check, "graded", "reboots")
    assert (row.first, row.second, row.difference) == (300, 330, 30)
    assert row.tolerance == pytest.approx(16.5)  # 5% of the larger


def test_a_count_within_five_percent_passes() -> None:
    assert judge(run(6000), run(1500, graded=policy_row(reboots=314))).passed


def test_job_runs_failed_and_outcomes_are_counts_too() -> None:
    jobs = {**policy_row()["jobs"], "runs_failed": 60}
    outcomes = {"repaired": 250, "replaced": 130, "escalated": 50}
    check = judge(run(6000), run(1500, graded=policy_row(jobs=jobs, outcomes=outcomes)))
    assert failing(check) == ["graded outcomes.replaced", "graded jobs.runs_failed"]


def test_an_outcome_absent_from_one_run_counts_as_zero_there() -> None:
    outcomes = {"repaired": 250, "replaced": 100, "escalated": 50, "no_fault_found": 6}
    check = judge(run(6000), run(1500, graded=policy_row(outcomes=outcomes)))
    row = row_of(check, "graded", "outcomes.no_fault_found")
    assert (row.first, row.second, row.passed) == (0, 6, False)


def test_a_small_count_passes_only_when_equal_and_says_so() -> None:
    check = judge(run(6000, graded=policy_row(breaker_trips=7)), run(1500))
    row = row_of(check, "graded", "breaker_trips")
    assert (row.first, row.second, row.passed) == (7, 0, False)
    assert row.note == "under 20: 5% is under one event, any difference fails"
    seven = policy_row(breaker_trips=7)
    equal = row_of(
        judge(run(6000, graded=seven), run(1500, graded=seven)), "graded", "breaker_trips"
    )
    assert equal.passed
    assert equal.note == "under 20: 5% is under one event, any difference fails"
    none = row_of(judge(run(6000), run(1500)), "graded", "breaker_trips")
    assert (none.passed, none.note) == (True, "none in either run")


def test_mttr_twenty_percent_apart_fails() -> None:
    check = judge(run(6000), run(1500, graded=policy_row(mttr_clock_p50_s=2400.0)))
    assert failing(check) == ["graded mttr_clock_p50_s"]
    row = row_of(check, "graded", "mttr_clock_p50_s")
    assert row.difference == 600
    assert row.tolerance == pytest.approx(300)  # 10% of the larger


def test_mttr_within_ten_percent_passes() -> None:
    assert judge(run(6000), run(1500, graded=policy_row(mttr_clock_p50_s=2750.0))).passed


def test_mttr_measured_in_one_run_only_fails() -> None:
    check = judge(run(6000), run(1500, graded=policy_row(mttr_clock_p50_s=None)))
    assert failing(check) == ["graded mttr_clock_p50_s"]


def test_the_failure_table_names_each_metric_both_values_the_difference_and_tolerance() -> None:
    check = judge(
        run(6000),
        run(1500, graded=policy_row(availability=0.99880, mttr_clock_p50_s=2400.0)),
    )
    text = text_table(check)
    assert text.splitlines()[0].split() == [
        "policy",
        "metric",
        "at",
        "6000",
        "at",
        "1500",
        "difference",
        "tolerance",
        "verdict",
        "note",
    ]
    line = next(x for x in text.splitlines() if "graded" in x and "availability" in x)
    assert line.split()[2:7] == ["99.9000%", "99.8800%", "0.0200", "pp", "0.0100"]
    assert "FAIL" in line
    line = next(x for x in text.splitlines() if "graded" in x and "mttr_clock_p50_s" in x)
    assert line.split()[2:] == ["3000", "s", "2400", "s", "600", "s", "300", "s", "FAIL"]
    assert text.splitlines()[-1].startswith("factor check FAILED")
    assert "graded availability, graded mttr_clock_p50_s" in text.splitlines()[-1]
    assert "FAILED" in html_section(check)


def test_the_mttr_split_separates_real_latency_from_simulated_work() -> None:
    # 600 s of work plus 0.5 real s of latency at factors 4000 and 1000.
    check = judge(
        run(4000, graded=policy_row(mttr_clock_p50_s=2600.0)),
        run(1000, graded=policy_row(mttr_clock_p50_s=1100.0)),
    )
    assert check.mttr_split("graded") == {
        "latency_real_s": 0.5,
        "work_sim_s": 600.0,
        "at_1x_s": 600.5,
    }


# What it refuses.


def test_factors_not_four_times_apart_are_refused() -> None:
    with pytest.raises(FactorCheckError, match="6000 and 3000 are 2x apart; the check needs 4x"):
        judge(run(6000), run(3000))


def test_one_factor_only_is_refused() -> None:
    with pytest.raises(FactorCheckError, match="one factor only: both runs at 6000"):
        judge(run(6000), run(6000))


def test_fewer_than_100_incidents_are_refused_saying_how_many() -> None:
    few = run(1500, graded=policy_row(incidents=99))
    with pytest.raises(FactorCheckError, match=r"too few incidents .*: graded 99 \(at least 100"):
        judge(run(6000), few)


def test_mismatched_seeds_are_refused() -> None:
    with pytest.raises(FactorCheckError, match="seeds differ"):
        judge(run(6000, seed=1), run(1500, seed=2))


def test_mismatched_fleets_are_refused_naming_the_difference() -> None:
    other = run(1500)
    other["fleet"]["nodes"] = 100
    with pytest.raises(FactorCheckError, match=r"fleets differ .*nodes 1000 vs 100"):
        judge(run(6000), other)


def test_a_different_fault_timeline_is_refused() -> None:
    other = run(1500)
    other["digest"] = "other"
    for row in other["comparison"]["policies"].values():
        row["timeline"] = {"digest": "other"}
    with pytest.raises(FactorCheckError, match="fault timelines differ"):
        judge(run(6000), other)


def test_different_policies_are_refused() -> None:
    with pytest.raises(FactorCheckError, match="policies differ"):
        judge(run(6000), run(1500, policies={"graded": policy_row()}))


def _without(doc: dict[str, Any], *path: str) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    at = doc
    for key in path[:-1]:
        at = at[key]
    del at[path[-1]]
    return doc


@pytest.mark.parametrize(
    ("doc", "why"),
    [
        pytest.param(run(1500)["comparison"], "no 'time_factor'", id="remediate-compare-json"),
        pytest.param({"factor_check": {}, "runs": {}}, "no 'time_factor'", id="factor-check-out"),
        pytest.param([run(1500)], "a list, not an object", id="a-list"),
        pytest.param({**run(1500), "time_factor": "1500"}, "is a str, not int or float", id="str"),
        pytest.param(
            _without(run(1500), "comparison", "policies", "graded", "mttr_clock_p50_s"),
            "policy 'graded'.*no 'mttr_clock_p50_s'",
            id="no-clock-mttr",
        ),
        pytest.param({**run(1500), "comparison": {"policies": {}}}, "no policies", id="empty"),
    ],
)
def test_a_results_file_of_another_shape_is_refused(doc: object, why: str) -> None:
    with pytest.raises(FactorCheckError, match=f"not a bench.compare run result.*{why}"):
        judge(run(6000), doc)


def test_a_result_written_before_the_seed_was_recorded_reads_as_seed_0_with_its_fleet() -> None:
    legacy = {k: v for k, v in run(1500).items() if k not in ("seed", "fleet")} | {
        "nodes": 1000,
        "days": 3,
        "multiplier": 10,
        "new_node_fault_probability": 0,
        "reboot_fault_probability": 0,
    }
    assert judge(legacy, copy.deepcopy(legacy) | {"time_factor": 6000}).passed
    with pytest.raises(FactorCheckError, match="seeds differ"):
        judge(run(6000, seed=5), legacy)


# The noise option.


def test_noise_widens_a_tolerance_only_to_the_measured_noise() -> None:
    # MTTR 20% apart fails against 10%; a repeat at 6000 measured 25% (750 s) of noise.
    first, second = run(6000), run(1500, graded=policy_row(mttr_clock_p50_s=2400.0))
    noise = run(6000, graded=policy_row(mttr_clock_p50_s=3750.0))
    check = judge(first, second, noise)
    assert check.passed
    row = row_of(check, "graded", "mttr_clock_p50_s")
    assert (row.tolerance, row.noise, row.allowed) == (pytest.approx(300), 750, 750)
    assert row.note == "tolerance widened to the measured noise"
    # 30% apart is beyond the noise measured: it fails.
    wider = run(1500, graded=policy_row(mttr_clock_p50_s=2000.0))
    assert failing(judge(first, wider, noise)) == ["graded mttr_clock_p50_s"]
    assert "noise" in text_table(check).splitlines()[0]


def test_noise_below_a_tolerance_leaves_it_as_it_is() -> None:
    second = run(1500, graded=policy_row(reboots=330))
    noise = run(6000, graded=policy_row(reboots=305))  # 5 events of noise, under 16.5
    check = judge(run(6000), second, noise)
    row = row_of(check, "graded", "reboots")
    assert (row.noise, row.allowed, row.passed, row.note) == (5, pytest.approx(16.5), False, "")


def test_noise_is_measured_at_the_noise_runs_own_factor() -> None:
    # The repeat is at 1500: its noise is against the 1500 run, not the 6000 one.
    second = run(1500, graded=policy_row(mttr_clock_p50_s=2400.0))
    noise = run(1500, graded=policy_row(mttr_clock_p50_s=2500.0))  # 100 s of noise
    check = judge(run(6000), second, noise)
    assert row_of(check, "graded", "mttr_clock_p50_s").noise == 100
    assert not check.passed


def test_several_noise_runs_widen_a_tolerance_to_the_largest_noise_measured() -> None:
    # Clock-free: two repeats at step 15 on grids moved by 1/3 and 2/3 of a step.
    def clock_free(step: float, phase: float = 0.0, caused: int = 30) -> dict[str, Any]:
        jobs = policy_row()["jobs"] | {"remediation_caused_failures": caused}
        return run(step, graded=policy_row(jobs=jobs)) | {
            "clock": "server",
            "step": step,
            "step_phase": phase,
        }

    first, second = clock_free(15), clock_free(3.75, caused=36)
    noise = [clock_free(15, 1 / 3, caused=33), clock_free(15, 2 / 3, caused=24)]
    check = judge(first, second, *noise)
    row = row_of(check, "graded", "jobs.remediation_caused_failures")
    assert (row.difference, row.noise, row.allowed, row.passed) == (6, 6, 6, True)
    assert check.noise_phases == [pytest.approx(1 / 3), pytest.approx(2 / 3)]
    assert check.as_json()["noise_runs"] == 2
    assert "15 (2 runs, step grid moved by 0.33 and 0.67 of a step)" in text_table(check)
    # One repeat that happened to land close measures less noise: 6 events then fail.
    assert failing(judge(first, second, noise[0])) == ["graded jobs.remediation_caused_failures"]


def test_noise_runs_at_two_factors_are_refused() -> None:
    with pytest.raises(FactorCheckError, match="noise runs at two factors"):
        judge(run(6000), run(1500), run(6000), run(1500))


def test_a_step_phase_outside_a_step_is_refused() -> None:
    with pytest.raises(FactorCheckError, match="step_phase 1 is not in"):
        judge(run(6000), run(1500), run(6000) | {"step_phase": 1.0})


def test_a_noise_run_at_a_third_factor_is_refused() -> None:
    with pytest.raises(FactorCheckError, match="noise run is at factor 3000"):
        judge(run(6000), run(1500), run(3000))


def test_a_noise_run_with_too_few_incidents_is_refused() -> None:
    noise = run(6000, graded=policy_row(incidents=40))
    with pytest.raises(
        FactorCheckError, match="too few incidents to judge in the noise run: graded 40"
    ):
        judge(run(6000), run(1500), noise)
