"""Start or feed a node's incident: the one way every trigger reaches a workflow.

The watcher, the Alertmanager receiver and the CLI's manual runbooks all send
evidence through :class:`IncidentStarter`. The node's workflow id is derived
from cluster and node, so however many triggers report the same node at once
there is exactly one open incident per node, and each report is delivered once
per ``report_id`` (the workflow drops repeats).

A report for a node with no incident known to be open starts one with a plain
start carrying the report in its input: on this server a plain start costs
about 0.8 of a signal-with-start (bench/alert_storm.py), which is what an alert
storm of new nodes is made of. If the start finds the incident already running,
the report follows by signal-with-start, which is right whatever happened in
between (the incident closed: it starts a new one). Reports for incidents this
starter has already opened or fed go by signal-with-start at once.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from temporalio.client import Client, WorkflowQueryFailedError, WorkflowQueryRejectedError
from temporalio.common import QueryRejectCondition
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from gpu_remediation.ids import (
    NODE_WORKFLOW_TYPE,
    SEMAPHORE_WORKFLOW_ID,
    TASK_QUEUE,
    Queries,
    Signals,
    node_workflow_id,
    open_incidents_query,
)
from gpu_remediation.incident_summary import start_summary
from gpu_remediation.models import Evidence, EvidenceReport
from gpu_remediation.policy import Policy
from gpu_remediation.search_attributes import start_search_attributes
from gpu_remediation.visibility import ServerVisibility, Visibility
from gpu_remediation.workflow_models import NodeRemediationInput, NodeRemediationState

log = logging.getLogger("gpu_remediation.starter")

START_RACE_ATTEMPTS = 3
"""Signal-with-start attempts when a concurrent report won the start race."""

KNOWN_OPEN_INCIDENTS = 20_000
"""Workflow ids remembered as open (most recent first out last): about 2 MB.

