"""The checkpoint relay: what jobs write on their pods, signalled to their incident.

An incident that waits for a job (workflows/node_jobs.py) writes a request on
the job's pods and its id on the node's GPU pods, then waits on a durable timer
and signals. This relay, run beside the node-condition watcher, watches Pods
and sends those signals:

- a pod that carries a request and a new ``checkpoint-answer`` value: the
  value (bounded, unparsed: the incident judges it) goes to the incident named
  in the request, with the job the request names (the incident waits for each
  job it asked);
- a pod that carries an incident's id and ends (deleted, Succeeded, Failed):
  the incident is told, so it can look whether any GPU work is left.

With a straggler detector (``triggers.stragglers``), every pod it sees also
goes to the detector, and what that finds (a pod slower than its gang, from
the step times jobs write) is handed to ``report_stragglers`` (the watcher's
outbox, which starts or feeds the node's incident).

Only incidents of this cluster are signalled, pinned to their run id, so an
answer cannot reach another incident or a later run of the same node. Each
answer carries the pod's uid (set by the API server): the incident counts it
only from a pod it wrote its request on, and for that pod's job, whatever the
pod's annotations claim. A signal to an incident that has closed is dropped;
while Temporal is unreachable the signals wait in a bounded outbox and are
retried. Nothing is dropped silently: an incident that has had
``MAX_ANSWERS_PER_INCIDENT`` answers (a pod rewriting its answer in a loop
cannot grow the incident's history without end) and a signal that finds the
outbox full are refused, counted (``refused``) and logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes import client as k8s
from pydantic import BaseModel, ValidationError
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from gpu_remediation.ids import Signals
from gpu_remediation.job_contracts import CheckpointAnswerReport, WatchedPodEnded
from gpu_remediation.jobs import (
    ANSWER_ANNOTATION,
    INCIDENT_ANNOTATION,
    RELAYED_MAX_CHARS,
    REQUEST_ANNOTATION,
    CheckpointRequest,
    parse_incident_id,
)
from triggers.list_watch import ListWatch, stop_watch
from triggers.stragglers import StragglerDetector, StragglerReport

log = logging.getLogger("gpu_remediation.checkpoint_relay")

MAX_OUTBOX = 10_000
MAX_ANSWERS_PER_INCIDENT = 200
"""Answers relayed to one incident run at most; later ones are refused and counted."""
MAX_TRACKED_INCIDENTS = 10_000
_ENDED_PHASES = ("Succeeded", "Failed")
RESYNCED = "RESYNCED"
"""After a listing's pods: the uids it held (the detector forgets the others)."""
_FINAL = (
    RPCStatusCode.NOT_FOUND,
    RPCStatusCode.INVALID_ARGUMENT,
    RPCStatusCode.FAILED_PRECONDITION,
)


@dataclass(frozen=True)
class Outgoing:
    """One signal for one incident run."""

    workflow_id: str
    run_id: str
    signal: str
    payload: BaseModel


