"""The EFA loopback's report (host command ``efa_loopback``) -> a verdict per device.

The host script (``gpu_remediation.host_command.EFA_LOOPBACK_SCRIPT``) runs
libfabric's ``fi_pingpong`` once per EFA device, a server and a client to
localhost over the device, and writes its own lines around each run, all
starting ``gpu-remediation-efa:``::

    gpu-remediation-efa: device rdmap79s0
    gpu-remediation-efa: before retrans_timeout_events 12
    gpu-remediation-efa: before rx_drops 0
    bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec
    1m      10k     =10k     19g         1.38s  15201.72      68.98       0.01
    gpu-remediation-efa: exit 0
    gpu-remediation-efa: after retrans_timeout_events 12
    gpu-remediation-efa: after rx_drops 0

The table is ``fi_pingpong``'s own (``show_perf`` in libfabric's
``util/pingpong.c``): sizes in binary units (``1m``), counts in decimal ones
(``10k``; plain integers in newer fabtests), and the acknowledgement column
``=N`` when every message was acknowledged, ``+N`` when N were not, ``-N``
when N more came back. ``MB/sec`` is bytes per microsecond (10^6 B/s).

A device fails when its client did not exit 0 (124: ``timeout`` cut it),
printed no result row, lost messages, when a watched counter rose by more than
``max_counter_increase`` during the run, or when, on a node with three devices
or more, its throughput is below ``min_bandwidth_fraction`` of their median
(a device against its identical siblings: no public single-node floor exists).

The output comes from the node, so it is untrusted (issue 35): the parser is
total and linear in its size (one pass over the lines, every field bounded),
keeps at most ``MAX_DEVICES`` devices and a few messages each, and never
raises on garbage; a report it cannot read is a failed run, never a pass.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from datetime import datetime

from gpu_remediation.contracts import EfaLoopbackResult
from gpu_remediation.host_command import EFA_COUNTERS, EFA_LOOPBACK_TIMEOUT_S, EFA_REPORT
from gpu_remediation.models import EfaEvidence
from gpu_remediation.tool_outputs.common import MAX_FAILURES, MAX_SUMMARY, truncate

__all__ = [
    "DeviceRun",
    "PingpongRow",
    "judge_efa_loopback",
    "parse_efa_loopback",
    "parse_pingpong_row",
]

SOURCE = "efa-loopback"
MAX_DEVICES = 256
"""Devices read at most (a p5 has 32); a report naming more is cut, the rest unjudged."""
MAX_LINE_CHARS = 512
"""A longer line is not a row or a report line of ours (``show_perf`` lines are ~80)."""
MAX_FIELD_CHARS = 32
"""Longest field read as a number; conversion of a longer one is refused, not tried."""
MAX_MESSAGES = 3
"""Other lines kept per device (fi_pingpong's errors), for the summary."""
MAX_ROWS = 64
"""Result rows kept per device: ``-S all`` prints about 45 sizes; the script asks for one."""
NOT_FOUND_EXIT = 127
"""``timeout``'s exit when it cannot find the program: the tool is not installed."""
TIMED_OUT_EXIT = 124
"""``timeout``'s exit when it stopped the program."""

_DEVICE_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_SIZE = re.compile(r"([0-9]{1,12})(?:\.([0-9]))?([kmg]?)")
_COUNT = re.compile(r"([0-9]{1,19})([kmb]?)")
_DECIMAL = re.compile(r"[0-9]{1,20}(?:\.[0-9]{1,6})?")
_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
_COUNT_UNITS = {"": 1, "k": 1_000, "m": 1_000_000, "b": 1_000_000_000}
_ROW_FIELDS = 8
"""bytes, #sent, #ack, total, time, MB/sec, usec/xfer, Mxfers/sec."""


@dataclass(frozen=True, slots=True)
class PingpongRow:
    """One message size of ``fi_pingpong``'s table."""

    size: int
    sent: int
    unacknowledged: int
    """Messages sent but not acknowledged (negative: more acknowledgements than sends)."""
    mb_per_s: float


@dataclass(slots=True)
class DeviceRun:
    """One device's run as the report tells it."""

    device: str
    exit_code: int | None = None
    rows: list[PingpongRow] = field(default_factory=list)
    before: dict[str, int | None] = field(default_factory=dict)
    after: dict[str, int | None] = field(default_factory=dict)
    messages: list[str] = field(default_factory=list)


def _size(text: str) -> int | None:
    match = _SIZE.fullmatch(text)
    if match is None:
        return None
    whole, tenth, unit = match.groups()
    base = _SIZE_UNITS[unit]
    return int(whole) * base + (int(tenth) * base) // 10 if tenth else int(whole) * base


def _count(text: str) -> int | None:
    match = _COUNT.fullmatch(text)
    return int(match.group(1)) * _COUNT_UNITS[match.group(2)] if match else None


def _decimal(text: str) -> float | None:
    return float(text) if _DECIMAL.fullmatch(text) else None


def parse_pingpong_row(line: str) -> PingpongRow | None:
    """A row of ``fi_pingpong``'s table, or None for any other line (header, error, noise)."""
    if len(line) > MAX_LINE_CHARS:
        return None
    fields = line.split()
    if len(fields) != _ROW_FIELDS or any(len(f) > MAX_FIELD_CHARS for f in fields):
        return None
    size, sent = _size(fields[0]), _count(fields[1])
    ack_sign, ack_count = fields[2][:1], _count(fields[2].lstrip("=+-"))
    mb_per_s = _decimal(fields[5])
    if size is None or sent is None or ack_count is None or mb_per_s is None:
        return None
    if not fields[4].endswith("s") or _decimal(fields[4][:-1]) is None:
        return None
    if ack_sign == "=":
        unacknowledged = 0
    elif ack_sign == "+":
        unacknowledged = ack_count
    elif ack_sign == "-":
        unacknowledged = -ack_count
    else:  # a plain count: how many were acknowledged
        unacknowledged = sent - ack_count
    return PingpongRow(size, sent, unacknowledged, mb_per_s)


def parse_efa_loopback(text: str) -> list[DeviceRun]:
    """The devices of an ``efa_loopback`` report, in the order the host ran them.

    Lines before the first device, and devices past ``MAX_DEVICES``, are ignored.
    """
    runs: list[DeviceRun] = []
    current: DeviceRun | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith(EFA_REPORT) and len(line) <= MAX_LINE_CHARS:
            words = line[len(EFA_REPORT) :].split()
            if len(words) == 2 and words[0] == "device":
                if len(runs) >= MAX_DEVICES:
                    current = None
                    continue
                name = words[1] if _DEVICE_NAME.fullmatch(words[1]) else "unnamed"
                current = DeviceRun(device=name)
                runs.append(current)
            elif current is not None:
                _report_line(current, words)
            continue
        if current is None or not line:
            continue
        row = parse_pingpong_row(line)
        if row is not None:
            if len(current.rows) < MAX_ROWS:
                current.rows.append(row)
        elif len(current.messages) < MAX_MESSAGES and not line.startswith("bytes"):
            current.messages.append(truncate(line[:MAX_LINE_CHARS], 200))
    return runs


def _report_line(run: DeviceRun, words: list[str]) -> None:
    """``exit N``, ``before <counter> [N]`` or ``after <counter> [N]``; others are ignored."""
    if len(words) == 2 and words[0] == "exit":
        code = _count(words[1]) if len(words[1]) <= 3 else None
        run.exit_code = code if code is not None and code <= 255 else None
    elif words and words[0] in ("before", "after") and len(words) in (2, 3):
        if words[1] not in EFA_COUNTERS:
            return
        value = words[2] if len(words) == 3 else ""
        number = int(value) if value.isascii() and value.isdigit() and len(value) <= 20 else None
        (run.before if words[0] == "before" else run.after)[words[1]] = number


def judge_efa_loopback(
    text: str,
    *,
    max_counter_increase: int,
    min_bandwidth_fraction: float,
    observed_at: datetime,
) -> EfaLoopbackResult:
    """The verdict on a report: every device passes, or its failures as evidence.

    ``ran`` is False when the test could not run on this host at all: every
    device's ``timeout`` found no ``fi_pingpong``, or every device failed the same
    way before printing any result (an image without the EFA provider, a libfabric
    that does not match the driver): no verdict on the hardware, and the agent's
    read decides. A link down on every device fails so too; the agent's EFA checks,
    read next, report it.
    """
    runs = parse_efa_loopback(text)
    if not runs:
        return EfaLoopbackResult(
            passed=False,
            summary="EFA loopback: no EFA device found on the host",
            failures=[_evidence(None, "no EFA device found on the host", observed_at)],
        )
    not_run = _not_run(runs)
    if not_run is not None:
        return EfaLoopbackResult(
            passed=False, ran=False, summary=truncate(f"EFA loopback not run: {not_run}", 300)
        )
    speeds = {index: run.rows[-1].mb_per_s for index, run in enumerate(runs) if run.rows}
    median = statistics.median(speeds.values()) if len(speeds) >= 3 else None
    failures: list[EfaEvidence] = []
    notes: list[str] = []
    for index, run in enumerate(runs):
        problem = _device_problem(run, max_counter_increase)
        if problem is None and median is not None and index in speeds:
            speed = speeds[index]
            if speed < min_bandwidth_fraction * median:
                problem = (
                    f"{speed:,.0f} MB/s, below {min_bandwidth_fraction:.0%} of the median "
                    f"{median:,.0f} MB/s of the node's {len(speeds)} devices"
                )
        if problem is not None:
            notes.append(f"{run.device}: {problem}")
            if len(failures) < MAX_FAILURES:
                failures.append(_evidence(run.device, problem, observed_at))
    unread = sorted({c for run in runs for c in EFA_COUNTERS if run.after.get(c) is None})
    scale = f"median {median:,.0f} MB/s" if median is not None else "no median (under 3 devices)"
    head = f"EFA loopback under load: {len(runs)} devices, {len(failures)} failed ({scale})"
    if unread:
        head += f"; counters not readable: {', '.join(unread)}"
    summary = "; ".join([head, *notes])
    return EfaLoopbackResult(
        passed=not failures, summary=truncate(summary, MAX_SUMMARY), failures=list(failures)
    )


def _not_run(runs: list[DeviceRun]) -> str | None:
    """Why the test did not run on this host, or None when it ran on some device."""
    if any(run.rows or run.exit_code in (None, 0, TIMED_OUT_EXIT) for run in runs):
        return None
    if len({(run.exit_code, tuple(run.messages[:1])) for run in runs}) != 1:
        return None  # devices failing differently: the devices, not the host
    first = runs[0]
    if first.exit_code == NOT_FOUND_EXIT:
        return first.messages[0] if first.messages else "fi_pingpong not found"
    said = f": {first.messages[0]}" if first.messages else ""
    return f"fi_pingpong exited {first.exit_code} on all {len(runs)} devices alike{said}"


def _device_problem(run: DeviceRun, max_counter_increase: int) -> str | None:
    """What is wrong with one device's run, or None."""
    said = f": {run.messages[0]}" if run.messages else ""
    if run.exit_code is None:
        return "the report ends before its test did"
    if run.exit_code == TIMED_OUT_EXIT:
        return f"fi_pingpong did not finish within {EFA_LOOPBACK_TIMEOUT_S} s"
    if run.exit_code != 0:
        return f"fi_pingpong exited {run.exit_code}{said}"
    if not run.rows:
        return f"fi_pingpong printed no result{said}"
    lost = sum(row.unacknowledged for row in run.rows if row.unacknowledged > 0)
    if lost:
        sent = sum(row.sent for row in run.rows)
        return f"{lost:,} of {sent:,} messages not acknowledged"
    for counter in EFA_COUNTERS:
        before, after = run.before.get(counter), run.after.get(counter)
        if before is None or after is None or after < before:
            continue  # unreadable, or reset by a driver reload: no increase to judge
        if after - before > max_counter_increase:
            return (
                f"{counter} rose by {after - before:,} under the load "
                f"(more than {max_counter_increase:,})"
            )
    return None


def _evidence(device: str | None, problem: str, observed_at: datetime) -> EfaEvidence:
    return EfaEvidence(
        observed_at=observed_at,
        source=SOURCE,
        check="loopback",
        device=device,
        message=truncate(f"EFA loopback under load failed: {problem}", 1000),
    )
