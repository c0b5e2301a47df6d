"""Activity contracts: one ``<Verb>Input`` per activity and its result model.

Workflows call activities by the names in ``gpu_remediation.ids.Activities``
with these models; implementations (Kubernetes, AWS, test doubles) register
under the same names. Every input carries what the activity needs to be
idempotent (an incident id, the boot id seen before a reboot, ...).
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from gpu_remediation.ids import SEMAPHORE_WORKFLOW_ID
from gpu_remediation.models import Evidence, FaultClass, GpuIndex, Model, NodeName, Rung
from gpu_remediation.policy import NotifyPolicy
from gpu_remediation.workflow_models import RungAttempt

QUARANTINE_TAINT_KEY = "gpu-remediation.io/quarantine"


class NodePin(Model):
    """The machine an incident is about: the Node object's UID and its provider id.

    A node name is reused (EC2 names nodes by private IP): a new instance that
    registers under the name is another Node object, with another UID and
    provider id. Mutating activities refuse a node that does not match its
    incident's pin (``NodeReplaced``), so an old incident never acts on it.
    """

    uid: str = Field(max_length=128)
    provider_id: str = Field(max_length=256)


class NodeInput(Model):
    """Base of every activity input that names a node."""

    node: NodeName
    incident_id: str = Field(min_length=1, max_length=512)
    pin: NodePin | None = Field(
        default=None,
        description="The machine the incident pinned at triage; None before triage (reads).",
    )


class NodeConditionState(Model):
    """One node condition as read from the API."""

    type: str
    status: str
    reason: str = ""
    message: str = ""
    last_transition_time: datetime | None = None


class ReadNodeHealthInput(NodeInput):
    """Read the node's health as Kubernetes sees it."""


class NodeHealth(Model):
    """A node's state relevant to remediation."""

    exists: bool
    ready: bool = False
    uid: str = Field(default="", description="The Node object's metadata.uid.")
    boot_id: str = ""
    provider_id: str = ""
    node_pool: str | None = None
    unschedulable: bool = False
    conditions: list[NodeConditionState] = Field(default_factory=list)


class QuarantineNodeInput(NodeInput):
    """Cordon the node and add the NoSchedule quarantine taint."""

    taint_key: str = QUARANTINE_TAINT_KEY
    held: bool = Field(
        default=False,
        description="The incident is held by an open breaker: marked so that the quarantine "
        "alone does not count the node as unhealthy (held nodes must not keep the breaker "
        "open by themselves).",
    )


class QuarantineResult(Model):
    """What quarantine changed, so release undoes only that."""

    was_already_cordoned: bool
    taint_added: bool


class ReleaseNodeInput(NodeInput):
    """Remove the quarantine taint and, unless told otherwise, uncordon."""

    taint_key: str = QUARANTINE_TAINT_KEY
    uncordon: bool = True


class ReleaseResult(Model):
    """What release changed."""

    taint_removed: bool
    uncordoned: bool


class DrainGpuPodsInput(NodeInput):
    """Evict the GPU pods on the node (PDB-aware, bounded)."""

    timeout_s: float = Field(gt=0)


class DrainResult(Model):
    """Pods evicted (by UID) and pods left when the drain gave up."""

    evicted_uids: list[str] = Field(default_factory=list)
    remaining: list[str] = Field(default_factory=list)


class HostInput(NodeInput):
    """Base of inputs that act on the node's host (EC2 instance)."""

    # Not required non-empty here: the workflow builds this model, and a
    # validation error in workflow code would stall it; the activity rejects
    # an unusable provider id as InvalidInput instead.
    provider_id: str = Field(max_length=256, description="The node's spec.providerID.")


class ResetGpusInput(HostInput):
    """Reset the named GPUs (all GPUs when empty)."""

    gpu_indices: list[GpuIndex] = Field(default_factory=list)


ResetStatus = Literal["ok", "not_supported", "fallen_off_bus", "failed"]


class ResetGpusResult(Model):
    """Typed outcome of a GPU reset; anything but ``ok`` climbs the ladder."""

    status: ResetStatus
    detail: str = ""
    command_id: str = ""


class RunRungStepInput(HostInput):
    """One step of a rung whose table entry names its own activity (``RungAction.ACTIVITY``).

    The activity must be idempotent like every other: it checks the machine's
    state first and acts only on the machine ``provider_id`` names.
    """

    rung: str = Field(min_length=1, max_length=64)
    gpu_indices: list[GpuIndex] = Field(default_factory=list)
    timeout_s: float = Field(gt=0, le=86_400 * 7)


class RungStepResult(Model):
    """How a table-named step went: ``ok`` hands over to the verification, else climb."""

    ok: bool
    detail: str = Field(default="", max_length=2048)


class RebootNodeInput(HostInput):
    """Reboot the host out of band and wait until it is back and Ready."""

    boot_id_before: str = Field(description="A changed boot id means the reboot happened.")
    timeout_s: float = Field(gt=0)


class RebootResult(Model):
    """Confirmation of a reboot."""

    boot_id_after: str
    rebooted_by_this_call: bool


class RunDiagnosticInput(HostInput):
    """Run the DCGM diagnostic at ``level`` plus a health recheck."""

    level: int = Field(ge=1, le=4)
    gpu_indices: list[GpuIndex] = Field(default_factory=list)


class DiagnosticResult(Model):
    """Verdict of a diagnostic; failures come back as evidence."""

    passed: bool
    failures: list[Evidence] = Field(default_factory=list)
    summary: str = ""


