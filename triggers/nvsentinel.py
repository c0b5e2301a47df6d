"""NVSentinel's hand-overs into incidents, and each incident's outcome back onto its request.

NVIDIA's NVSentinel can hand a node to an external remediator with an
``ExternalRemediationRequest`` (gpu_remediation/nvsentinel.py says which design and
CRD). Run beside the node-condition watcher (``remediate watch --nvsentinel``), this
relay lists and watches those requests and, for each one nobody has completed:

1. checks the request: a valid health event naming a node the watcher watches (a GPU
   node of its selector); otherwise the request is completed ``False`` at once, with
   the reason (``InvalidRequest``, ``NodeNotWatched``), so NVSentinel does not wait;
2. records on the request that it took it (annotation ``gpu-remediation.io/
   picked-up-at``, written with the request's resourceVersion as precondition, so two
   relays cannot both take it), then reports its health event as evidence to the
   node's incident (report id ``nvsentinel-<uid>``: delivered twice, counted once);
3. once the incident that took the report has its outcome (closed, or still running
   while it watches the node for a relapse), writes the condition
   ``ExternalRemediationComplete`` on the request's status: ``True`` when the node was
   repaired, recovered, replaced or found healthy, ``False`` when it was handed to a
   person or nothing was done (reason: the outcome), with the incident's workflow id in
   the message. Whether a run took the report is read from Temporal (its state, or a
   closed run's history), never from clocks: a node incident that closed without it
   leaves the request to an incident of its own.

Crash-safe by the annotation: a restarted relay reports a taken request again while
its incident is open (the report id keeps it once) or never started, and writes the
outcome of one that ended meanwhile. Temporal or the API server away: the request is
retried at the next pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
)
from temporalio.common import QueryRejectCondition
from temporalio.service import RPCError, RPCStatusCode

from gpu_remediation import nvsentinel as nvs
from gpu_remediation.evidence_history import received_reports
from gpu_remediation.ids import Queries
from gpu_remediation.models import NvSentinelEvidence, Outcome
from gpu_remediation.workflow_models import (
    NodeRemediationInput,
    NodeRemediationResult,
    NodeRemediationState,
)
from triggers.list_watch import ListWatch, stop_watch
from triggers.starter import IncidentStarter, TemporalUnavailableError, is_transient

log = logging.getLogger("gpu_remediation.nvsentinel")

REPORT_PREFIX = "nvsentinel-"
MESSAGE_CHARS = 1024
"""Length of a condition message written back (the API allows 32,768)."""
REQUEST_TIMEOUT = 30.0
"""Seconds a write to the API server may take before the pass gives up on it."""
QUERY_TIMEOUT = timedelta(seconds=5)
"""An incident's state query: answered by a worker; none up, ask at the next pass."""


