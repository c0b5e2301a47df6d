"""Activities that talk to Temporal itself.

Workflow code cannot start an unrelated workflow idempotently (a child would
be tied to its parent's lifetime), so holders make sure the singleton
semaphore runs through this activity.
"""

from __future__ import annotations

from temporalio import activity
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy

from gpu_remediation.contracts import EnsureSemaphoreInput
from gpu_remediation.ids import Activities
from gpu_remediation.semaphore_models import SemaphoreInput
from workflows.replacement_semaphore import ReplacementSemaphoreWorkflow


class TemporalActivities:
    """Activities needing a Temporal client (injected: it carries the data converter)."""

    def __init__(self, client: Client) -> None:
        """Keep the client used to start workflows.

        Args:
            client: A client using the pydantic data converter.
        """
        self._client = client

    @activity.defn(name=Activities.ENSURE_SEMAPHORE)
    async def ensure_semaphore(self, input: EnsureSemaphoreInput) -> None:
        """Start the replacement semaphore unless it is already running.

        Idempotent: a running semaphore is left as it is (its capacity too; use
        the ``set_capacity`` update to change it). The semaphore runs on this
        activity's task queue, whose worker registers it.

        Args:
            input: Capacity for a newly started semaphore, and its workflow id.
        """
        handle = await self._client.start_workflow(
            ReplacementSemaphoreWorkflow.run,
            SemaphoreInput(capacity=input.capacity),
            id=input.workflow_id,
            task_queue=activity.info().task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            static_summary="Fleet-wide cap on concurrent node replacements",
        )
        activity.logger.info(
            "Replacement semaphore %s running as run %s", handle.id, handle.result_run_id
        )
