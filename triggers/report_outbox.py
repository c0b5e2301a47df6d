"""The watcher's outbox: reports waiting for Temporal, one bounded queue per node.

A report stays in its node's queue until Temporal took it or refused it as
invalid; a transient failure keeps it at the head of its queue, so each node's
reports reach its incident in the order seen, and backs that node off
exponentially while the other nodes' reports go on. Memory is bounded twice:
a node may have ``per_node`` reports waiting and all nodes together ``total``.
A report that finds its queue or the outbox full is refused (the caller counts
and logs it); reports already waiting are never pushed out.

Pure bookkeeping: no I/O, and the clock is an argument, so the watcher's flush
(``triggers.watcher``) and the tests drive it.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Literal

from triggers.condition_tracker import ConditionReport
from triggers.stragglers import StragglerReport

Report = ConditionReport | StragglerReport
"""What the watcher delivers: a node condition's report, or the straggler detector's."""

DEFAULT_PER_NODE = 256
"""Reports one node may have waiting. A node sends a few per fault episode
(report, updates, clear), so this holds most of a day of a node whose fault
comes and goes every ten minutes through a Temporal outage."""

DEFAULT_TOTAL = 50_000
"""Reports all nodes together may have waiting: about 1.6 KB each (measured; up
to about 6 KB with a 4 KB condition message), so 80 MB typical, 300 MB at
worst; five per node of the largest fleet measured (10,000 nodes)."""

Refusal = Literal["node_queue_full", "outbox_full"]


def backoff_delay(failures: int, initial: float, cap: float) -> float:
    """The delay after ``failures`` failures in a row: ``initial`` doubled each time, capped.

    The exponent is bounded too, so days of failures cannot overflow a float.
    """
    return min(initial * 2.0 ** min(max(failures - 1, 0), 64), cap)


@dataclass
class _NodeQueue:
    reports: deque[Report] = field(default_factory=deque)
    failures: int = 0
    """Failed attempts in a row of the report at the head."""
    state: Literal["ready", "sending", "backoff"] = "ready"


class ReportOutbox:
    """Reports waiting for Temporal, a bounded FIFO queue per node.

    A node is *ready* (its head report may be sent), *sending* (handed out by
    :meth:`take`, outcome not known yet) or *backing off* after a failure.
    :meth:`take` hands out the head reports of ready nodes, oldest first; each
    must then be settled with :meth:`done` or :meth:`failed`.

    Args:
        per_node: Reports one node may have waiting; a further one is refused.
        total: Reports all nodes may have waiting; a further one is refused.
        backoff_initial: Delay after a node's first failure in a row, seconds.
        backoff_max: Cap of a node's exponential backoff, seconds.
        clock: Monotonic clock, seconds.

    Raises:
        ValueError: If a bound is below 1 or a delay is negative.
    """

    def __init__(
        self,
        *,
        per_node: int = DEFAULT_PER_NODE,
        total: int = DEFAULT_TOTAL,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
        clock: Callable[[], float],
    ) -> None:
        if per_node < 1 or total < 1 or backoff_initial < 0 or backoff_max < 0:
            raise ValueError("the bounds must be at least 1 and the delays at least 0")
        self._per_node = per_node
        self._total = total
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._clock = clock
        self._queues: dict[str, _NodeQueue] = {}
        self._ready: deque[str] = deque()
        self._backoff: list[tuple[float, int, str]] = []  # heap of (retry at, tie, node)
        self._tie = itertools.count()
        self._size = 0
        self.refused: dict[Refusal, int] = {"node_queue_full": 0, "outbox_full": 0}
        """Reports refused because a queue or the outbox was full, by reason."""

    def __len__(self) -> int:
        """Reports waiting (those being sent included)."""
        return self._size

    def __iter__(self) -> Iterator[Report]:
        """Every waiting report, node by node, each node's in the order seen."""
        for queue in self._queues.values():
            yield from queue.reports

    @property
    def nodes(self) -> int:
        """Nodes with reports waiting."""
        return len(self._queues)

    def waiting(self, node: str) -> int:
        """Reports of ``node`` waiting."""
        queue = self._queues.get(node)
        return 0 if queue is None else len(queue.reports)

    def add(self, report: Report) -> Refusal | None:
        """Queue ``report`` behind its node's earlier reports.

        Returns:
            None when queued; else why it was refused (nothing else changes:
            the reports already waiting stay).
        """
        queue = self._queues.get(report.node)
        if queue is not None and len(queue.reports) >= self._per_node:
            return self._refuse("node_queue_full")
        if self._size >= self._total:
            return self._refuse("outbox_full")
        if queue is None:
            queue = self._queues[report.node] = _NodeQueue()
            self._ready.append(report.node)
        queue.reports.append(report)
        self._size += 1
        return None

    def extend(self, reports: Iterable[Report]) -> list[Report]:
        """Queue each report in turn; return those refused."""
        return [report for report in reports if self.add(report) is not None]

    def release_due(self) -> None:
        """Make every node whose backoff ran out ready again (oldest retry first)."""
        now = self._clock()
        while self._backoff and self._backoff[0][0] <= now:
            _, _, node = heapq.heappop(self._backoff)
            queue = self._queues.get(node)
            if queue is not None and queue.state == "backoff":
                queue.state = "ready"
                self._ready.append(node)

    def take(self, limit: int) -> list[Report]:
        """Hand out the head report of up to ``limit`` ready nodes, one per node.

        Nodes that became due since the last :meth:`release_due` wait for the
        next one, so a node that just failed is not retried in the same pass.
        """
        wave: list[Report] = []
        while self._ready and len(wave) < limit:
            node = self._ready.popleft()
            queue = self._queues[node]
            queue.state = "sending"
            wave.append(queue.reports[0])
        return wave

    def done(self, report: Report) -> None:
        """Settle a handed-out report that needs no retry (delivered, or refused as invalid)."""
        queue = self._sending(report)
        queue.reports.popleft()
        self._size -= 1
        queue.failures = 0
        if queue.reports:
            queue.state = "ready"
            self._ready.append(report.node)
        else:
            del self._queues[report.node]

    def failed(self, report: Report) -> float:
        """Settle a handed-out report that Temporal did not take: it stays at its node's head.

        Returns:
            The node's backoff delay, seconds (its next attempt comes after it).
        """
        queue = self._sending(report)
        queue.failures += 1
        delay = backoff_delay(queue.failures, self._backoff_initial, self._backoff_max)
        queue.state = "backoff"
        heapq.heappush(self._backoff, (self._clock() + delay, next(self._tie), report.node))
        return delay

    def _sending(self, report: Report) -> _NodeQueue:
        queue = self._queues.get(report.node)
        if queue is None or queue.state != "sending" or queue.reports[0] is not report:
            raise RuntimeError(f"{report.node}: report {report.report_id} was not handed out")
        return queue

    def _refuse(self, reason: Refusal) -> Refusal:
        self.refused[reason] += 1
        return reason