class RunEfaLoopbackInput(HostInput):
    """Load each EFA device with ``fi_pingpong`` in loopback; judge it (issue 37)."""

    max_counter_increase: int = Field(default=100, ge=0, le=1_000_000_000)
    min_bandwidth_fraction: float = Field(default=0.5, ge=0, le=1)


class EfaLoopbackResult(Model):
    """Verdict of the EFA loopback; failures come back as evidence.

    ``ran`` is False when the host has no ``fi_pingpong``: no verdict either way.
    """

    passed: bool
    ran: bool = True
    failures: list[Evidence] = Field(default_factory=list, max_length=256)
    summary: str = Field(default="", max_length=2048)


class RecordStepInput(NodeInput):
    """Record a step on the node (annotation + Node event)."""

    rung: Rung | None = None
    fault_class: FaultClass | None = None
    message: str = Field(max_length=1024)
    warning: bool = False


class DeleteNodeClaimInput(NodeInput):
    """Delete the node's Karpenter NodeClaim (found by provider id)."""

    provider_id: str


class DeleteNodeClaimResult(Model):
    """Which NodeClaim was deleted, or that it was already gone."""

    node_claim: str | None
    already_gone: bool


class WaitForReplacementInput(NodeInput):
    """Wait until the old node is gone and new capacity in the pool is Ready."""

    node_pool: str | None
    timeout_s: float = Field(gt=0)
    since: datetime = Field(description="When the old node's deletion was asked for.")


class ReplacementResult(Model):
    """The node that replaced the old one, if one could be identified."""

    old_node_gone: bool
    new_node: str | None


class CheckBreakerInput(Model):
    """Count a node pool's nodes and how many of them look unhealthy."""

    node_pool: str | None
    node_selector: str | None = Field(
        default=None,
        max_length=1024,
        description="For a node in no pool: the GPU nodes' label selector to judge it against "
        "(never the whole cluster, CPU nodes included).",
    )


class PoolHealth(Model):
    """A pool's health measured from live data; the policy decides if the breaker opens."""

    node_pool: str | None
    total: int = Field(ge=0)
    unhealthy: int = Field(ge=0)
    unhealthy_nodes: list[str] = Field(default_factory=list, max_length=1000)

    @property
    def fraction(self) -> float:
        """Unhealthy fraction of the pool."""
        return self.unhealthy / self.total if self.total else 0.0


class EscalateInput(NodeInput):
    """Hand the incident to a human (ticket, notification, node annotation)."""

    fault_class: FaultClass
    reason: str = Field(max_length=2048)
    summary: str = Field(default="", max_length=8192)


class EscalationResult(Model):
    """Where the human can pick it up."""

    reference: str


class NotifyHandOverInput(NodeInput):
    """Tell the hand-over webhook (``escalation.notify``) a node was handed to people."""

    cluster: str = Field(min_length=1, max_length=100)
    fault_class: FaultClass
    reason: str = Field(max_length=2048)
    reference: str = Field(max_length=2048, description="Where the hand-over is recorded.")
    summary: str = Field(default="", max_length=8192)
    notify: NotifyPolicy


class NotifyHandOverResult(Model):
    """What the webhook answered."""

    status: int = Field(description="The HTTP status of the accepted send.")
    attempt: int = Field(ge=1, description="The activity attempt that got it through.")


class NotifyWorkloadOwnerInput(NodeInput):
    """Tell the owners of the GPU pods that their application faulted."""

    fault_class: FaultClass
    message: str = Field(max_length=2048)


class EnsureSemaphoreInput(Model):
    """Start a semaphore (replacements, or one disruptive step) if it is not running."""

    capacity: int = Field(ge=1)
    pool_capacity: int | None = Field(default=None, ge=1, description="Holders per pool.")
    purpose: str = Field(
        default="node replacements", max_length=64, description="What it caps, for the UI."
    )
    workflow_id: str = Field(
        default=SEMAPHORE_WORKFLOW_ID,
        min_length=1,
        description="Semaphore workflow id; only tests and isolated fleets change it.",
    )


class LookupNodeHistoryInput(Model):
    """Find a node's earlier incidents (closed runs of its workflow id)."""

    workflow_id: str = Field(min_length=1, max_length=1000)
    current_run_id: str = Field(min_length=1, max_length=256, description="Not counted.")
    incidents_since: datetime = Field(description="Start of the repeat-offender window.")
    attempts_since: datetime = Field(description="Start of the longest rung budget window.")
    provider_id: str = Field(
        default="",
        max_length=256,
        description="Count only this machine's incidents (GpuNodeProviderId); empty: all runs.",
    )
    max_runs: int = Field(default=50, ge=1, le=200, description="Newest runs read at most.")


class CountReplacementsInput(Model):
    """Count a pool's nodes replaced since a moment (the replacement rate budget)."""

    cluster: str = Field(min_length=1, max_length=256)
    node_pool: str | None = Field(default=None, max_length=256, description="None: the cluster.")
    since: datetime


class ReplacementCount(Model):
    """Incidents of the pool that closed as ``replaced`` since the moment asked."""

    count: int = Field(ge=0)


class NodeHistory(Model):
    """What a node's earlier incidents add up to."""

    incidents: int = Field(ge=0, description="Incidents in the repeat-offender window.")
    attempts: list[RungAttempt] = Field(default_factory=list, max_length=200)
