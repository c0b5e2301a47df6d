"""Node admission (burn-in before a node takes work): workflow and activity models.

One admission runs per node and boot (``ids.admission_workflow_id``). It holds
the node behind the startup taint (``ids.STARTUP_TAINT_KEY``), runs the
policy's burn-in checks and removes the taint when they pass; a failure is
handed to the node's incident as evidence (ADR 011).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import Field

from gpu_remediation.catalog import NPD_EFA_CONDITION
from gpu_remediation.ids import SEMAPHORE_WORKFLOW_ID, STARTUP_TAINT_KEY
from gpu_remediation.models import Evidence, Model, NodeName
from gpu_remediation.policy import Policy
from gpu_remediation.workflow_models import Decision, OperatorRequest

BootId = str
AdmissionTrigger = Literal["new_node", "replacement", "reboot", "repaired", "operator"]
CheckName = Literal["ready", "dcgm_diag", "efa", "nccl"]


class AdmissionOutcome(StrEnum):
    """How one boot's admission ended."""

    ADMITTED = "admitted"
    """Every burn-in check passed; the startup taint is gone."""
    ADMITTED_UNCHECKED = "admitted_unchecked"
    """The gate is off by policy: untainted with no checks."""
    OVERRIDDEN = "overridden"
    """An operator skipped the burn-in (``remediate admit --skip-burn-in``)."""
    DEAD_ON_ARRIVAL = "dead_on_arrival"
    """Failed burn-in on its first boot; handed to its incident for replacement."""
    BURN_IN_FAILED = "burn_in_failed"
    """Failed burn-in on a later boot; handed to its incident."""
    BOOT_CHANGED = "boot_changed"
    """The node rebooted: the new boot has its own admission."""
    NODE_GONE = "node_gone"
    """The node was deleted."""


ADMITTED_OUTCOMES = (
    AdmissionOutcome.ADMITTED,
    AdmissionOutcome.ADMITTED_UNCHECKED,
    AdmissionOutcome.OVERRIDDEN,
)
FAILED_OUTCOMES = (AdmissionOutcome.DEAD_ON_ARRIVAL, AdmissionOutcome.BURN_IN_FAILED)


class AdmissionInput(Model):
    """Start the admission of one boot of a node."""

    cluster: str = Field(min_length=1, max_length=100)
    node: NodeName
    boot_id: BootId = Field(min_length=1, max_length=64)
    policy: Policy
    trigger: AdmissionTrigger = "new_node"
    first_boot: bool = Field(
        default=True, description="The node's first boot: a burn-in failure is dead on arrival."
    )
    replaces: str | None = Field(default=None, max_length=253, description="The node replaced.")
    verified_diag_level: int | None = Field(
        default=None,
        ge=1,
        le=4,
        description="An incident's verification diag passed at this level for this boot.",
    )
    semaphore_workflow_id: str = Field(default=SEMAPHORE_WORKFLOW_ID, min_length=1)


class BurnInCheck(Model):
    """One burn-in check and how it went."""

    name: CheckName
    passed: bool
    summary: str = Field(default="", max_length=2048)
    evidence: list[Evidence] = Field(default_factory=list, max_length=256)
    started_at: datetime
    ended_at: datetime
    reused: bool = Field(default=False, description="Passed in the incident's verification.")


class AdmissionState(Model):
    """The admission's state, for the query, the CLI and the demo."""

    cluster: str
    node: str
    boot_id: str
    node_pool: str | None = None
    instance_type: str | None = None
    zone: str | None = None
    trigger: AdmissionTrigger
    first_boot: bool
    stage: str
    waiting_for: str | None = None
    checks: list[BurnInCheck] = Field(default_factory=list)
    decisions: list[Decision] = Field(default_factory=list)
    outcome: AdmissionOutcome | None = None
    started_at: datetime
    ready_at: datetime | None = None
    schedulable_at: datetime | None = None
    handed_to: str | None = None


class AdmissionResult(AdmissionState):
    """How the admission ended (its state at the end, plus the headline figure)."""

    ready_to_schedulable_s: float | None = Field(
        default=None, description="From the node's Ready to its startup taint's removal."
    )


