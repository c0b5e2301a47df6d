"""The node-condition watcher: Node conditions in, incident evidence out.

Two halves joined by an ``asyncio.Queue``:

- :class:`NodeSource` runs in a thread, because the official ``kubernetes``
  client blocks. It lists the selected Nodes (paged), then watches from the
  list's resourceVersion with bookmarks. A watch that ends is resumed from the
  last resourceVersion seen; 410 Gone (an HTTP 410 or an ``ERROR`` event with
  code 410) means that version is no longer retained, so it lists again and
  the tracker is resynchronised. Other failures (connection refused while the
  API server restarts, 5xx, timeouts) are retried with capped exponential
  backoff, resuming the watch where it was.
- :class:`NodeConditionWatcher` runs in asyncio: it feeds what the source sees
  to the :class:`~triggers.condition_tracker.ConditionTracker` (the clock
  rules live there), ticks it so grace periods fire without new events, and
  delivers its reports to Temporal in order. Problems go through
  :class:`~triggers.starter.IncidentStarter` (start or feed); recoveries
  are only signalled to a running incident, since a recovery alone must not
  start one. A report Temporal does not take (unavailable, INTERNAL, a
  timeout: anything but a refusal of the report as invalid) waits in a
  bounded queue of its node (:class:`~triggers.report_outbox.ReportOutbox`)
  and is retried with backoff, ahead of the node's later reports; only an
  invalid report is dropped (counted and logged), and a report that finds its
  node's queue or the outbox full is refused (counted and logged) rather than
  pushing out one already waiting. After each listing,
  :class:`~triggers.unseen_recoveries.UnseenRecoveries` looks up the
  cluster's open incidents so that a recovery nobody watched (the watcher was
  down) is still sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes import client as k8s
from pydantic import Field, ValidationError
from temporalio.client import Client
from temporalio.service import RPCError

from gpu_remediation.models import Model, NodeName
from triggers.admission_hook import AdmissionStarts
from triggers.condition_tracker import ConditionReport, ConditionTracker, ObservedCondition
from triggers.list_watch import ListWatch, stop_watch
from triggers.metrics import WatcherMetrics
from triggers.report_outbox import (
    DEFAULT_PER_NODE,
    DEFAULT_TOTAL,
    Report,
    ReportOutbox,
    backoff_delay,
)
from triggers.starter import IncidentStarter, is_invalid, is_transient
from triggers.unseen_recoveries import UnseenRecoveries

log = logging.getLogger("gpu_remediation.watcher")

_GONE = 410

FLUSH_WIDTH = 32
"""Reports delivered at once (distinct nodes); 32 kept 200 changes/s at p50 39 ms."""


class NodeConditions(Model):
    """A Node as the watcher needs it: its name and its valid conditions."""

    name: NodeName
    conditions: list[ObservedCondition]
    boot_id: str | None = None
    """``status.nodeInfo.bootID`` (None: unknown): the tracker tells a reboot by it."""
    raw: Any = Field(default=None, exclude=True, repr=False)
    """The Node object as listed (the admission hook reads its taints and boot id)."""


def parse_node(raw: Any) -> NodeConditions | None:
    """Validate a Node from the API; None (logged) when it is unusable.

    A malformed condition is dropped (logged) rather than the whole node, so
    one odd condition from some other agent does not hide a real problem.
    """
    if not isinstance(raw, dict):
        log.warning("ignoring a node that is not an object: %.200r", raw)
        return None
    name = (raw.get("metadata") or {}).get("name")
    conditions: list[ObservedCondition] = []
    for entry in (raw.get("status") or {}).get("conditions") or []:
        try:
            conditions.append(ObservedCondition.model_validate(entry))
        except ValidationError as err:
            log.warning("node %s: ignoring a malformed condition %.200r: %s", name, entry, err)
    boot_id = ((raw.get("status") or {}).get("nodeInfo") or {}).get("bootID")
    if not isinstance(boot_id, str) or not boot_id:
        boot_id = None
    try:
        return NodeConditions(name=name, conditions=conditions, boot_id=boot_id, raw=raw)
    except ValidationError as err:
        log.warning("ignoring a node with an invalid name %.200r: %s", name, err)
        return None


# ------------------------------------------------------------------ the source


@dataclass(frozen=True)
class Listed:
    """A complete list of the selected nodes (the tracker resyncs to it)."""

    nodes: list[NodeConditions]


@dataclass(frozen=True)
class Changed:
    """A selected node was added or modified."""

    node: NodeConditions


@dataclass(frozen=True)
class Removed:
    """A node was deleted or no longer matches the selector."""

    name: str


NodeEvent = Listed | Changed | Removed


@dataclass(frozen=True)
class _Synced:
    """A mark in the event queue: resolved once the events before it are applied and sent."""

    done: asyncio.Future[None]


class NodeSource(ListWatch):
    """List-then-watch of the selected Nodes, as :data:`NodeEvent` values.

    Args:
        core: ``CoreV1Api`` of the cluster.
        selector: Label selector sent to the API server ("" selects every node).
        emit: Called (from the watch thread) with every :data:`NodeEvent`.
        **options: Timeouts, page size and backoff of :class:`ListWatch`.
    """

    def __init__(
        self, core: Any, selector: str, emit: Callable[[NodeEvent], None], **options: Any
    ) -> None:
        self._emit = emit
        super().__init__(
            core.list_node, selector, self._listed, self._changed, kind="node", **options
        )

    def _listed(self, items: list[dict[str, Any]]) -> None:
        nodes = [node for node in map(parse_node, items) if node is not None]
        self._emit(Listed(nodes))

    def _changed(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "DELETED":
            name = (obj.get("metadata") or {}).get("name")
            if isinstance(name, str):
                self._emit(Removed(name))
            return
        node = parse_node(obj)
        if node is not None:
            self._emit(Changed(node))


# ------------------------------------------------------------------ delivery


class ReportDelivery:
    """Sends the tracker's reports to the nodes' incidents.

    Problems and updates go through the :class:`IncidentStarter`
    (so they open an incident when none is running).
    Recoveries are signalled to a running incident only: with none running
    there is nothing to recover, and starting one just to tell it so would
    leave an empty incident behind.

    Args:
        starter: The shared starter (cluster, policy, task queue).
        client: The Temporal client the starter uses.
    """

    def __init__(self, starter: IncidentStarter, client: Client) -> None:
        self._starter = starter
        self._client = client

    async def deliver(self, report: Report) -> None:
        """Deliver one report.

        Raises:
            TemporalUnavailableError: Temporal could not take it now (retry later).
            ValueError: The report is invalid (a bug upstream; not retried).
            temporalio.service.RPCError: Temporal refused it for another reason:
                INVALID_ARGUMENT (not retried), or permissions and the like
                (retried: the report is fine, the setup is not).
        """
        if report.kind != "clear":
            await self._starter.report(report.node, [report.evidence], report_id=report.report_id)
            return
        delivered = await self._starter.report_recovery(
            report.node, [report.evidence], report_id=report.report_id
        )
        if not delivered:
            log.info("%s: %s cleared; no incident is running", report.node, report.evidence.key)


# ------------------------------------------------------------------ the watcher


class NodeConditionWatcher:
    """Watches the selected Nodes' conditions and reports problems to their incidents.

    Args:
        api_client: ``kubernetes.client.ApiClient`` of the cluster (see
            ``worker.kube_api_client``).
        starter: Starts or feeds incidents; its policy's ``triggers`` section
            says which conditions count and for how long.
        client: The Temporal client (recoveries are plain signals).
        selector: Label selector of the watched nodes; the policy's
            ``triggers.node_selector`` when None.
        tick_interval: Seconds between clock ticks (grace periods fire on ticks).
        watch_timeout: Seconds each watch request lasts before it is resumed.
        backoff_initial: First delay after an API or Temporal failure, seconds.
        backoff_max: Cap of the exponential backoffs, seconds.
        clock: Returns "now" (UTC).
        metrics: Where to count reports and lists (the watch command serves them).
        delivery: Where reports go (default: the starter's incidents, :class:`ReportDelivery`).
        max_pending_per_node: Reports one node may have waiting for Temporal;
            a further one is refused (counted and logged).
        max_pending: Reports all nodes may have waiting; a further one is refused.
    """

    def __init__(
        self,
        api_client: Any,
        starter: IncidentStarter,
        client: Client,
        *,
        selector: str | None = None,
        tick_interval: float = 1.0,
        watch_timeout: int = 300,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        metrics: WatcherMetrics | None = None,
        delivery: ReportDelivery | None = None,
        max_pending_per_node: int = DEFAULT_PER_NODE,
        max_pending: int = DEFAULT_TOTAL,
    ) -> None:
        triggers = starter.policy.triggers
        self.selector = triggers.node_selector if selector is None else selector
        self.tracker = ConditionTracker(triggers)
        self._delivery = delivery or ReportDelivery(starter, client)
        self._tick = tick_interval
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._clock = clock
        self._outbox = ReportOutbox(
            per_node=max_pending_per_node,
            total=max_pending,
            backoff_initial=backoff_initial,
            backoff_max=backoff_max,
            clock=time.monotonic,
        )
        self._retry_at = 0.0
        self._delivery_failures = 0
        self._queue: asyncio.Queue[NodeEvent | _Synced] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.unseen_recoveries = UnseenRecoveries(
            starter, self.tracker, backoff_initial=backoff_initial, backoff_max=backoff_max
        )
        self.source = NodeSource(
            k8s.CoreV1Api(api_client),
            self.selector,
            self._emit,
            watch_timeout=watch_timeout,
            backoff_initial=backoff_initial,
            backoff_max=backoff_max,
        )
        self._watched: set[str] = set()
        self.listed = False
        """Whether a complete listing of the nodes has been applied (``watches`` is whole)."""
        """The nodes of the last listing and changes since: reports name only these."""
        self.foreign_reports = 0
        """Reports from elsewhere (``add_reports``) dropped for naming an unwatched node."""
        self.delivered: list[Report] = []
        """Reports delivered so far, most recent last (bounded; for status and tests)."""
        self._metrics = metrics
        self._workflow_id = starter.workflow_id
        self.admissions = AdmissionStarts(
            client,
            cluster=starter.cluster,
            policy=starter.policy,
            task_queue=starter.task_queue,
            semaphore_workflow_id=starter.semaphore_workflow_id,
            backoff_max=backoff_max,
        )
        """Starts the burn-in of nodes behind the startup taint (issue 20)."""
        if metrics is not None:
            metrics.outbox.set_function(lambda: len(self._outbox))
            metrics.lists.set_function(lambda: self.source.lists)

    @property
    def pending(self) -> int:
        """Reports waiting for Temporal."""
        return len(self._outbox)

    @property
    def waiting_to_write(self) -> bool:
        """Whether a report or an admission start waits to be sent (or sent again)."""
        return bool(self._outbox) or self.admissions.pending > 0

    @property
    def refused(self) -> dict[str, int]:
        """Reports refused because their node's queue or the outbox was full, by reason."""
        return {reason: count for reason, count in self._outbox.refused.items()}

    def _emit(self, event: NodeEvent) -> None:
        # Called from the source's thread.
        loop, queue = self._loop, self._queue
        if loop is None or queue is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop closed: we are shutting down
            loop.call_soon_threadsafe(queue.put_nowait, event)

    async def run(self, stop: asyncio.Event) -> None:
        """Watch and report until ``stop`` is set, then stop the watch thread.

        Reports still waiting for Temporal when it stops are logged, not sent:
        a restarted watcher re-derives them from the nodes (same report ids).
        """
        self._loop = asyncio.get_running_loop()
        self._queue = asyncio.Queue()
        thread = threading.Thread(target=self.source.run, name="node-condition-watch", daemon=True)
        thread.start()
        log.info("watching nodes matching %r", self.selector)
        stopped = asyncio.create_task(stop.wait())
        getter: asyncio.Task[NodeEvent | _Synced] | None = None
        try:
            while not stop.is_set():
                marks: list[_Synced] = []
                if getter is None:
                    getter = asyncio.create_task(self._queue.get())
                await asyncio.wait(
                    {getter, stopped}, timeout=self._tick, return_when=asyncio.FIRST_COMPLETED
                )
                if stop.is_set():
                    break
                reports: list[ConditionReport] = []
                if getter.done():
                    reports += self._take(getter.result(), marks)
                    getter = None
                    while not self._queue.empty():
                        reports += self._take(self._queue.get_nowait(), marks)
                now = self._clock()
                reports += self.tracker.tick(now)
                reports += self.unseen_recoveries.poll(now)
                for report in reports:
                    log.info(
                        "%s: %s %s=%s (%s) [%s]",
                        report.node,
                        report.kind,
                        report.evidence.type,
                        report.evidence.status,
                        report.evidence.reason,
                        report.report_id,
                        extra=self._log_extra(report),
                    )
                self._enqueue(reports)
                await self._flush()
                await self.admissions.flush()
                for mark in marks:
                    if not mark.done.done():
                        mark.done.set_result(None)
        finally:
            for task in (getter, stopped):
                if task is not None:
                    task.cancel()
            self.unseen_recoveries.cancel()
            await self._stop_source(thread)
            if self._outbox:
                log.warning("stopping with %d undelivered report(s)", len(self._outbox))
            while not self._queue.empty():  # nobody waits for a stopped watcher
                item = self._queue.get_nowait()
                if isinstance(item, _Synced) and not item.done.done():
                    item.done.set_result(None)
            self._loop = None
            self._queue = None

    async def synced(self) -> None:
        """Return once every event handed on so far is applied, ticked and sent to Temporal.

        The clock-free what-if awaits it before simulated time moves on, so a
        condition the fleet set is an incident before the server's clock can skip
        past it. Returns at once when the watcher is not running.
        """
        loop, queue = self._loop, self._queue
        if loop is None or queue is None:
            return
        mark = _Synced(loop.create_future())
        # call_soon: behind the events the watch thread has already handed over.
        loop.call_soon(queue.put_nowait, mark)
        await mark.done

    def _take(self, event: NodeEvent | _Synced, marks: list[_Synced]) -> list[ConditionReport]:
        if isinstance(event, _Synced):
            marks.append(event)
            return []
        return self._apply(event)

    async def _stop_source(self, thread: threading.Thread) -> None:
        if not await stop_watch(self.source, thread):
            log.warning("the node watch thread did not stop within 5s (it is a daemon)")

    def _apply(self, event: NodeEvent) -> list[ConditionReport]:
        now = self._clock()
        if isinstance(event, Listed):
            for node in event.nodes:
                self.admissions.saw(node.raw)
            self._watched = {n.name for n in event.nodes}
            self.listed = True
            listing = {n.name: n.conditions for n in event.nodes}
            self.unseen_recoveries.listed(listing)
            boot_ids = {n.name: n.boot_id for n in event.nodes}
            return self.tracker.resync(listing, now, boot_ids=boot_ids)
        if isinstance(event, Changed):
            self.admissions.saw(event.node.raw)
            node = event.node
            self._watched.add(node.name)
            return self.tracker.observe(node.name, node.conditions, now, boot_id=node.boot_id)
        self._watched.discard(event.name)
        self.tracker.forget(event.name)
        return []

    def watches(self, node: str) -> bool:
        """Whether ``node`` is one of the nodes this watcher watches (listed, selected)."""
        return node in self._watched

    def add_reports(self, reports: Iterable[Report]) -> None:
        """Queue reports from another source (the straggler detector) for delivery.

        They share the outbox with the watcher's own: per node in order, bounded,
        retried while Temporal is away, sent on the watcher's next tick. A report
        for a node this watcher does not watch (not a GPU node of its selector, or
        not listed yet) is dropped and counted: a pod may name any node it is bound
        to. Call it from the watcher's event loop.
        """
        kept = []
        for report in reports:
            if report.node in self._watched:
                kept.append(report)
                continue
            self.foreign_reports += 1
            log.warning(
                "%s: %s %s dropped: not a node this watcher watches (%d so far)",
                report.node,
                report.kind,
                report.evidence.key,
                self.foreign_reports,
            )
        reports = kept
        for report in reports:
            log.info(
                "%s: %s %s [%s]",
                report.node,
                report.kind,
                report.evidence.key,
                report.report_id,
                extra=self._log_extra(report),
            )
        self._enqueue(reports)

    def _log_extra(self, report: Report) -> dict[str, str | None]:
        # JSON log lines name the node and its incident's workflow.
        try:
            workflow_id: str | None = self._workflow_id(report.node)
        except ValueError:
            workflow_id = None
        return {"node": report.node, "workflow_id": workflow_id}

    def _enqueue(self, reports: Iterable[Report]) -> None:
        """Queue reports for delivery; log and count each one refused for lack of room."""
        for report in reports:
            reason = self._outbox.add(report)
            if reason is None:
                continue
            log.warning(
                "%s: report %s refused, no room (%s: %d of this node's and %d in all wait "
                "for Temporal); %d refused so far",
                report.node,
                report.report_id,
                reason,
                self._outbox.waiting(report.node),
                len(self._outbox),
                sum(self._outbox.refused.values()),
                extra=self._log_extra(report),
            )
            if self._metrics is not None:
                self._metrics.refused.labels(reason).inc()

    async def _flush(self) -> None:
        """Deliver the outbox, in order per node; what Temporal does not take waits.

        Reports go out in waves of up to ``FLUSH_WIDTH`` at once, at most one per
        node: one at a time the watcher fell behind at 200 changes/s on 10,000
        nodes (``bench/watcher``), while a node's own reports must still reach
        its incident in the order seen.

        A report that fails for any reason but its own invalidity stays at the
        head of its node's queue and the node backs off exponentially; the
        other nodes go on. A wave of several reports that all fail says that
        Temporal itself is in trouble: the whole flush then backs off too, so
        an outage costs one wave per backoff rather than one per node.
        """
        if time.monotonic() < self._retry_at:
            return
        self._outbox.release_due()
        failed: list[tuple[Report, Exception]] = []
        node_delay = 0.0
        while wave := self._outbox.take(FLUSH_WIDTH):
            outcomes = await asyncio.gather(
                *(self._delivery.deliver(report) for report in wave), return_exceptions=True
            )
            fatal: BaseException | None = None
            taken = 0
            for report, outcome in zip(wave, outcomes, strict=True):
                if not isinstance(outcome, BaseException):
                    self._outbox.done(report)
                    self._sent(report)
                    taken += 1
                elif not isinstance(outcome, Exception):
                    self._outbox.failed(report)  # stays; cancellation and the like go up
                    fatal = fatal or outcome
                elif is_invalid(outcome):
                    self._outbox.done(report)
                    self._dropped(report, outcome)
                    taken += 1
                else:
                    node_delay = self._outbox.failed(report)
                    failed.append((report, outcome))
            if fatal is not None:
                raise fatal
            if taken:
                self._delivery_failures = 0
            elif len(wave) > 1:
                self._delivery_failures += 1
                delay = backoff_delay(
                    self._delivery_failures, self._backoff_initial, self._backoff_max
                )
                self._retry_at = time.monotonic() + delay
                node_delay = max(node_delay, delay)
                break
        if failed:
            self._log_failures(failed, node_delay)

    def _log_failures(self, failed: list[tuple[Report, Exception]], delay: float) -> None:
        """Say once per flush what Temporal did not take; every such report waits."""
        transient = all(is_transient(err) for _, err in failed)
        report, err = next(((r, e) for r, e in failed if not is_transient(e)), failed[0])
        log.log(
            logging.WARNING if transient else logging.ERROR,
            "%s; %d report(s) of %d node(s) not taken (e.g. %s, report %s), "
            "%d report(s) wait, retrying in %.1fs%s",
            err,
            len(failed),
            len({r.node for r, _ in failed}),
            report.node,
            report.report_id,
            len(self._outbox),
            delay,
            ""
            if transient
            else " (not a transient error: check the watcher's Temporal credentials and namespace)",
            exc_info=err if not transient and not isinstance(err, RPCError) else None,
        )
        if self._metrics is not None:
            self._metrics.delivery_failures.inc(len(failed))

    def _sent(self, report: Report) -> None:
        self.delivered.append(report)
        del self.delivered[:-1000]
        if self._metrics is not None:
            self._metrics.reports.labels(report.kind).inc()

    def _dropped(self, report: Report, err: Exception) -> None:
        # Refused for good (invalid: a bad name, a payload the workflow cannot
        # accept): retrying cannot help, and would hold back the node's later reports.
        log.error(
            "%s: report %s refused and dropped: %s",
            report.node,
            report.report_id,
            err,
            extra=self._log_extra(report),
        )
        if self._metrics is not None:
            self._metrics.dropped.inc()
