"""NCCL's all-reduce as a burn-in check: read ``all_reduce_perf``'s output, judge it.

``all_reduce_perf`` (NVIDIA nccl-tests) prints one row per message size:
size, count, type, redop, root, then time / algbw / busbw / #wrong out of
place and the same in place; then ``# Out of bounds values : N OK|FAILED``
and ``# Avg bus bandwidth : X``. The check judges the out-of-place bus
bandwidth at the largest size (small sizes measure latency, not the links)
and fails on any wrong result. No Temporal or Kubernetes here: the activity
(``activities.admission_nccl``) and the tests share it.

The output comes from a Job on the node, so it is untrusted (issue 35): the
parser is total and linear. It reads at most the last ``MAX_OUTPUT_CHARS`` of
the output, reads no number field over ``MAX_NUMBER_CHARS`` (Python refuses to
convert integers of over 4300 digits, and the conversion is quadratic), and
skips malformed rows; its only error is ``NcclOutputError`` (no result row).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime

from gpu_remediation.models import ConditionEvidence

NCCL_CONDITION = "NcclAllReduceProblem"
"""The condition type of the check's evidence (the classifier calls it unknown: diagnose)."""
SOURCE = "node-admission"

MAX_OUTPUT_CHARS = 4 * 1024 * 1024
"""Most characters of ``all_reduce_perf``'s output read (4 MiB): the last ones.

A run prints a few kilobytes (a header, a row per size, two summary lines);
4 MiB leaves ample room for NCCL's own logging (``NCCL_DEBUG``) in an image.
The rows and summary lines come last, so a longer output is cut at its
start: the kept tail begins at a line start (a line the cut splits is
dropped whole, never read as a shorter number), and the verdict is read from
it. Reading it all would cost time and memory in proportion to what the
node chose to print.
"""
MAX_NUMBER_CHARS = 32
"""Longest number field read; a longer one makes its row (or summary line) malformed.

The tool prints 64-bit counts (at most 20 digits) and ``%.2f`` figures, so
32 characters fit every real field.
"""
# ASCII digits only: the tool prints no others, and str.isdigit() accepts some
# (superscripts) that int() refuses with a ValueError.
_OUT_OF_BOUNDS = re.compile(r"^#\s*Out of bounds values\s*:\s*([0-9]+)\s+(OK|FAILED)", re.M)
_AVG_BUSBW = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([0-9.]+)", re.M)
_ROW_FIELDS = 13
"""Fields a row is read up to: size, count, type, redop, root, 4 out of place, 4 in place."""


class NcclOutputError(ValueError):
    """The output has no result rows (the tool did not run, or printed something else)."""


@dataclass(frozen=True, slots=True)
class AllReduceRow:
    """One message size: its out-of-place bus bandwidth and wrong-result counts."""

    size: int
    busbw_gbps: float
    wrong: int
    """Wrong results out of place plus in place (0 when the tool did not check: N/A)."""


@dataclass(frozen=True, slots=True)
class AllReduceRun:
    """What ``all_reduce_perf`` printed."""

    rows: tuple[AllReduceRow, ...]
    out_of_bounds: int | None
    avg_bus_bandwidth_gbps: float | None

    @property
    def largest(self) -> AllReduceRow:
        """The row of the largest size."""
        return max(self.rows, key=lambda row: row.size)


def _integer(field: str) -> int | None:
    """``field`` as a count, or None when it is not ASCII digits or too long to be one."""
    if len(field) > MAX_NUMBER_CHARS or not (field.isascii() and field.isdigit()):
        return None
    return int(field)


def _decimal(field: str) -> float | None:
    """``field`` as a figure, or None when it is not a number or too long to be one."""
    if len(field) > MAX_NUMBER_CHARS:
        return None
    try:
        value = float(field)
    except ValueError:
        return None
    # "nan" and "inf" parse as floats, and nan < floor is False: a row claiming
    # them would pass the bandwidth check. nccl-tests prints finite figures only.
    return value if math.isfinite(value) else None


def _wrong(field: str) -> int | None:
    """A #wrong field: its count; 0 for "N/A" (not checked); None when malformed.

    Digits that are no count (too many, or not ASCII) make the row malformed
    rather than count as unchecked.
    """
    count = _integer(field)
    if count is not None:
        return count
    return None if field.isdigit() else 0


