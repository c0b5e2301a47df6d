"""Reading ``all_reduce_perf``'s output and judging it for the NCCL burn-in check."""

from __future__ import annotations

import contextlib
import time
from datetime import UTC, datetime

import pytest

from gpu_remediation.admission_nccl import (
    MAX_OUTPUT_CHARS,
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


# ------------------------------------------- hostile output (issue 35: a Job's log is untrusted)

_DIGITS = "9" * 5000  # Python refuses to convert more than 4300 digits to an int
_ROW = "{size} {count} float sum -1 1.0 1.0 {busbw} {wrong} 1.0 1.0 1.0 {in_place}"
_FINE = {"size": "1024", "count": "256", "busbw": "999.00", "wrong": "0", "in_place": "0"}


@pytest.mark.parametrize("field", sorted(_FINE))
def test_a_row_with_a_5000_digit_field_is_ignored_not_an_error(field: str) -> None:
    hostile = _ROW.format(**{**_FINE, field: _DIGITS})
    run = parse_all_reduce(hostile + "\n" + all_reduce_output(480.0))
    assert len(run.rows) == 8
    assert (run.largest.size, run.largest.busbw_gbps) == (8 << 30, 480.0)
    with pytest.raises(NcclOutputError):
        parse_all_reduce(hostile)  # alone: no result row, the parser's one error


def test_digits_int_refuses_make_a_row_malformed_not_an_error() -> None:
    # str.isdigit() accepts superscripts; int() raises a ValueError on them.
    for field in ("size", "count", "wrong", "in_place"):
        with pytest.raises(NcclOutputError):
            parse_all_reduce(_ROW.format(**{**_FINE, field: "\u00b2"}))


def test_malformed_summary_lines_are_skipped_for_the_well_formed_ones() -> None:
    malformed = (
        f"# Out of bounds values : {_DIGITS} FAILED\n"
        "# Avg bus bandwidth : 1.2.3\n"
        f"# Avg bus bandwidth : {_DIGITS}.0\n"
    )
    run = parse_all_reduce(malformed + all_reduce_output(480.0))
    assert run.out_of_bounds == 0
    assert run.avg_bus_bandwidth_gbps == pytest.approx(270.0)
    run = parse_all_reduce(_ROW.format(**_FINE) + "\n" + malformed)
    assert (run.out_of_bounds, run.avg_bus_bandwidth_gbps) == (None, None)


@pytest.mark.parametrize(
    "line",
    [
        _ROW.format(**{**_FINE, "busbw": "1e99999"}),
        _ROW.format(**{**_FINE, "busbw": "nan(x)"}),
        "1 1 1 1 1 1 1 1 " + _DIGITS,
        " ".join(["1"] * 100_000),
        "\u00b2 " * 20,
        "#" + _DIGITS,
        f"# Out of bounds values : {_DIGITS}",
        "\x00\r\x0b\x0c\x1c\u2028" * 100,
    ],
    ids=lambda line: repr(line[:24]),
)
def test_no_value_error_but_the_parsers_own_escapes_for_any_line(line: str) -> None:
    with contextlib.suppress(NcclOutputError):
        parse_all_reduce(line)
    judge(0, line, 300.0, 8)  # a verdict, whatever the line


def _fill(unit: str, size: int) -> str:
    return (unit * (size // len(unit) + 1))[:size]


@pytest.mark.parametrize(
    "unit",
    [
        _ROW.format(**{**_FINE, "size": _DIGITS}) + "\n",
        _ROW.format(**_FINE) + "\n",
        "1 ",
        "1 1 1 1 1 1 1 1 1 1 1 1 1 1\n",
        "# Out of bounds values : " + _DIGITS + " OK\n",
        "#\n",
        "9",
    ],
    ids=["5000-digit rows", "rows", "one endless line", "short rows", "summaries", "#", "9"],
)
def test_a_1_mb_hostile_output_is_judged_well_under_a_second(unit: str) -> None:
    # A guard, not a benchmark (speed is benchmarked elsewhere, see
    # tests/gpu_remediation/hostile_inputs.py): the parser takes ~0.1 s here; a
    # super-linear one would take far longer than the generous bound.
    text = _fill(unit, 1 << 20)
    started = time.perf_counter()
    judge(0, text, 300.0, 8)
    assert time.perf_counter() - started < 2.0


def test_an_output_over_the_limit_is_read_from_its_tail() -> None:
    output = all_reduce_output(480.0)
    noise = _fill("NCCL INFO chatter\n", MAX_OUTPUT_CHARS)
    run = parse_all_reduce(_ROW.format(**{**_FINE, "busbw": "1.0"}) + "\n" + noise + output)
    assert len(run.rows) == 8  # the row before the tail is not read
    assert run.largest.busbw_gbps == 480.0
    assert judge(0, noise + output, 300.0, 8).passed


def test_a_row_the_limit_cuts_is_dropped_not_read_as_a_smaller_number() -> None:
    # Cut after its first "9", the row would read as size 9,999,999,999: the largest.
    cut_row = _ROW.format(**{**_FINE, "size": "99999999999", "busbw": "1.0"})
    output = all_reduce_output(480.0)
    padding = MAX_OUTPUT_CHARS + 1 - len(cut_row) - 1 - len(output)
    text = cut_row + "\n" + output + "#" * (padding - 1) + "\n"
    assert len(text) == MAX_OUTPUT_CHARS + 1
    run = parse_all_reduce(text)
    assert (len(run.rows), run.largest.size) == (8, 8 << 30)


def test_a_line_starting_exactly_at_the_limit_is_read_whole() -> None:
    output = all_reduce_output(480.0)
    text = "x\n" + output + "#" * (MAX_OUTPUT_CHARS - len(output) - 1) + "\n"
    assert len(text) == MAX_OUTPUT_CHARS + 2
    assert len(parse_all_reduce(text).rows) == 8
    assert len(parse_all_reduce(text.replace("x\n", "\n", 1)).rows) == 8  # unchanged: no cut


@pytest.mark.parametrize("figure", ["nan", "inf", "-inf", "NaN"])
def test_a_bandwidth_that_is_not_a_finite_figure_never_passes_the_floor(figure: str) -> None:
    row = f"    134217728      33554432     float     sum      -1   1000.0  134.22  {figure}      0"
    verdict = judge(0, row + "\n", floor_gbps=100.0, gpus=8)
    assert not verdict.passed