Twice the largest fleet measured (issue 23's 10,000 nodes), so a watcher or
receiver of such a fleet keeps sending each further report in one call."""

LOOKUP_RPC_TIMEOUT = timedelta(seconds=10)
"""Longest wait for one call of ``open_incidents`` (a list page or a state query)."""

TRANSIENT_STATUSES = frozenset(
    {
        RPCStatusCode.UNAVAILABLE,
        RPCStatusCode.DEADLINE_EXCEEDED,
        RPCStatusCode.RESOURCE_EXHAUSTED,
        RPCStatusCode.ABORTED,
        RPCStatusCode.INTERNAL,
        RPCStatusCode.UNKNOWN,
        RPCStatusCode.CANCELLED,
    }
)
"""RPC statuses that mean "the server could not take it now; try again later".

INTERNAL and UNKNOWN are among them: a server that fails one call (a
persistence hiccup, a restarting history shard) takes the same call later,
and a report must not be lost to it (issue 35)."""

INVALID_STATUSES = frozenset({RPCStatusCode.INVALID_ARGUMENT})
"""RPC statuses that mean the report itself is unacceptable: retrying cannot help."""


class TemporalUnavailableError(RuntimeError):
    """Temporal did not take the report now (a transient failure); retry later."""


def is_transient(err: BaseException) -> bool:
    """Whether what failed with ``err`` may succeed if simply tried again later.

    True for :class:`TemporalUnavailableError`, an :class:`RPCError` with a
    status in :data:`TRANSIENT_STATUSES`, and connection errors (``OSError``).
    False for everything else, including refusals that need an operator
    (permissions, an unknown namespace) and invalid reports.
    """
    if isinstance(err, TemporalUnavailableError | OSError):
        return True
    return isinstance(err, RPCError) and err.status in TRANSIENT_STATUSES


def is_invalid(err: BaseException) -> bool:
    """Whether ``err`` says the report itself is invalid (never worth retrying).

    True for a ``ValueError`` (a pydantic validation failure, an invalid node
    name) and an :class:`RPCError` with a status in :data:`INVALID_STATUSES`
    (a payload the workflow cannot accept).
    """
    if isinstance(err, ValueError):
        return True
    return isinstance(err, RPCError) and err.status in INVALID_STATUSES


class IncidentStarter:
    """Start node workflows with evidence, or feed the open one.

    Args:
        client: Temporal client (with the pydantic data converter).
        cluster: Cluster name, part of every node workflow id.
        policy: Policy the incident runs under if this report starts it.
        task_queue: Task queue of the remediation workers.
        semaphore_workflow_id: The replacement semaphore the incidents share.
        visibility: Where running incidents are listed; None: the server's visibility.
    """

    def __init__(
        self,
        client: Client,
        *,
        cluster: str,
        policy: Policy,
        task_queue: str = TASK_QUEUE,
        semaphore_workflow_id: str = SEMAPHORE_WORKFLOW_ID,
        visibility: Visibility | None = None,
    ) -> None:
        self._client = client
        self._visibility = visibility or ServerVisibility(client)
        self._cluster = cluster
        self._policy = policy
        self._task_queue = task_queue
        self._semaphore_workflow_id = semaphore_workflow_id
        # Ids this starter opened or fed: a hint only (the incident may have
        # closed since), used to skip a start that would find it running.
        self._known_open: OrderedDict[str, None] = OrderedDict()

    @property
    def cluster(self) -> str:
        """The cluster this starter reports for."""
        return self._cluster

    @property
    def policy(self) -> Policy:
        """The policy new incidents run under."""
        return self._policy

    @property
    def task_queue(self) -> str:
        """The remediation workers' task queue (admissions run there too)."""
        return self._task_queue

    @property
    def semaphore_workflow_id(self) -> str:
        """The replacement semaphore the incidents share."""
        return self._semaphore_workflow_id

    def workflow_id(self, node: str) -> str:
        """Return the id of ``node``'s incident workflow.

        Raises:
            ValueError: If the node name is not a valid Kubernetes node name.
        """
        return node_workflow_id(self._cluster, node)

    async def report(
        self,
        node: str,
        evidence: Sequence[Evidence],
        *,
        report_id: str | None = None,
        pool: str | None = None,
    ) -> str:
        """Deliver evidence to the node's incident, starting one if none is open.

        Args:
            node: Kubernetes node name.
            evidence: What was observed (at least one item).
            report_id: Idempotency key: a report with an id the incident has
                already seen is dropped by the workflow. ``None`` generates one.
            pool: The node's pool, when the trigger knows it (named in the
                incident's summary in the Temporal UI).

        Returns:
            The workflow id of the node's incident.

        Raises:
            ValueError: If the node name or the evidence is invalid.
            TemporalUnavailableError: If Temporal could not take the report now
                (any status of :data:`TRANSIENT_STATUSES`; retry later).
            temporalio.service.RPCError: For any other refusal by the server:
                INVALID_ARGUMENT for a report the workflow cannot accept
                (:func:`is_invalid`), else permissions, an unknown namespace
                and the like (the report is fine, the setup is not).
        """
        # Validate before touching Temporal: a bad report must start nothing.
        report = _evidence_report(node, evidence, report_id)
        workflow_id = self.workflow_id(report.node)
        if workflow_id in self._known_open or not await self._start(workflow_id, report, pool):
            await self._signal_with_start(workflow_id, report, pool)
        self._remember_open(workflow_id)
        return workflow_id

    def _start_options(
        self, workflow_id: str, report: EvidenceReport, pool: str | None
    ) -> dict[str, Any]:
        """What a start sets beyond the input; only a report that starts the incident sets it.

        The summary, details and search attributes are what the UI's list and
        incident page show before triage has read the node (signal-with-start
        ignores them for a running incident).
        """
        summary, details = start_summary(report.node, report.evidence, self._policy, pool)
        return {
            "id": workflow_id,
            "task_queue": self._task_queue,
            "static_summary": summary,
            "static_details": details,
            "search_attributes": start_search_attributes(self._cluster, report.node),
        }

    def _input(self, report: EvidenceReport, *, carry: bool) -> NodeRemediationInput:
        return NodeRemediationInput(
            cluster=self._cluster,
            node=report.node,
            policy=self._policy,
            semaphore_workflow_id=self._semaphore_workflow_id,
            evidence=report if carry else None,
        )

    async def _start(self, workflow_id: str, report: EvidenceReport, pool: str | None) -> bool:
        """Start the incident with the report in its input; False if one is running."""
        try:
            await self._client.start_workflow(
                NODE_WORKFLOW_TYPE,
                self._input(report, carry=True),
                **self._start_options(workflow_id, report, pool),
            )
        except WorkflowAlreadyStartedError:
            return False
        except RPCError as err:
            _raise_if_unavailable(err)
            raise
        return True

    async def _signal_with_start(
        self, workflow_id: str, report: EvidenceReport, pool: str | None
    ) -> None:
        """Signal the running incident, or start one with the report as its first signal."""
        for attempt in range(1, START_RACE_ATTEMPTS + 1):
            try:
                await self._client.start_workflow(
                    NODE_WORKFLOW_TYPE,
                    self._input(report, carry=False),
                    start_signal=Signals.EVIDENCE,
                    start_signal_args=[report],
                    **self._start_options(workflow_id, report, pool),
                )
                return
            except WorkflowAlreadyStartedError:
                # Lost a start race to a concurrent report (seen on the
                # time-skipping server): the incident exists now, so the next
                # signal-with-start only signals it. The report id keeps it once.
                if attempt == START_RACE_ATTEMPTS:
                    raise TemporalUnavailableError(
                        f"{workflow_id}: lost the start race {attempt} times; retry"
                    ) from None
            except RPCError as err:
                _raise_if_unavailable(err)
                raise

    def _remember_open(self, workflow_id: str) -> None:
        self._known_open[workflow_id] = None
        self._known_open.move_to_end(workflow_id)
        while len(self._known_open) > KNOWN_OPEN_INCIDENTS:
            self._known_open.popitem(last=False)

    async def open_incidents(self) -> list[NodeRemediationState]:
        """The state of every running incident of this cluster.

        Found through visibility (``open_incidents_query``), then each is
        queried. An
        incident that closes in between is left out. Visibility lags a little:
        an incident started in the last second may be missing.

        Raises:
            TemporalUnavailableError: If Temporal could not answer now.
            temporalio.service.RPCError: For any other refusal by the server.
        """
        query = open_incidents_query(self._cluster)
        states: list[NodeRemediationState] = []
        try:
            async for execution in self._visibility.list(query, rpc_timeout=LOOKUP_RPC_TIMEOUT):
                handle = self._client.get_workflow_handle(execution.id, run_id=execution.run_id)
                try:
                    states.append(
                        await handle.query(
                            Queries.STATE,
                            result_type=NodeRemediationState,
                            reject_condition=QueryRejectCondition.NOT_OPEN,
                            # Answered by a worker: with none up, fail (and be
                            # retried) rather than hang the lookup.
                            rpc_timeout=LOOKUP_RPC_TIMEOUT,
                        )
                    )
                except WorkflowQueryRejectedError:
                    continue  # closed since it was listed
                except WorkflowQueryFailedError as err:
                    # One incident's broken state must not hide the others'.
                    log.warning("incident %s did not answer its state query: %s", execution.id, err)
                    continue
                except RPCError as err:
                    if err.status == RPCStatusCode.NOT_FOUND:
                        continue
                    raise
        except RPCError as err:
            _raise_if_unavailable(err)
            raise
        return states

    async def report_recovery(
        self, node: str, evidence: Sequence[Evidence], *, report_id: str | None = None
    ) -> bool:
        """Deliver recovery evidence to the node's open incident; never start one.

        A recovery with no incident open is not news (it would open an empty
        incident only to close it), so it is dropped.

        Args:
            node: Kubernetes node name.
            evidence: The cleared evidence (at least one item).
            report_id: Idempotency key, as for :meth:`report`.

        Returns:
            True if an open incident received it; False if none was open.

        Raises:
            ValueError: If the node name or the evidence is invalid.
            TemporalUnavailableError: If Temporal could not take the report now
                (any status of :data:`TRANSIENT_STATUSES`; retry later).
            temporalio.service.RPCError: For any other refusal by the server:
                INVALID_ARGUMENT for a report the workflow cannot accept
                (:func:`is_invalid`), else permissions, an unknown namespace
                and the like (the report is fine, the setup is not).
        """
        report = _evidence_report(node, evidence, report_id)
        handle = self._client.get_workflow_handle(self.workflow_id(report.node))
        try:
            await handle.signal(Signals.EVIDENCE, report)
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return False
            _raise_if_unavailable(err)
            raise
        return True


def _raise_if_unavailable(err: RPCError) -> None:
    """Raise TemporalUnavailableError from ``err`` when retrying later can help."""
    if err.status == RPCStatusCode.UNAVAILABLE:
        raise TemporalUnavailableError(f"Temporal unavailable: {err.message}") from err
    if err.status in TRANSIENT_STATUSES:
        raise TemporalUnavailableError(
            f"Temporal unavailable for now ({err.status.name}): {err.message}"
        ) from err


def _evidence_report(
    node: str, evidence: Sequence[Evidence], report_id: str | None
) -> EvidenceReport:
    """Validate a report; without an id the model generates one."""
    fields: dict[str, object] = {"node": node, "evidence": list(evidence)}
    if report_id is not None:
        fields["report_id"] = report_id
    return EvidenceReport.model_validate(fields)
