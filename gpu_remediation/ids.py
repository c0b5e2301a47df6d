"""Identifiers shared by workflows, activities, workers and clients.

Workflow ids, task queues, activity names and search-attribute keys live here
so that every starter (CLI, watcher, receiver, tests) and every worker agree.
"""

from __future__ import annotations

import re

TASK_QUEUE = "gpu-remediation"

WORKER_POLLING = "worker polling task queue"
"""The worker's log line (then the queue) once it polls: readiness where the server
cannot describe a task queue (the time-skipping test server)."""

SEMAPHORE_WORKFLOW_ID = "gpu-remediation/replacement-semaphore"


def step_semaphore_id(semaphore_workflow_id: str, step: str) -> str:
    """The id of the semaphore that caps one disruptive step (drain, reset, reboot).

    It sits beside the replacement semaphore ``semaphore_workflow_id`` (issue 35),
    one segment like it: ``gpu-remediation/<a>/<b>`` is a node workflow's id.
    """
    return f"{semaphore_workflow_id}-{step}"


SEMAPHORE_WORKFLOW_TYPE = "ReplacementSemaphoreWorkflow"
"""Workflow type of the replacement semaphore (``ensure_semaphore`` starts it by this name,
so the activities import no workflow module)."""

PERMIT_GUARD_WORKFLOW_TYPE = "PermitGuardWorkflow"
"""Workflow type of a permit holder's guard child (``ParentClosePolicy.REQUEST_CANCEL``;
the clock-free comparison applies that policy itself, ``whatif.parent_close``)."""

NODE_WORKFLOW_TYPE = "NodeRemediation"
"""Workflow type of the per-node incident (starters that do not import the workflow use it)."""

ADMISSION_WORKFLOW_TYPE = "NodeAdmission"
"""Workflow type of a node's burn-in before it takes work (one per node and boot)."""

STARTUP_TAINT_KEY = "gpu-remediation.io/admission"
"""The startup taint (NoSchedule) Karpenter NodePools put on new nodes; removed by admission."""

INCIDENT_HOLD_TAINT_VALUE = "held-by-incident"
"""Value of the startup taint when an incident put it on (a reboot or repair it hands to
admission): the incident starts that admission itself, with what it knows (trigger, the
diag level it already verified), so the watcher leaves such a node alone."""

ADMITTED_BOOT_ANNOTATION = "gpu-remediation.io/admitted-boot"
"""On a Node: the boot id whose burn-in passed (absent: the node was never admitted)."""

_NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_CLUSTER_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,98}[A-Za-z0-9])?$")


def is_valid_node_name(name: str) -> bool:
    """Return whether ``name`` is a valid Kubernetes node name (RFC 1123 subdomain)."""
    return bool(_NODE_NAME.fullmatch(name)) and all(
        part and len(part) <= 63 for part in name.split(".")
    )


def node_workflow_id(cluster: str, node: str) -> str:
    """Return the id of the one remediation workflow a node may have.

    Args:
        cluster: Cluster name, so several clusters can share one namespace.
        node: Kubernetes node name.

    Raises:
        ValueError: If either name is not valid.
    """
    if not _CLUSTER_NAME.fullmatch(cluster):
        raise ValueError(f"invalid cluster name {cluster!r}")
    if not is_valid_node_name(node):
        raise ValueError(f"invalid node name {node!r}")
    return f"gpu-remediation/{cluster}/{node}"


def node_workflow_id_prefix(cluster: str) -> str:
    """Return the workflow id prefix shared by all of a cluster's incidents.

    Raises:
        ValueError: If the cluster name is not valid.
    """
    # Derived from node_workflow_id so the two can never disagree.
    return node_workflow_id(cluster, "n").removesuffix("n")


def open_incidents_query(cluster: str) -> str:
    """Return the visibility query for a cluster's running incidents.

    Matched by workflow id prefix rather than the ``GpuCluster`` search
    attribute, which is only set after triage: an incident stuck before that
    is exactly one that must be found.

    Raises:
        ValueError: If the cluster name is not valid.
    """
    return (
        f"WorkflowType = '{NODE_WORKFLOW_TYPE}' AND ExecutionStatus = 'Running' "
        f"AND WorkflowId STARTS_WITH '{node_workflow_id_prefix(cluster)}'"
    )


