"""NCCL's all-reduce as a burn-in check: read ``all_reduce_perf``'s output, judge it.

``all_reduce_perf`` (NVIDIA nccl-tests) prints one row per message size:
size, count, type, redop, root, then time / algbw / busbw / #wrong out of
place and the same in place; then ``# Out of bounds values : N OK|FAILED``
and ``# Avg bus bandwidth : X``. The check judges the out-of-place bus
bandwidth at the largest size (small sizes measure latency, not the links)
and fails on any wrong result. No Temporal or Kubernetes here: the activity
(``activities.admission_nccl``) and the tests share it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from gpu_remediation.models import ConditionEvidence

NCCL_CONDITION = "NcclAllReduceProblem"
"""The condition type of the check's evidence (the classifier calls it unknown: diagnose)."""
SOURCE = "node-admission"
_OUT_OF_BOUNDS = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)\s+(OK|FAILED)", re.M)
_AVG_BUSBW = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([0-9.]+)", re.M)


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


def _count(field: str) -> int:
    return int(field) if field.isdigit() else 0  # "N/A": results were not checked


def parse_all_reduce(text: str) -> AllReduceRun:
    """Read ``all_reduce_perf``'s output.

    Raises:
        NcclOutputError: No result row in the output.
    """
    rows: list[AllReduceRow] = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 9 or line.lstrip().startswith("#"):
            continue
        if not (fields[0].isdigit() and fields[1].isdigit()):
            continue
        try:
            busbw = float(fields[7])
        except ValueError:
            continue
        wrong = _count(fields[8]) + (_count(fields[12]) if len(fields) >= 13 else 0)
        rows.append(AllReduceRow(size=int(fields[0]), busbw_gbps=busbw, wrong=wrong))
    if not rows:
        raise NcclOutputError(f"no all_reduce_perf result rows in: {text[-300:]!r}")
    bounds = _OUT_OF_BOUNDS.search(text)
    average = _AVG_BUSBW.search(text)
    return AllReduceRun(
        rows=tuple(rows),
        out_of_bounds=int(bounds.group(1)) if bounds else None,
        avg_bus_bandwidth_gbps=float(average.group(1)) if average else None,
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
        tail = " ".join(output.strip().splitlines()[-3:])[:400]
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
