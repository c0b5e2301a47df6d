"""Start a boot's admission: the one start path of the watcher, the CLI and the incidents.

The id is derived from cluster, node and boot id, and a running admission is
used as it is (``USE_EXISTING``), so however many starters see the same new
boot there is one burn-in. A closed admission of the same boot may run again
(an incident repaired a node that failed it without a reboot).
"""

from __future__ import annotations

from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy

from gpu_remediation.admission_models import AdmissionInput
from gpu_remediation.ids import ADMISSION_WORKFLOW_TYPE, admission_workflow_id


async def start_admission(client: Client, admission: AdmissionInput, task_queue: str) -> str:
    """Start (or find running) the admission of ``admission.node`` at ``admission.boot_id``.

    Returns:
        The admission's workflow id.

    Raises:
        ValueError: If a name or the boot id is not valid.
        temporalio.service.RPCError: If Temporal refuses.
    """
    workflow_id = admission_workflow_id(admission.cluster, admission.node, admission.boot_id)
    await client.start_workflow(
        ADMISSION_WORKFLOW_TYPE,
        admission,
        id=workflow_id,
        task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        static_summary=f"burn-in of {admission.node} ({admission.trigger})",
    )
    return workflow_id