class ExternalRemediationRelay:
    """Takes NVSentinel's requests into incidents and answers them when the incidents end.

    Args:
        api_client: The Kubernetes client.
        starter: Starts or feeds the node's incident.
        client: Temporal, to read how the incident ended.
        watches: Whether the watcher watches a node (only those are taken).
        ready: Whether the watcher has listed its nodes (nothing is judged before).
        clock: Now, on the clock the incidents' times are read on.
        poll_interval: Seconds between passes over the open requests.
        watch_timeout: Seconds each watch request lasts before it is resumed.
    """

    def __init__(
        self,
        api_client: k8s.ApiClient,
        starter: IncidentStarter,
        client: Client,
        *,
        watches: Callable[[str], bool],
        ready: Callable[[], bool],
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        poll_interval: float = 10.0,
        watch_timeout: int = 300,
    ) -> None:
        self._custom = k8s.CustomObjectsApi(api_client)
        self._starter = starter
        self._client = client
        self._watches = watches
        self._ready = ready
        self._clock = clock
        self._poll_interval = poll_interval
        self._lock = threading.Lock()
        self._requests: dict[str, dict[str, Any]] = {}
        """Open requests by name, as last seen (written by the watch thread)."""
        self._delivered: set[str] = set()
        """Requests reported by this process (a restarted one reports taken ones again)."""
        self.answered = 0
        """Requests this relay completed."""
        self.source = ListWatch(
            self._list_requests,
            "",
            self._listed,
            self._changed,
            kind="externalremediationrequest",
            watch_timeout=watch_timeout,
        )

    async def run(self, stop: asyncio.Event) -> None:
        """Relay until ``stop`` is set, then stop the watch thread."""
        thread = threading.Thread(target=self.source.run, name="nvsentinel-relay", daemon=True)
        thread.start()
        try:
            while not stop.is_set():
                if self._ready() and self.source.lists:
                    await self.pass_once()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=self._poll_interval)
        finally:
            await stop_watch(self.source, thread)

    async def pass_once(self) -> None:
        """Take, report or answer every open request once."""
        with self._lock:
            pending = list(self._requests.values())
        for raw in pending:
            name = (raw.get("metadata") or {}).get("name")
            try:
                await self._process(raw)
            except (TemporalUnavailableError, RPCError) as err:
                if isinstance(err, TemporalUnavailableError) or is_transient(err):
                    log.warning("Temporal unavailable (%s); retrying the requests next pass", err)
                    return
                log.error("request %s: Temporal refused (%s); retrying next pass", name, err)
            except ApiException as err:
                log.warning(
                    "request %s: Kubernetes API %s %s; retrying", name, err.status, err.reason
                )
            except Exception:
                # Whatever else (the API server unreachable mid-call, a bug): this request
                # waits for the next pass, the others and the watcher go on.
                log.exception("request %s: not handled this pass", name)

    # ------------------------------------------------------------- watch thread

    def _list_requests(self, **kwargs: Any) -> Any:
        return self._custom.list_cluster_custom_object(nvs.GROUP, nvs.VERSION, nvs.PLURAL, **kwargs)

    def _listed(self, items: list[dict[str, Any]]) -> None:
        with self._lock:
            self._requests = {}
            for item in items:
                self._keep(item)

    def _changed(self, kind: str, obj: dict[str, Any]) -> None:
        with self._lock:
            if kind == "DELETED":
                name = str((obj.get("metadata") or {}).get("name"))
                self._requests.pop(name, None)
                self._delivered.discard(name)
            else:
                self._keep(obj)

    def _keep(self, obj: dict[str, Any]) -> None:
        name = (obj.get("metadata") or {}).get("name")
        if not isinstance(name, str) or not name:
            return
        conditions = (obj.get("status") or {}).get("conditions") or []
        done = any(
            isinstance(c, dict)
            and c.get("type") == nvs.COMPLETE
            and c.get("status") in ("True", "False")
            for c in conditions
        )
        if done:
            self._requests.pop(name, None)
        else:
            self._requests[name] = obj

    # ------------------------------------------------------------------ a pass

    async def _process(self, raw: dict[str, Any]) -> None:
        try:
            request = nvs.parse_request(raw)
        except ValueError as err:
            await self._refuse(raw, "InvalidRequest", str(err))
            return
        taken = request.picked_up_at()
        if taken is None:
            if not self._watches(request.node):
                await self._refuse(
                    raw,
                    "NodeNotWatched",
                    f"{request.node} is not a node gpu-remediation watches (its GPU node selector)",
                )
                return
            taken = self._clock()
            raw = await self._take(request, taken)
            await self._report(nvs.parse_request(raw), taken)
            return
        workflow_id = self._starter.workflow_id(request.node)
        handle = self._client.get_workflow_handle(workflow_id)
        try:
            description = await handle.describe()
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
            await self._report(request, taken)  # taken, but the report never landed
            return
        status = description.status
        report_id = f"{REPORT_PREFIX}{request.metadata.uid}"
        if status in (
            None,
            WorkflowExecutionStatus.RUNNING,
            WorkflowExecutionStatus.CONTINUED_AS_NEW,
        ):
            if request.metadata.name not in self._delivered:
                await self._report(request, taken)  # after a restart: the id keeps it once
                return
            # An incident keeps running a while after its outcome (it watches the node
            # for a relapse): answer once it has taken this request and has an outcome.
            outcome = await self._settled_outcome(handle, request.metadata.name)
            if outcome is not None:
                answer, reason = nvs.completion(outcome)
                message = f"gpu-remediation incident {workflow_id}: {outcome.value}"
                await self._answer(raw, answer, reason, message)
            return
        # The latest run has closed: its answer is the request's only if it took the
        # report (another incident of the node may have closed without it, e.g. when
        # the report failed and the relay restarted). Otherwise report it again: the
        # node gets an incident of its own for NVSentinel's word.
        closed_run = self._client.get_workflow_handle(
            workflow_id, run_id=description.run_id, result_type=NodeRemediationResult
        )
        if not await _run_took(closed_run, report_id):
            await self._report(request, taken)
            return
        outcome = None
        if status == WorkflowExecutionStatus.COMPLETED:
            outcome = (await closed_run.result(follow_runs=False)).outcome
        answer, reason = nvs.completion(outcome)
        ended = outcome.value if outcome is not None else (status.name.lower() if status else "?")
        await self._answer(raw, answer, reason, f"gpu-remediation incident {workflow_id}: {ended}")

    async def _settled_outcome(self, handle: Any, request: str) -> Outcome | None:
        """The running incident's outcome, once it holds this request's evidence."""
        try:
            state = await handle.query(
                Queries.STATE,
                result_type=NodeRemediationState,
                reject_condition=QueryRejectCondition.NOT_OPEN,
                rpc_timeout=QUERY_TIMEOUT,
            )
        except (WorkflowQueryRejectedError, WorkflowQueryFailedError, RPCError) as err:
            log.info("incident of %s did not answer its state (%s); asking later", request, err)
            return None
        took = any(
            isinstance(e, NvSentinelEvidence) and e.request == request for e in state.evidence
        )
        outcome: Outcome | None = state.outcome
        return outcome if took else None

    async def _take(
        self, request: nvs.ExternalRemediationRequest, taken: datetime
    ) -> dict[str, Any]:
        body = {
            "metadata": {
                "resourceVersion": request.metadata.resource_version,
                "annotations": {nvs.PICKED_UP_ANNOTATION: taken.isoformat()},
            }
        }
        updated: dict[str, Any] = await asyncio.to_thread(
            self._custom.patch_cluster_custom_object,
            nvs.GROUP,
            nvs.VERSION,
            nvs.PLURAL,
            request.metadata.name,
            body,
            _request_timeout=REQUEST_TIMEOUT,
        )
        log.info("took %s for node %s", request.metadata.name, request.node)
        with self._lock:
            current = self._requests.get(request.metadata.name)
            sent = request.metadata.resource_version
            # The watch may have brought a newer version meanwhile: keep that one.
            if (
                current is not None
                and (current.get("metadata") or {}).get("resourceVersion") == sent
            ):
                self._requests[request.metadata.name] = updated
        return updated

    async def _report(self, request: nvs.ExternalRemediationRequest, taken: datetime) -> None:
        # Never dated after the relay's clock (an annotation written by hand could be).
        await self._starter.report(
            request.node,
            [nvs.evidence(request, min(taken, self._clock()))],
            report_id=f"{REPORT_PREFIX}{request.metadata.uid}",
        )
        self._delivered.add(request.metadata.name)

    async def _refuse(self, raw: dict[str, Any], reason: str, message: str) -> None:
        name = (raw.get("metadata") or {}).get("name")
        log.warning("request %s refused (%s): %s", name, reason, message)
        await self._answer(raw, "False", reason, message)

    async def _answer(self, raw: dict[str, Any], status: str, reason: str, message: str) -> None:
        """Write ``ExternalRemediationComplete`` (the request's other conditions kept)."""
        metadata = raw.get("metadata") or {}
        name = metadata.get("name")
        if not isinstance(name, str) or not name:
            return
        now = (
            self._clock().astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
        )
        kept = [
            c
            for c in (raw.get("status") or {}).get("conditions") or []
            if isinstance(c, dict) and c.get("type") != nvs.COMPLETE
        ]
        generation = metadata.get("generation")
        condition: dict[str, Any] = {
            "type": nvs.COMPLETE,
            "status": status,
            "reason": reason,
            "message": message[:MESSAGE_CHARS],
            "lastTransitionTime": now,
        }
        if isinstance(generation, int):
            condition["observedGeneration"] = generation
        body = {
            "metadata": {"resourceVersion": metadata.get("resourceVersion")},
            "status": {"conditions": [*kept, condition], "completionTime": now},
        }
        try:
            await asyncio.to_thread(
                self._custom.patch_cluster_custom_object_status,
                nvs.GROUP,
                nvs.VERSION,
                nvs.PLURAL,
                name,
                body,
                _request_timeout=REQUEST_TIMEOUT,
            )
        except ApiException as err:
            if err.status == 404:
                with self._lock:
                    self._requests.pop(name, None)
                return
            raise
        log.info("answered %s: %s=%s (%s)", name, nvs.COMPLETE, status, reason)
        self.answered += 1
        with self._lock:
            self._requests.pop(name, None)
        self._delivered.discard(name)


async def _run_took(run: Any, report_id: str) -> bool:
    """Whether a closed incident run took the report (start, signal, or carried over).

    Carried over: the run it continued passed its record's report ids along.
    """
    events = (await run.fetch_history()).events
    if any(report.report_id == report_id for report, _ in received_reports(events)):
        return True
    started = events[0].workflow_execution_started_event_attributes if events else None
    if started is None or not started.input.payloads:
        return False
    carried = NodeRemediationInput.model_validate_json(started.input.payloads[0].data).continued
    state = carried.state if carried is not None else {}
    return report_id in ((state.get("record") or {}).get("report_ids") or [])