def admission_workflow_id(cluster: str, node: str, boot_id: str) -> str:
    """Return the id of the admission (burn-in) of one boot of a node.

    Raises:
        ValueError: If a name is not valid or the boot id is empty or odd.
    """
    if not re.fullmatch(r"[A-Za-z0-9-]{1,64}", boot_id):
        raise ValueError(f"invalid boot id {boot_id!r}")
    return f"{node_workflow_id(cluster, node)}/admission/{boot_id}"


def admissions_query(cluster: str, *, running: bool = False) -> str:
    """Return the visibility query for a cluster's admissions (only running ones if asked).

    Raises:
        ValueError: If the cluster name is not valid.
    """
    query = (
        f"WorkflowType = '{ADMISSION_WORKFLOW_TYPE}' "
        f"AND WorkflowId STARTS_WITH '{node_workflow_id_prefix(cluster)}'"
    )
    return query + (" AND ExecutionStatus = 'Running'" if running else "")


def guard_workflow_id(holder_workflow_id: str, request_id: str) -> str:
    """Return the id of the guard child that releases a holder's permit."""
    return f"{holder_workflow_id}/permit-guard/{request_id}"


class Activities:
    """Activity names: the contract between workflows and activity implementations."""

    READ_NODE_HEALTH = "read_node_health"
    QUARANTINE_NODE = "quarantine_node"
    RELEASE_NODE = "release_node"
    DRAIN_GPU_PODS = "drain_gpu_pods"
    RESET_GPUS = "reset_gpus"
    REBOOT_NODE = "reboot_node"
    RUN_DIAGNOSTIC = "run_diagnostic"
    RUN_EFA_LOOPBACK = "run_efa_loopback"
    RECORD_STEP = "record_step"
    DELETE_NODE_CLAIM = "delete_node_claim"
    WAIT_FOR_REPLACEMENT = "wait_for_replacement"
    CHECK_BREAKER = "check_breaker"
    ESCALATE = "escalate"
    NOTIFY_WORKLOAD_OWNER = "notify_workload_owner"
    NOTIFY_HAND_OVER = "notify_hand_over"
    ENSURE_SEMAPHORE = "ensure_semaphore"
    LOOKUP_NODE_HISTORY = "lookup_node_history"
    COUNT_REPLACEMENTS = "count_replacements"
    FIND_NODE_JOBS = "find_node_jobs"
    REQUEST_CHECKPOINT = "request_checkpoint"
    WITHDRAW_CHECKPOINT = "withdraw_checkpoint"
    HOLD_FOR_ADMISSION = "hold_for_admission"
    CHECK_EFA = "check_efa"
    RUN_NCCL_CHECK = "run_nccl_check"
    ADMIT_NODE = "admit_node"
    HAND_TO_INCIDENT = "hand_to_incident"
    START_ADMISSION = "start_admission"

    @staticmethod
    def rung_step(rung: str) -> str:
        """The activity of a rung whose table entry's action is ``activity`` (``rungs.py``).

        Named by convention, so a new rung's activity needs no constant here:
        ``@activity.defn(name=Activities.rung_step(Rung.X))``.
        """
        return f"run_rung_{rung}"


class Signals:
    """Signal names on the node workflow and the semaphore."""

    EVIDENCE = "add_evidence"
    PERMIT_GRANTED = "permit_granted"
    REQUEST_PERMIT = "request_permit"
    RELEASE_PERMIT = "release_permit"
    DISMISS_GUARD = "dismiss_guard"
    CHECKPOINT_ANSWER = "checkpoint_answer"
    WATCHED_POD_ENDED = "watched_pod_ended"


class Updates:
    """Update names (validated operator requests)."""

    PAUSE = "pause"
    RESUME = "resume"
    APPROVE = "approve"
    SKIP_TO = "skip_to"
    RETRY_STEP = "retry_step"
    ABORT = "abort"
    SET_CAPACITY = "set_capacity"
    FORCE_RELEASE = "force_release"
    SKIP_BURN_IN = "skip_burn_in"


class Queries:
    """Query names."""

    STATE = "state"
    ADMISSION_STATE = "admission_state"
