"""Temporal side of node admission: hand a failed node to its incident, start an admission.

Workflow code cannot signal-with-start another workflow, nor start an
unrelated one that outlives it, so both go through activities. Both are
idempotent: the incident drops a report id it has seen, and a running
admission of the same boot is used as it is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError

from gpu_remediation import admission_models as a
from gpu_remediation.admission_start import start_admission
from gpu_remediation.ids import NODE_WORKFLOW_TYPE, Activities, Signals, node_workflow_id
from gpu_remediation.models import EvidenceReport
from gpu_remediation.workflow_models import NodeRemediationInput

START_RACE_ATTEMPTS = 3


class AdmissionTemporalActivities:
    """Admission's activities that need a Temporal client (injected, with the data converter)."""

    def __init__(self, client: Client) -> None:
        """Keep the client.

        Args:
            client: A client using the pydantic data converter.
        """
        self._client = client

    def all(self) -> list[Callable[..., Any]]:
        """Every activity of this class, for a worker's registration."""
        return [self.hand_to_incident, self.start_admission]

    @activity.defn(name=Activities.HAND_TO_INCIDENT)
    async def hand_to_incident(self, input: a.HandToIncidentInput) -> a.HandToIncidentResult:
        """Signal-with-start the node's incident with the failed burn-in as evidence."""
        workflow_id = node_workflow_id(input.cluster, input.node)
        report = EvidenceReport(node=input.node, evidence=input.evidence, report_id=input.report_id)
        for attempt in range(1, START_RACE_ATTEMPTS + 1):
            try:
                await self._client.start_workflow(
                    NODE_WORKFLOW_TYPE,
                    NodeRemediationInput(
                        cluster=input.cluster,
                        node=input.node,
                        policy=input.policy,
                        semaphore_workflow_id=input.semaphore_workflow_id,
                    ),
                    id=workflow_id,
                    task_queue=activity.info().task_queue,
                    start_signal=Signals.EVIDENCE,
                    start_signal_args=[report],
                )
                break
            except WorkflowAlreadyStartedError:
                # A concurrent start won the race: the next signal-with-start signals it.
                if attempt == START_RACE_ATTEMPTS:
                    raise
        return a.HandToIncidentResult(workflow_id=workflow_id)

    @activity.defn(name=Activities.START_ADMISSION)
    async def start_admission(self, input: a.StartAdmissionInput) -> a.StartAdmissionResult:
        """Start the admission of a boot unless it is already running (on this task queue)."""
        try:
            workflow_id = await start_admission(
                self._client, input.admission, activity.info().task_queue
            )
        except ValueError as err:
            raise ApplicationError(str(err), type="InvalidInput", non_retryable=True) from err
        return a.StartAdmissionResult(workflow_id=workflow_id)