class CheckpointRelay:
    """Watches Pods and signals incidents when their jobs answer or their pods end.

    Args:
        api_client: ``kubernetes.client.ApiClient`` of the cluster.
        client: The Temporal client.
        cluster: This cluster's name (only its incidents are signalled).
        watch_timeout: Seconds each watch request lasts before it is resumed.
        backoff_initial: First delay after an API or Temporal failure, seconds.
        backoff_max: Cap of the exponential backoffs, seconds.
        stragglers: The straggler detector, or None to read no step times.
        report_stragglers: Where the detector's reports go (required with ``stragglers``).
        clock: "Now" for the detector (the simulated clock in the demo).
    """

    def __init__(
        self,
        api_client: Any,
        client: Client,
        cluster: str,
        *,
        watch_timeout: int = 300,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
        stragglers: StragglerDetector | None = None,
        report_stragglers: Callable[[list[StragglerReport]], None] | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        if (stragglers is None) != (report_stragglers is None):
            raise ValueError("stragglers and report_stragglers go together")
        self._stragglers = stragglers
        self._report_stragglers = report_stragglers
        self._clock = clock
        self._client = client
        self._cluster = cluster
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self.source = ListWatch(
            k8s.CoreV1Api(api_client).list_pod_for_all_namespaces,
            "",
            self._listed,
            self._changed,
            kind="pod",
            watch_timeout=watch_timeout,
            backoff_initial=backoff_initial,
            backoff_max=backoff_max,
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue[tuple[str, dict[str, Any]] | asyncio.Future[None]] | None = None
        self._answers: dict[str, str] = {}
        """Pod uid to the last answer relayed for it (an unchanged answer is not resent)."""
        self._ended: set[str] = set()
        self._outbox: deque[Outgoing] = deque()
        self._answers_per_incident: dict[str, int] = {}
        self.sent: list[Outgoing] = []
        """Signals delivered so far, most recent last (bounded; for tests and status)."""
        self.refused: dict[str, int] = {"answers_over_cap": 0, "outbox_full": 0}
        """Signals refused, by reason (each also logged)."""

    @property
    def pending(self) -> int:
        """Signals waiting to be sent (or sent again)."""
        return len(self._outbox)

    async def run(self, stop: asyncio.Event) -> None:
        """Relay until ``stop`` is set, then stop the watch thread."""
        self._loop = asyncio.get_running_loop()
        self._queue = asyncio.Queue()
        thread = threading.Thread(target=self.source.run, name="checkpoint-relay", daemon=True)
        thread.start()
        failures = 0
        retry_at = 0.0
        stopped = asyncio.create_task(stop.wait())
        try:
            while not stop.is_set():
                marks: list[asyncio.Future[None]] = []
                getter = asyncio.create_task(self._queue.get())
                await asyncio.wait({getter, stopped}, timeout=1.0, return_when="FIRST_COMPLETED")
                if getter.done():
                    self._take(getter.result(), marks)
                    while not self._queue.empty():
                        self._take(self._queue.get_nowait(), marks)
                else:
                    getter.cancel()
                if self._outbox and time.monotonic() >= retry_at:
                    if await self._flush():
                        failures = 0
                    else:
                        failures += 1
                        delay = min(self._backoff_initial * 2 ** (failures - 1), self._backoff_max)
                        retry_at = time.monotonic() + delay
                for mark in marks:
                    if not mark.done():
                        mark.set_result(None)
        finally:
            stopped.cancel()
            await stop_watch(self.source, thread)
            if self._outbox:
                log.warning("stopping with %d unsent signal(s)", len(self._outbox))
            while not self._queue.empty():  # nobody waits for a stopped relay
                item = self._queue.get_nowait()
                if isinstance(item, asyncio.Future) and not item.done():
                    item.set_result(None)
            self._loop = self._queue = None

    async def synced(self) -> None:
        """Return once every pod event handed on so far is examined and its signal sent.

        The clock-free what-if awaits it before simulated time moves on (see
        ``NodeConditionWatcher.synced``). Returns at once when not running.
        """
        loop, queue = self._loop, self._queue
        if loop is None or queue is None:
            return
        mark: asyncio.Future[None] = loop.create_future()
        loop.call_soon(queue.put_nowait, mark)  # behind what the watch thread handed over
        await mark

    def _take(
        self,
        item: tuple[str, dict[str, Any]] | asyncio.Future[None],
        marks: list[asyncio.Future[None]],
    ) -> None:
        if isinstance(item, asyncio.Future):
            marks.append(item)
        else:
            self._examine(*item)

    # ------------------------------------------------------------ the watch thread

    def _put(self, kind: str, obj: dict[str, Any]) -> None:
        loop, queue = self._loop, self._queue
        if loop is None or queue is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop closed: shutting down
            loop.call_soon_threadsafe(queue.put_nowait, (kind, obj))

    def _listed(self, items: list[dict[str, Any]]) -> None:
        for item in items:
            self._put("LISTED", item)
        uids = [str((item.get("metadata") or {}).get("uid") or "") for item in items]
        self._put(RESYNCED, {"uids": uids})

    def _changed(self, kind: str, obj: dict[str, Any]) -> None:
        self._put(kind, obj)

    # ------------------------------------------------------------ the event loop

    def _examine(self, kind: str, pod: dict[str, Any]) -> None:
        if kind == RESYNCED:
            if self._stragglers is not None:
                self._stragglers.resync(set(pod["uids"]), self._clock())
            return
        meta = pod.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        uid = str(meta.get("uid") or "")
        name = f"{meta.get('namespace')}/{meta.get('name')}"
        if not isinstance(annotations, dict) or not uid:
            return
        ended = kind == "DELETED" or (pod.get("status") or {}).get("phase") in _ENDED_PHASES
        marker = annotations.get(INCIDENT_ANNOTATION)
        if isinstance(marker, str) and ended and uid not in self._ended:
            self._ended.add(uid)
            target = parse_incident_id(marker, self._cluster)
            if target is not None:
                phase = "Deleted" if kind == "DELETED" else str(pod["status"]["phase"])
                report = WatchedPodEnded(pod=name[:317], request_incident=marker, phase=phase)
                self._enqueue(Outgoing(*target, Signals.WATCHED_POD_ENDED, report))
        if self._stragglers is not None and self._report_stragglers is not None:
            found = self._stragglers.observe(kind, pod, self._clock())
            if found:
                self._report_stragglers(found)
        answer = annotations.get(ANSWER_ANNOTATION)
        request = annotations.get(REQUEST_ANNOTATION)
        if kind == "DELETED":
            self._answers.pop(uid, None)
            self._ended.discard(uid)
        elif isinstance(answer, str) and isinstance(request, str):
            self._relay_answer(uid, name, answer, request)

    def _relay_answer(self, uid: str, pod: str, answer: str, request: str) -> None:
        if self._answers.get(uid) == answer:
            return
        self._answers[uid] = answer
        try:
            asked = CheckpointRequest.model_validate_json(request)
        except ValidationError:
            log.warning("%s: its checkpoint request is not ours (unreadable); not relayed", pod)
            return
        incident = asked.incident
        target = parse_incident_id(incident, self._cluster)
        if target is None:
            log.warning("%s: request names no incident of cluster %s", pod, self._cluster)
            return
        count = self._answers_per_incident.get(incident, 0)
        if count >= MAX_ANSWERS_PER_INCIDENT:
            self._refuse("answers_over_cap", f"{pod}: answer to {incident}")
            return
        if len(self._answers_per_incident) >= MAX_TRACKED_INCIDENTS:
            # Oldest first (insertion order): an incident that long ago is closed.
            del self._answers_per_incident[next(iter(self._answers_per_incident))]
        self._answers_per_incident[incident] = count + 1
        report = CheckpointAnswerReport(
            pod=pod[:317],
            request_incident=incident,
            raw=answer[:RELAYED_MAX_CHARS],
            truncated=len(answer) > RELAYED_MAX_CHARS,
            job=asked.job,
            pod_uid=uid[:64],
        )
        log.info("%s answered %s", pod, incident)
        self._enqueue(Outgoing(*target, Signals.CHECKPOINT_ANSWER, report))

    def _enqueue(self, out: Outgoing) -> None:
        """Queue a signal, or refuse it (counted, logged) when the outbox is full.

        Refusing the newest keeps the signals already waiting, the real answer
        among them, instead of silently pushing out the oldest.
        """
        if len(self._outbox) >= MAX_OUTBOX:
            self._refuse("outbox_full", f"{out.signal} to {out.workflow_id}")
            return
        self._outbox.append(out)

    def _refuse(self, reason: str, what: str) -> None:
        self.refused[reason] += 1
        count = self.refused[reason]
        if count == 1 or count % 100 == 0:
            log.warning("refused %s (%s; %d so far)", what, reason, count)

    async def _flush(self) -> bool:
        """Send the outbox in order; False when Temporal is unreachable (retry later)."""
        while self._outbox:
            out = self._outbox[0]
            handle = self._client.get_workflow_handle(out.workflow_id, run_id=out.run_id)
            try:
                await handle.signal(out.signal, out.payload)
            except RPCError as err:
                if err.status not in _FINAL:
                    log.warning("cannot signal %s (%s); will retry", out.workflow_id, err)
                    return False
                # Closed, or never was: retrying cannot help, and must not hold up the rest.
                log.info("%s/%s: %s dropped (%s)", out.workflow_id, out.run_id, out.signal, err)
            else:
                self.sent.append(out)
                del self.sent[:-1000]
            self._outbox.popleft()
        return True
