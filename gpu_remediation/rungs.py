"""The rung table: what each rung of the ladder does, how it is verified, what it fixes.

The node workflow (``workflows.node_remediation``) runs a rung by looking it up
here: the entry names its action (one activity or a short sequence the
workflow knows by name), the check that verifies it, the components it can fix
and the outcome a node is released with when the check passes. Which check
runs is chosen by the fault's component, not by the rung: a GPU fault is
verified by a DCGM diagnostic, an EFA fault by the node agent's EFA checks, a
host fault by the node being Ready on its new boot. A rung that cannot fix the
fault's component is climbed past (a GPU reset does nothing for a dead
network link). A rung missing from the table is an error, never a reboot.

Adding a rung: a ``Rung`` member (models.py), its entry here (action
``RungAction.ACTIVITY``), its settings in default_policy.yaml, and its activity
``Activities.rung_step(rung)`` (docs/contributing.md has the checklist).
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from gpu_remediation.catalog import NPD_EFA_CONDITION, NPD_EFA_DEGRADED_CONDITION
from gpu_remediation.models import FaultClass, Outcome, Rung


class Component(StrEnum):
    """The part of a node a fault is about; it chooses the verification."""

    GPU = "gpu"
    EFA = "efa"
    HOST = "host"


class RungAction(StrEnum):
    """What a rung does to the node (the workflow has one branch per action)."""

    QUARANTINE = "quarantine"
    """Cordon and taint (preparation: once per incident)."""
    DRAIN = "drain"
    """Coordinate with the jobs, then evict the GPU pods (preparation: once)."""
    NONE = "none"
    """Change nothing: only verify (the diagnose rung)."""
    RESET_GPUS = "reset_gpus"
    """``nvidia-smi -r`` on the affected GPUs through a host command."""
    REBOOT_HOST = "reboot_host"
    """Out-of-band reboot through EC2, confirmed by a new boot id and Ready."""
    REPLACE_NODE = "replace_node"
    """Permit, breaker, delete the NodeClaim, wait for new capacity."""
    HAND_OVER = "hand_over"
    """Open a ticket and wait for a person (escalation)."""
    ACTIVITY = "activity"
    """Run the rung's own activity, ``Activities.rung_step(rung)`` (``run_rung_<rung>``),
    with a ``RunRungStepInput``: a new rung needs no workflow code."""


class Verification(StrEnum):
    """How a step's effect on the faulty component is checked."""

    NONE = "none"
    """Nothing to verify (preparation, escalation)."""
    COMPONENT = "component"
    """The fault's component's own check (``VERIFICATION_OF``)."""
    BURN_IN = "burn_in"
    """The new node's admission burn-in (a replacement is a different machine)."""


class ComponentCheck(StrEnum):
    """The check that verifies one component."""

    DCGM_DIAG = "dcgm_diag"
    EFA_CHECK = "efa_check"
    NODE_READY = "node_ready"


class StepOutcome(StrEnum):
    """What a rung's step returns to the ladder."""

    FIXED = "fixed"
    """The verification passed: the node leaves the ladder."""
    CLIMB = "climb"
    """The step or its verification failed: try the next rung that can help."""
    ESCALATE = "escalate"
    """The ladder cannot go on by itself (no permit, release failed): hand over."""
    ABORTED = "aborted"
    """An operator aborted or redirected the ladder while the step ran."""
    HELD = "held"
    """The breaker opened before the step did anything: decide the rung again (hold)."""


class RungSpec(BaseModel):
    """One rung's entry in the table."""

    model_config = ConfigDict(frozen=True)

    action: RungAction
    verification: Verification
    fixes: frozenset[Component]
    released_as: Outcome | None
    """The outcome when the step's verification passes (None: the rung never releases)."""
    disruptive: bool
    """Takes capacity away (the breaker may hold it)."""
    preparation: bool = False
    """Runs once per incident before the first rung that needs it, never on its own."""


ALL = frozenset(Component)

