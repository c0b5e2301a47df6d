"""CPU and memory of this process and everything it started, by role, sampled from /proc.

``getrusage(RUSAGE_CHILDREN)`` sums every waited-for descendant into one figure
and gives the largest one's peak, not the sum at one moment. The what-if bench
needs both split by role (Temporal server, simulator, worker) and the memory of
all of them together, so it samples the process tree every ``interval`` seconds:
each process's CPU (the last value seen; a process that exits between samples
loses less than ``interval`` of it) and the sum of every process's resident set
at each sample (its maximum is the peak "in all").
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

ROLES = (
    ("temporal", "temporal server"),
    ("worker", "cli.main worker"),
    ("simulator", "whatif.lane"),
)
"""(role, text its command line contains); this process is ``bench`` (its simulator too
when the policies run in this process)."""


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = defaultdict(list)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        tree[ppid].append(int(entry.name))
    return tree


def _descendants(root: int) -> list[int]:
    tree, found, todo = _children(), [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(tree.get(pid, ()))
    return found


def _role(pid: int, me: int) -> str:
    if pid == me:
        return "bench"
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return "other"
    return next((role for role, text in ROLES if text in cmdline), "other")


def _cpu_rss(pid: int) -> tuple[float, float]:
    """(CPU seconds, resident MiB) of ``pid``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    rss_pages = int(fields[21])
    return (int(fields[11]) + int(fields[12])) / ticks, rss_pages * os.sysconf("SC_PAGE_SIZE") / (
        1 << 20
    )


@dataclass
class TreeUsage:
    """What the sampler saw."""

    cpu: dict[int, tuple[str, float]] = field(default_factory=dict)
    """pid -> (role, CPU seconds when last seen)."""
    peak_rss_mib: float = 0.0
    """The largest sum of every process's resident set at one sample."""
    peak_rss_by_role_mib: dict[str, float] = field(default_factory=dict)
    """Per role, the largest resident set of one process of it."""
    start_cpu: float = 0.0

    def sample(self, me: int) -> None:
        """Look at the tree once."""
        total = 0.0
        for pid in _descendants(me):
            try:
                cpu, rss = _cpu_rss(pid)
            except (OSError, IndexError, ValueError):
                continue  # it just exited
            role = self.cpu[pid][0] if pid in self.cpu else _role(pid, me)
            self.cpu[pid] = (role, cpu)
            total += rss
            self.peak_rss_by_role_mib[role] = max(self.peak_rss_by_role_mib.get(role, 0.0), rss)
        self.peak_rss_mib = max(self.peak_rss_mib, total)

    def cpu_by_role(self) -> dict[str, float]:
        """CPU seconds per role since the sampler started (processes of a role summed)."""
        out: dict[str, float] = defaultdict(float)
        for role, cpu in self.cpu.values():
            out[role] += cpu
        out["bench"] -= self.start_cpu
        return {role: round(value, 1) for role, value in sorted(out.items())}

    def processes(self) -> dict[str, int]:
        """Processes seen per role."""
        out: dict[str, int] = defaultdict(int)
        for role, _ in self.cpu.values():
            out[role] += 1
        return dict(sorted(out.items()))


@contextlib.asynccontextmanager
async def sampled(interval: float = 1.0) -> AsyncIterator[TreeUsage]:
    """Sample this process's tree every ``interval`` seconds while the block runs."""
    me = os.getpid()
    usage = TreeUsage(start_cpu=_cpu_rss(me)[0])

    async def loop() -> None:
        while True:
            await asyncio.to_thread(usage.sample, me)
            await asyncio.sleep(interval)

    task = asyncio.create_task(loop())
    try:
        yield usage
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        usage.sample(me)
