"""Domain models: rungs, fault classes, evidence and classification.

Every payload that crosses a process boundary (signals, activity inputs,
webhooks, node annotations) is one of these pydantic models, so it is
validated before any code acts on it.
"""

from __future__ import annotations

from abc import abstractmethod
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from gpu_remediation.ids import is_valid_node_name

GpuIndex = Annotated[int, Field(ge=0, le=63)]


def _node_name(value: str) -> str:
    if not is_valid_node_name(value):
        raise ValueError(f"invalid node name {value!r}")
    return value


NodeName = Annotated[str, AfterValidator(_node_name)]
"""A Kubernetes node name, validated before anything acts on it."""


class Model(BaseModel):
    """Base for all domain models: immutable, unknown fields rejected."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class Rung(StrEnum):
    """A step of the remediation ladder, in climbing order.

    What each rung does, how it is verified and whether it is disruptive is
    its entry in the rung table (``gpu_remediation.rungs``).
    """

    QUARANTINE = "quarantine"
    STOP_GPU_WORK = "stop_gpu_work"
    DIAGNOSE = "diagnose"
    GPU_RESET = "gpu_reset"
    REBOOT = "reboot"
    REPLACE = "replace"
    ESCALATE = "escalate"

    @property
    def order(self) -> int:
        """Position on the ladder; higher is more disruptive."""
        return _RUNG_ORDER[self]

    def next(self) -> Rung:
        """The rung above this one (escalation is the top)."""
        return LADDER[min(self.order + 1, len(LADDER) - 1)]


LADDER: tuple[Rung, ...] = tuple(Rung)
_RUNG_ORDER = {rung: i for i, rung in enumerate(LADDER)}


class FaultClass(StrEnum):
    """What is wrong with a node, as far as remediation is concerned."""

    APPLICATION = "application"
    INFORMATIONAL = "informational"
    GPU_RESET_REQUIRED = "gpu_reset_required"
    ROW_REMAP_PENDING = "row_remap_pending"
    NVLINK_ERROR = "nvlink_error"
    REBOOT_REQUIRED = "reboot_required"
    GPU_FALLEN_OFF_BUS = "gpu_fallen_off_bus"
    NODE_NOT_READY = "node_not_ready"
    ROW_REMAP_FAILURE = "row_remap_failure"
    HARDWARE_FAILURE = "hardware_failure"
    EFA_FAILURE = "efa_failure"
    EFA_LINK_DOWN = "efa_link_down"
    CONFIGURATION = "configuration"
    UNCONTAINED_ERROR = "uncontained_error"
    GPU_DEGRADED = "gpu_degraded"
    """Slow, not dead: downtrained PCIe, sustained hardware throttling (issue 37)."""
    EFA_DEGRADED = "efa_degraded"
    """Slow, not dead: an EFA port below its rate, error counters rising (issue 37)."""
    STRAGGLER = "straggler"
    """A training job reports the node slower than the rest of its gang (issue 37).

    Evidence from a tenant, never a verdict alone: the class diagnoses an idle
    node at most, and only what the diagnostic finds can name a fault."""
    UNKNOWN = "unknown"


class Urgency(StrEnum):
    """How long a fault lets the job on the node go on before disruption."""

    IMMEDIATE = "immediate"
    """The GPU is gone or corrupts results, or the job already failed: no waiting."""
    CHECKPOINT_FIRST = "checkpoint_first"
    """Ask the job to checkpoint, wait up to ``jobs.checkpoint_timeout``, then go on."""
    WHEN_IDLE = "when_idle"
    """The fault does not break work now: quarantine, then wait (up to
    ``jobs.max_defer``) for the job to end or checkpoint."""
    IDLE_ONLY = "idle_only"
    """Touch only an idle node: quarantine, then wait (up to ``jobs.max_defer``)
    for the node's GPU work to end; if it does not, give the node back untouched.
    Nothing is evicted and no job is asked to checkpoint."""

    @property
    def asks_jobs(self) -> bool:
        """Whether the job stage asks opted-in jobs to checkpoint (idle_only evicts nothing)."""
        return self != Urgency.IDLE_ONLY


class Outcome(StrEnum):
    """How an incident ended."""

    TRANSIENT = "transient"
    APPLICATION_FAULT = "application_fault"
    NO_ACTION = "no_action"
    NO_FAULT_FOUND = "no_fault_found"
    REPAIRED = "repaired"
    RECOVERED = "recovered"
    REPLACED = "replaced"
    ESCALATED = "escalated"
    ABORTED = "aborted"
    NODE_GONE = "node_gone"
    DRY_RUN = "dry_run"


class EvidenceBase(Model):
    """Fields every piece of evidence carries."""

    observed_at: datetime
    source: str = Field(min_length=1, max_length=128, description="Who reported it.")
    cleared: bool = Field(
        default=False, description="True when this reports that the signal went away."
    )
    message: str = Field(default="", max_length=4096)

    @property
    @abstractmethod
    def key(self) -> str:
        """Identity used to match a clearing report to what it clears."""


class XidEvidence(EvidenceBase):
    """An NVIDIA Xid event, optionally with the driver's recovery action."""

    kind: Literal["xid"] = "xid"
    xid: int = Field(ge=0, le=1023)
    gpu_index: GpuIndex | None = None
    pci_bus: str | None = Field(default=None, max_length=32)
    recovery_action: int | None = Field(default=None, ge=0, le=15)

    @property
    def key(self) -> str:
        """Xids are events: each GPU's Xid code is one signal."""
        return f"xid/{self.xid}/{self.gpu_index if self.gpu_index is not None else '-'}"