RUNG_TABLE: dict[Rung, RungSpec] = {
    Rung.QUARANTINE: RungSpec(
        action=RungAction.QUARANTINE,
        verification=Verification.NONE,
        fixes=frozenset(),
        released_as=None,
        disruptive=False,
        preparation=True,
    ),
    Rung.STOP_GPU_WORK: RungSpec(
        action=RungAction.DRAIN,
        verification=Verification.NONE,
        fixes=frozenset(),
        released_as=None,
        disruptive=False,
        preparation=True,
    ),
    # A diagnosis changes nothing, so it can "fix" any fault: its check passing
    # means the evidence no longer holds (no fault found).
    Rung.DIAGNOSE: RungSpec(
        action=RungAction.NONE,
        verification=Verification.COMPONENT,
        fixes=ALL,
        released_as=Outcome.NO_FAULT_FOUND,
        disruptive=False,
    ),
    Rung.GPU_RESET: RungSpec(
        action=RungAction.RESET_GPUS,
        verification=Verification.COMPONENT,
        fixes=frozenset({Component.GPU}),
        released_as=Outcome.REPAIRED,
        disruptive=False,
    ),
    Rung.REBOOT: RungSpec(
        action=RungAction.REBOOT_HOST,
        verification=Verification.COMPONENT,
        fixes=ALL,
        released_as=Outcome.REPAIRED,
        disruptive=True,
    ),
    Rung.REPLACE: RungSpec(
        action=RungAction.REPLACE_NODE,
        verification=Verification.BURN_IN,
        fixes=ALL,
        released_as=Outcome.REPLACED,
        disruptive=True,
    ),
    Rung.ESCALATE: RungSpec(
        action=RungAction.HAND_OVER,
        verification=Verification.NONE,
        fixes=ALL,
        released_as=None,
        disruptive=False,
    ),
}

VERIFICATION_OF: dict[Component, ComponentCheck] = {
    Component.GPU: ComponentCheck.DCGM_DIAG,
    Component.EFA: ComponentCheck.EFA_CHECK,
    Component.HOST: ComponentCheck.NODE_READY,
}

# Faults not listed are about the GPUs (Xids, DCGM findings, unknown evidence):
# the DCGM diagnostic is their check.
COMPONENT_OF: dict[FaultClass, Component] = {
    FaultClass.EFA_FAILURE: Component.EFA,
    FaultClass.EFA_LINK_DOWN: Component.EFA,
    FaultClass.EFA_DEGRADED: Component.EFA,
    FaultClass.NODE_NOT_READY: Component.HOST,
}


# The node agent's conditions an EFA check reads: all must be healthy. A slow port
# (EfaDegraded) is not seen by the health check (EfaHealthProblem: devices, provider,
# link), so a step for it is verified by both.
EFA_CONDITIONS_OF: dict[FaultClass, tuple[str, ...]] = {
    FaultClass.EFA_DEGRADED: (NPD_EFA_CONDITION, NPD_EFA_DEGRADED_CONDITION),
}


def efa_conditions(fault: FaultClass | None) -> tuple[str, ...]:
    """The agent's conditions whose health verifies a step against ``fault`` (EFA faults)."""
    return EFA_CONDITIONS_OF.get(fault, (NPD_EFA_CONDITION,)) if fault else (NPD_EFA_CONDITION,)


class UnknownRungError(LookupError):
    """A rung with no entry in the table: a bug, never a reason to reboot."""


def rung_spec(rung: Rung) -> RungSpec:
    """Return ``rung``'s entry.

    Raises:
        UnknownRungError: The rung has no entry.
    """
    try:
        return RUNG_TABLE[rung]
    except KeyError:
        raise UnknownRungError(f"rung {rung!r} has no entry in the rung table") from None


def component_of(fault: FaultClass | None) -> Component:
    """The component a fault class is about (GPU unless the table says otherwise)."""
    return COMPONENT_OF.get(fault, Component.GPU) if fault is not None else Component.GPU


def check_for(fault: FaultClass | None) -> ComponentCheck:
    """The check that verifies a step against ``fault``."""
    return VERIFICATION_OF[component_of(fault)]


def can_fix(rung: Rung, fault: FaultClass | None) -> bool:
    """Whether ``rung`` can do anything for ``fault``'s component."""
    return component_of(fault) in rung_spec(rung).fixes