def _tail(text: str) -> str:
    """The last ``MAX_OUTPUT_CHARS`` of ``text``, from a line start (see the constant)."""
    if len(text) <= MAX_OUTPUT_CHARS:
        return text
    start = len(text) - MAX_OUTPUT_CHARS
    if text[start - 1] != "\n":
        newline = text.find("\n", start)
        start = len(text) if newline < 0 else newline + 1
    return text[start:]


def _row(line: str) -> AllReduceRow | None:
    """One result row, or None when ``line`` is not a well-formed one."""
    # Bounded split: a line of a million words costs no more than its first fields.
    fields = line.split(None, _ROW_FIELDS)
    if len(fields) < 9:
        return None
    size = _integer(fields[0])  # comment lines ("#") fail here too
    if size is None or _integer(fields[1]) is None:
        return None
    busbw = _decimal(fields[7])
    wrong = _wrong(fields[8])
    wrong_in_place = _wrong(fields[12]) if len(fields) >= _ROW_FIELDS else 0
    if busbw is None or wrong is None or wrong_in_place is None:
        return None
    return AllReduceRow(size=size, busbw_gbps=busbw, wrong=wrong + wrong_in_place)


def parse_all_reduce(text: str) -> AllReduceRun:
    """Read ``all_reduce_perf``'s output in linear time.

    Only the last ``MAX_OUTPUT_CHARS`` characters are read; malformed rows and
    summary lines (a number field over ``MAX_NUMBER_CHARS``, say) are skipped.

    Raises:
        NcclOutputError: No result row in the output (the only error raised).
    """
    text = _tail(text)
    rows = [row for line in text.splitlines() if (row := _row(line)) is not None]
    if not rows:
        raise NcclOutputError(f"no all_reduce_perf result rows in: {text[-300:]!r}")
    bounds = (_integer(m.group(1)) for m in _OUT_OF_BOUNDS.finditer(text))
    averages = (_decimal(m.group(1)) for m in _AVG_BUSBW.finditer(text))
    return AllReduceRun(
        rows=tuple(rows),
        out_of_bounds=next((n for n in bounds if n is not None), None),
        avg_bus_bandwidth_gbps=next((x for x in averages if x is not None), None),
    )


@dataclass(frozen=True, slots=True)
class Verdict:
    """The check's verdict on one run."""

    passed: bool
    summary: str
    reason: str = ""
    """``WrongResults``, ``BusBandwidthLow``, ``AllReduceFailed``, ``NoGpuAllocatable``;
    empty when passed."""
    bus_bandwidth_gbps: float | None = None
    """Out-of-place bus bandwidth at the largest size, when the output had rows."""


def judge(exit_code: int, output: str, floor_gbps: float, gpus: int) -> Verdict:
    """Pass when the tool exited 0, no result was wrong and the bandwidth is at the floor."""
    try:
        run = parse_all_reduce(output)
    except NcclOutputError:
        # From the read tail: splitting a huge output's every line for three would not be.
        tail = " ".join(_tail(output).strip().splitlines()[-3:])[:400]
        summary = f"all_reduce_perf on {gpus} GPUs exited {exit_code} without results: {tail}"
        return Verdict(False, summary, "AllReduceFailed")
    wrong = sum(row.wrong for row in run.rows) + (run.out_of_bounds or 0)
    top = run.largest
    figures = f"busbw {top.busbw_gbps:.1f} GB/s at {top.size} B on {gpus} GPUs"
    if wrong:
        verdict = Verdict(False, f"{wrong} wrong all-reduce result(s); {figures}", "WrongResults")
    elif exit_code != 0:
        verdict = Verdict(
            False, f"all_reduce_perf exited {exit_code}; {figures}", "AllReduceFailed"
        )
    elif top.busbw_gbps < floor_gbps:
        verdict = Verdict(False, f"{figures}, under the floor of {floor_gbps:g}", "BusBandwidthLow")
    else:
        verdict = Verdict(True, f"{figures} (floor {floor_gbps:g})")
    return Verdict(verdict.passed, verdict.summary, verdict.reason, top.busbw_gbps)


def nccl_evidence(verdict: Verdict, observed_at: datetime) -> ConditionEvidence:
    """The failed check as evidence for the node's incident."""
    return ConditionEvidence(
        observed_at=observed_at,
        source=SOURCE,
        type=NCCL_CONDITION,
        status="True",
        reason=verdict.reason,
        message=f"burn-in nccl: {verdict.summary}"[:4096],
    )