class DcgmEvidence(EvidenceBase):
    """A DCGM diagnostic or health-watch failure."""

    kind: Literal["dcgm"] = "dcgm"
    check: Literal["diag", "health"]
    error_id: int | None = Field(default=None, ge=0)
    severity: int | None = Field(default=None, ge=0, le=6)
    gpu_index: GpuIndex | None = None
    test: str | None = Field(default=None, max_length=128, description="Diag test or system.")

    @property
    def key(self) -> str:
        """One signal per check, error id and GPU."""
        gpu = self.gpu_index if self.gpu_index is not None else "-"
        return f"dcgm/{self.check}/{self.error_id}/{gpu}"


class EfaEvidence(EvidenceBase):
    """An Elastic Fabric Adapter check failure."""

    kind: Literal["efa"] = "efa"
    check: Literal["device_count", "provider", "link", "counters", "loopback"]
    device: str | None = Field(default=None, max_length=64)

    @property
    def key(self) -> str:
        """One signal per check and device."""
        return f"efa/{self.check}/{self.device or '-'}"


class ConditionEvidence(EvidenceBase):
    """A node condition seen by the watcher (its status as observed)."""

    kind: Literal["condition"] = "condition"
    type: str = Field(min_length=1, max_length=316)
    status: Literal["True", "False", "Unknown"]
    reason: str = Field(default="", max_length=1024)

    @property
    def key(self) -> str:
        """A condition is identified by its type."""
        return f"condition/{self.type}"


class AlertEvidence(EvidenceBase):
    """An Alertmanager alert about the node."""

    kind: Literal["alert"] = "alert"
    labels: dict[str, str]
    fingerprint: str = Field(default="", max_length=128)

    @property
    def key(self) -> str:
        """Alerts are identified by fingerprint, else by alert name."""
        return f"alert/{self.fingerprint or self.labels.get('alertname', '-')}"


class ManualEvidence(EvidenceBase):
    """An operator's request from the CLI (a runbook)."""

    kind: Literal["manual"] = "manual"
    runbook: Literal["auto", "diagnose", "reset", "reboot", "replace"]
    requested_by: str = Field(default="", max_length=256)
    authenticated_as: str | None = Field(
        default=None,
        max_length=256,
        description="The principal the requester's connection to Temporal authenticated as "
        "(its mTLS client certificate's subject); None when the requester cannot know it "
        "(no client certificate: an API key's principal is not visible to the client).",
    )
    force: bool = False

    @property
    def key(self) -> str:
        """Each runbook request is its own signal."""
        return f"manual/{self.runbook}/{self.observed_at.isoformat()}"


class StragglerEvidence(EvidenceBase):
    """A training job's step times say this node is slower than the rest of its gang.

    Raised by the checkpoint relay's straggler detector
    (``triggers.stragglers``) from the step times a job's pods write on
    themselves. The node is the one the API server bound the slow pod to; the
    job is named for the operator only, never acted on.
    """

    kind: Literal["straggler"] = "straggler"
    job: str = Field(min_length=1, max_length=400, description="namespace/job of the gang.")
    pod: str = Field(default="", max_length=400, description="namespace/name of the slow pod.")
    slower_by: float = Field(
        ge=0, le=1000, description="The pod's step time over its gang's median, minus one."
    )
    steps: int = Field(ge=0, description="Training steps the pod has been slow for.")
    gang: int = Field(ge=1, description="Pods of the gang whose step times were compared.")

    @property
    def key(self) -> str:
        """One signal per slow pod (a clear names the same pod)."""
        return f"straggler/{self.job}/{self.pod}"


class NvSentinelEvidence(EvidenceBase):
    """A node NVIDIA's NVSentinel handed over for remediation (an ExternalRemediationRequest).

    The request's health event, as NVSentinel's fault-remediation copied it into
    ``spec.healthEvent`` (gpu_remediation/nvsentinel.py reads and bounds it). The
    node is the one the request names: only a party with RBAC to create the
    cluster-scoped request (NVSentinel, a cluster admin) can name one.
    """

    kind: Literal["nvsentinel"] = "nvsentinel"
    request: str = Field(min_length=1, max_length=253, description="The request's name.")
    check_name: str = Field(default="", max_length=256)
    component_class: str = Field(default="", max_length=64)
    error_codes: list[Annotated[str, Field(max_length=64)]] = Field(
        default_factory=list, max_length=16
    )
    recommended_action: str = Field(default="", max_length=64)
    is_fatal: bool = False
    gpu_index: GpuIndex | None = None

    @property
    def key(self) -> str:
        """One signal per request."""
        return f"nvsentinel/{self.request}"


Evidence = Annotated[
    XidEvidence
    | DcgmEvidence
    | EfaEvidence
    | ConditionEvidence
    | AlertEvidence
    | ManualEvidence
    | StragglerEvidence
    | NvSentinelEvidence,
    Field(discriminator="kind"),
]


class EvidenceReport(Model):
    """What a trigger sends to a node's workflow (the signal-with-start payload)."""

    node: NodeName
    evidence: list[Evidence] = Field(min_length=1, max_length=256)
    report_id: str = Field(
        default="", max_length=256, description="Idempotency key; repeats are ignored."
    )


class Classification(Model):
    """The classifier's verdict on a set of evidence."""

    fault_class: FaultClass
    start_rung: Rung | None = Field(
        description="First rung to run; None means the node is not touched."
    )
    max_rung: Rung = Rung.ESCALATE
    gpu_indices: list[GpuIndex] = Field(default_factory=list)
    reasons: list[str] = Field(default_factory=list)