class SkipBurnInInput(OperatorRequest):
    """Admit the node without (the rest of) its burn-in; recorded in the decision log."""


# ------------------------------------------------------------------ activities


class AdmissionNodeInput(Model):
    """Base of the admission's Kubernetes activity inputs."""

    node: NodeName
    boot_id: BootId = Field(
        default="", max_length=64, description="Empty: the boot the node runs now (hold only)."
    )
    admission_id: str = Field(min_length=1, max_length=512)
    taint_key: str = STARTUP_TAINT_KEY


class HoldForAdmissionInput(AdmissionNodeInput):
    """Read the node for its admission; put the startup taint on if asked (same boot only)."""

    add_taint: bool = False
    taint_value: str = Field(
        default="",
        max_length=63,
        pattern=r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$",
        description="Value of the taint added (a Kubernetes label value; empty: none).",
    )


class AdmissionHold(Model):
    """What the node looks like to its admission."""

    exists: bool
    boot_id: str = ""
    ready: bool = False
    ready_since: datetime | None = None
    tainted: bool = False
    taint_added: bool = False
    admitted_boot: str | None = None
    provider_id: str = ""
    node_pool: str | None = None
    instance_type: str | None = None
    zone: str | None = None


class AdmitNodeInput(AdmissionNodeInput):
    """Remove the startup taint if the node still runs the boot that passed."""

    how: str = Field(default="burn-in passed", max_length=256)


class AdmitNodeResult(Model):
    """What admitting changed."""

    status: Literal["admitted", "already_admitted", "boot_changed", "node_gone"]
    taint_removed: bool = False
    boot_id_now: str = ""


class CheckEfaInput(AdmissionNodeInput):
    """Read the node agent's EFA verdict (EfaHealthProblem condition) for this boot."""

    conditions: list[str] = Field(
        default_factory=lambda: [NPD_EFA_CONDITION],
        min_length=1,
        max_length=4,
        description="The agent's conditions that must all be healthy (a slow port's step is "
        "verified by EfaDegraded too); absent in older histories.",
    )


class CheckEfaResult(Model):
    """The EFA check: passed, or the agent's findings as evidence."""

    passed: bool
    reported: bool = Field(description="The agent has written the condition at all.")
    summary: str = Field(default="", max_length=2048)
    evidence: list[Evidence] = Field(default_factory=list, max_length=256)


class RunNcclCheckInput(AdmissionNodeInput):
    """Run NCCL's all-reduce over the node's GPUs in a Job pinned to the node."""

    image: str = Field(min_length=1, max_length=512)
    max_bytes: str = Field(default="8G", pattern=r"^[1-9][0-9]{0,12}[KMG]?$")
    min_bus_bandwidth_gbps: float = Field(gt=0)
    timeout_s: int = Field(ge=60, le=86_400, description="The Job's activeDeadlineSeconds.")


class NcclCheckResult(Model):
    """The all-reduce check: passed, or what was wrong as evidence."""

    passed: bool
    summary: str = Field(default="", max_length=2048)
    evidence: list[Evidence] = Field(default_factory=list, max_length=256)
    gpus: int = 0
    bus_bandwidth_gbps: float | None = Field(
        default=None, description="Out-of-place bus bandwidth at the largest size."
    )
    job: str = ""


class HandToIncidentInput(Model):
    """Signal-with-start the node's incident with a failed burn-in as evidence."""

    cluster: str = Field(min_length=1, max_length=100)
    node: NodeName
    policy: Policy
    evidence: list[Evidence] = Field(min_length=1, max_length=256)
    report_id: str = Field(min_length=1, max_length=256)
    semaphore_workflow_id: str = Field(default=SEMAPHORE_WORKFLOW_ID, min_length=1)


class HandToIncidentResult(Model):
    """The incident that took the node."""

    workflow_id: str


class StartAdmissionInput(Model):
    """Start (or find running) the admission of one boot."""

    admission: AdmissionInput


class StartAdmissionResult(Model):
    """The admission's workflow id (started now, or already running)."""

    workflow_id: str
