"""What the simulated host prints for the ``efa_loopback`` host command (issue 37).

The report of ``gpu_remediation.host_command.EFA_LOOPBACK_SCRIPT``: per EFA
device, its two watched counters, ``fi_pingpong``'s table (the shape of
libfabric's ``show_perf``, as ``tool_outputs.efa_loopback`` reads it and its
real fixtures show), its exit and the counters again. A pure function of a
node's true state:

- a healthy device moves 1 MiB 10,000 times each way at about 12,000 MB/s:
  an assumption, just under a 100 Gb/s port's 12,500 MB/s (no loopback figure
  at this load is published; AWS's efa_test.sh moves 10 messages, and the
  sample in aws/aws-cdi-sdk's install guide shows 2,359 MB/s at 1 MiB for
  them); each device a little apart (an illustrative spread of under 2%),
  counters unchanged;
- the node's slow port (``EFA_DEGRADED``) runs 1.34 times slower, as the gang
  it slows (``faults.SLOW_GANG``), and its retransmit timeouts rise by
  ``DEGRADED_RETRANS_UNDER_LOAD`` during the run: an assumption (a port that
  loses packets loses them under any load; how many in 20 GiB is not
  published), the one that decides whether this check catches it;
- a port whose link is down (``EFA_LINK``) cannot open its endpoint: the
  client exits 61 with libfabric's ``fi_getinfo`` error, as ``pingpong.c``
  prints it (``-61``, "No data available", the error AWS's docs show for an
  EFA that is not usable);
- a node missing a device (``EFA_DEVICE_MISSING``) has one device fewer.

The simulator's degraded EFA fault clears with a reboot (``faults.FAULTS``),
so after that step the report passes; it fails when the fault outlived the
step (a scenario that keeps it), which is what the check is for.
"""

from __future__ import annotations

from gpu_remediation.host_command import (
    EFA_COUNTERS,
    EFA_LOOPBACK_ITERATIONS,
    EFA_LOOPBACK_SIZE,
    EFA_REPORT,
)
from simulator.fleet.agent import EFA_DEVICE
from simulator.fleet.faults import SLOW_GANG, FaultKind
from simulator.fleet.model import NodeState

EFA_DEVICES = 32
"""EFA devices of a simulated node: a p5.48xlarge's 32 (AWS's instance type table)."""
LOOPBACK_MB_PER_S = 12_000.0
"""A healthy device's loopback throughput at 1 MiB: an assumption (see the module)."""
DEGRADED_RETRANS_UNDER_LOAD = 250
"""Retransmit timeouts a slow port adds under the loopback's load: an assumption."""
BASELINE_RETRANS = 12
"""The counters' value before the run: an illustrative count left by earlier traffic."""
_HEADER = "bytes   #sent   #ack     total       time     MB/sec    usec/xfer   Mxfers/sec"
_GETINFO_ERROR = "fi_getinfo(): util/pingpong.c:1893, ret=-61 (No data available)"
GETINFO_EXIT = 61
"""fi_pingpong's exit after that error: its ``main`` returns ``-ret`` (util/pingpong.c)."""


def device_names(count: int) -> list[str]:
    """The node's EFA devices, the one its faults sit on (``EFA_DEVICE``) last."""
    bus = int(EFA_DEVICE.removeprefix("rdmap").removesuffix("s0"))
    return [f"rdmap{bus - count + 1 + i}s0" for i in range(count)]


def _row(mb_per_s: float) -> str:
    """``show_perf``'s row for the test's size and count at ``mb_per_s``."""
    moved = EFA_LOOPBACK_ITERATIONS * EFA_LOOPBACK_SIZE * 2  # both ways
    seconds = moved / (mb_per_s * 1e6)
    usec = seconds * 1e6 / (EFA_LOOPBACK_ITERATIONS * 2)
    count = f"{EFA_LOOPBACK_ITERATIONS // 1000}k"
    return (
        f"{'1m':<8}{count:<8}{'=' + count:<9}{'19g':<8}{seconds:8.2f}s"
        f"{mb_per_s:10.2f}{usec:11.2f}{1.0 / usec:11.2f}"
    )


def _counters(when: str, retrans: int) -> list[str]:
    """The script's counter lines: retransmit timeouts as given, no drops."""
    retrans_name, drops_name = EFA_COUNTERS
    return [
        f"{EFA_REPORT} {when} {retrans_name} {retrans}",
        f"{EFA_REPORT} {when} {drops_name} 0",
    ]


def loopback_report(node: NodeState) -> str:
    """The report the loopback's script writes on ``node`` (before encoding)."""
    kinds = {fault.kind for fault in node.faults}
    count = EFA_DEVICES - (1 if FaultKind.EFA_DEVICE_MISSING in kinds else 0)
    lines: list[str] = []
    for index, device in enumerate(device_names(count)):
        faulty = device == EFA_DEVICE
        slow = faulty and FaultKind.EFA_DEGRADED in kinds
        down = faulty and FaultKind.EFA_LINK in kinds
        before = BASELINE_RETRANS
        after = before + (DEGRADED_RETRANS_UNDER_LOAD if slow else 0)
        lines.append(f"{EFA_REPORT} device {device}")
        lines += _counters("before", before)
        if down:
            lines += [_GETINFO_ERROR, f"{EFA_REPORT} exit {GETINFO_EXIT}"]
        else:
            speed = LOOPBACK_MB_PER_S * (1 - 0.003 * (index % 6))
            lines += [_HEADER, _row(speed / SLOW_GANG if slow else speed), f"{EFA_REPORT} exit 0"]
        lines += _counters("after", after)
    return "\n".join(lines) + "\n"
