"""NVIDIA NVSentinel's hand-over to an external remediator, read and answered.

NVSentinel (github.com/NVIDIA/NVSentinel, read at upstream main 3bc4b0e, the
v1.14.0 line) can hand a node to an external system: its fault-remediation
creates an ``ExternalRemediationRequest`` (design 040, "External Remediation
Request"; CRD ``externalremediationrequests.nvsentinel.dgxc.nvidia.com``, version
``v1``, cluster-scoped, status subresource; janitor's CRD
``external_remediation.crd.yaml``) with the triaged health event in
``spec.healthEvent``, releases the node from its own management and waits for the
external system to set the condition ``ExternalRemediationComplete`` in
``status.conditions``: True when the node is remediated (the janitor then removes
its release taint), False when the external system failed or gave up.

Here: :class:`ExternalRemediationRequest` validates the object (unknown fields are
ignored, as NVSentinel may add some; every string is bounded), :func:`evidence`
turns it into :class:`~gpu_remediation.models.NvSentinelEvidence`, the classifier
maps it with :data:`RECOMMENDED_ACTIONS` (below), and :func:`completion` says what
an incident's outcome writes back. NVSentinel's Kubernetes data store
(``HealthEventResource``, design 027) is not read: at that commit nothing in
NVSentinel writes those objects.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from gpu_remediation.models import FaultClass, NodeName, NvSentinelEvidence, Outcome

GROUP = "nvsentinel.dgxc.nvidia.com"
VERSION = "v1"
PLURAL = "externalremediationrequests"
KIND = "ExternalRemediationRequest"
COMPLETE = "ExternalRemediationComplete"
"""The condition the external system sets (design 040)."""
SOURCE = "nvsentinel"
PICKED_UP_ANNOTATION = "gpu-remediation.io/picked-up-at"
"""On a request: when this project took it (RFC 3339); a restarted relay reports it again
only if the incident it went to never started."""

# NVSentinel's RecommendedAction (data-models/protobufs/health_event.proto): names and
# protobuf numbers; the CRD accepts either (x-kubernetes-int-or-string).
ACTION_NUMBERS = {
    0: "NONE",
    2: "COMPONENT_RESET",
    5: "CONTACT_SUPPORT",
    6: "RUN_FIELDDIAG",
    15: "RESTART_VM",
    24: "RESTART_BM",
    25: "REPLACE_VM",
    26: "RUN_DCGMEUD",
    27: "CUSTOM",
    99: "UNKNOWN",
}

RECOMMENDED_ACTIONS: dict[str, tuple[FaultClass, str]] = {
    # What each of NVSentinel's recommended actions becomes here, where the health
    # event names no Xid this project's own catalog knows (an Xid is classified from
    # the catalog, as from any other source). Sources: the action's meaning in
    # health_event.proto and what NVSentinel's fault-remediation does with it (chart
    # values: COMPONENT_RESET -> a GPU reset where configured, RESTART_VM/RESTART_BM
    # -> RebootNode, REPLACE_VM -> TerminateNode).
    "NONE": (FaultClass.INFORMATIONAL, "NVSentinel recommends no action"),
    "COMPONENT_RESET": (FaultClass.GPU_RESET_REQUIRED, "NVSentinel recommends a component reset"),
    "RESTART_VM": (FaultClass.REBOOT_REQUIRED, "NVSentinel recommends restarting the VM"),
    "RESTART_BM": (FaultClass.REBOOT_REQUIRED, "NVSentinel recommends restarting the host"),
    "REPLACE_VM": (FaultClass.HARDWARE_FAILURE, "NVSentinel recommends replacing the VM"),
    # NVSentinel's fallback for an unrecognised fault, and its diagnostics: nothing
    # named, so quarantine and diagnose (the policy keeps unknown below replacement).
    "CONTACT_SUPPORT": (FaultClass.UNKNOWN, "NVSentinel recommends contacting support"),
    "RUN_FIELDDIAG": (FaultClass.UNKNOWN, "NVSentinel recommends a field diagnostic"),
    "RUN_DCGMEUD": (FaultClass.UNKNOWN, "NVSentinel recommends a DCGM EUD run"),
    # CUSTOM is how a request is routed here at all (the custom action names this
    # kind), so it says nothing of the fault.
    "CUSTOM": (FaultClass.UNKNOWN, "NVSentinel names no standard action"),
    "UNKNOWN": (FaultClass.UNKNOWN, "NVSentinel does not know the action"),
}

# Outcome -> (condition status, reason). True: the node is fine again or gone (replaced);
# False: a person has it now, or nothing was done.
COMPLETIONS: dict[Outcome, tuple[Literal["True", "False"], str]] = {
    Outcome.REPAIRED: ("True", "Repaired"),
    Outcome.RECOVERED: ("True", "Recovered"),
    Outcome.REPLACED: ("True", "Replaced"),
    Outcome.NODE_GONE: ("True", "NodeGone"),
    Outcome.TRANSIENT: ("True", "Transient"),
    Outcome.NO_FAULT_FOUND: ("True", "NoFaultFound"),
    Outcome.APPLICATION_FAULT: ("True", "ApplicationFault"),
    Outcome.ESCALATED: ("False", "Escalated"),
    Outcome.ABORTED: ("False", "Aborted"),
    Outcome.NO_ACTION: ("False", "NoAction"),
    Outcome.DRY_RUN: ("False", "DryRun"),
}

_XID_CHECK = re.compile(r"xid", re.IGNORECASE)


def _cut(limit: int) -> BeforeValidator:
    """Cut longer text and lists to ``limit``: an event with a long message is still a fault."""

    def cut(value: Any) -> Any:
        return value[:limit] if isinstance(value, str | list) else value

    return BeforeValidator(cut)


Text = Annotated[str, _cut(4096)]
Short = Annotated[str, _cut(256)]


class _Lenient(BaseModel):
    """NVSentinel's objects: fields it may add later are ignored, every value bounded."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)


class Entity(_Lenient):
    """One impacted entity (``entityType`` GPU, GPU_UUID, PCI, ...)."""

    entity_type: Short = Field(default="", alias="entityType")
    entity_value: Short = Field(default="", alias="entityValue")


class HealthEvent(_Lenient):
    """The fields of NVSentinel's HealthEvent this project reads."""

    node_name: NodeName = Field(alias="nodeName")
    agent: Short = ""
    component_class: Short = Field(default="", alias="componentClass")
    check_name: Short = Field(default="", alias="checkName")
    is_fatal: bool = Field(default=False, alias="isFatal")
    message: Text = ""
    recommended_action: int | Short = Field(default="", alias="recommendedAction")
    error_code: Annotated[list[Short], _cut(64)] = Field(default_factory=list, alias="errorCode")
    entities_impacted: Annotated[list[Entity], _cut(256)] = Field(
        default_factory=list, alias="entitiesImpacted"
    )
    id: Short = ""

    def action_name(self) -> str:
        """The recommended action's name (a number is translated)."""
        action = self.recommended_action
        if isinstance(action, int):
            return ACTION_NUMBERS.get(action, "UNKNOWN")
        return action.upper() or "UNKNOWN"

    def gpu_index(self) -> int | None:
        """The first impacted GPU's index, when the event names one (entity ``GPU``)."""
        for entity in self.entities_impacted:
            if entity.entity_type.upper() == "GPU" and entity.entity_value.isdigit():
                index = int(entity.entity_value)
                if 0 <= index <= 63:
                    return index
        return None


class Condition(_Lenient):
    """A ``metav1.Condition`` of the request's status."""

    type: Short
    status: Short = "Unknown"
    reason: Short = ""


class Metadata(_Lenient):
    """The request's identity."""

    name: Annotated[str, Field(min_length=1, max_length=253)]
    uid: Annotated[str, Field(min_length=1, max_length=64)]
    resource_version: Short = Field(default="", alias="resourceVersion")
    generation: int = 0
    annotations: dict[str, str] = Field(
        default_factory=dict,
        description="Only this project's own annotation is read (others, such as kubectl's "
        "last-applied-configuration, may be long).",
    )


class RequestSpec(_Lenient):
    """``spec``: the triaged health event."""

    health_event: HealthEvent = Field(alias="healthEvent")


class RequestStatus(_Lenient):
    """``status``: the conditions NVSentinel's reconciler and the external system set."""

    conditions: Annotated[list[Condition], _cut(64)] = Field(default_factory=list)


class ExternalRemediationRequest(_Lenient):
    """An ``ExternalRemediationRequest`` as the API server returns it."""

    metadata: Metadata
    spec: RequestSpec
    status: RequestStatus = Field(default_factory=RequestStatus)

    @property
    def node(self) -> str:
        """The node the request hands over."""
        return self.spec.health_event.node_name

    def completion(self) -> str | None:
        """``True``/``False`` once someone completed the request; None while open."""
        for condition in self.status.conditions:
            if condition.type == COMPLETE and condition.status in ("True", "False"):
                return condition.status
        return None

    def picked_up_at(self) -> datetime | None:
        """When this project took the request, if it did (its annotation)."""
        raw = self.metadata.annotations.get(PICKED_UP_ANNOTATION)
        if raw is None or len(raw) > 64:
            return None
        try:
            taken = datetime.fromisoformat(raw)
        except ValueError:
            return None
        # Written by this project with its offset; one without is read as UTC.
        return taken if taken.tzinfo is not None else taken.replace(tzinfo=UTC)


def parse_request(raw: object) -> ExternalRemediationRequest:
    """Validate a request from the API server.

    Raises:
        ValueError: The object is not a usable request (the message says why).
    """
    try:
        return ExternalRemediationRequest.model_validate(raw)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ValueError(f"invalid {KIND}: {where}: {first['msg']}") from None


def evidence(request: ExternalRemediationRequest, observed_at: datetime) -> NvSentinelEvidence:
    """The request as evidence for its node's incident."""
    event = request.spec.health_event
    return NvSentinelEvidence(
        observed_at=observed_at,
        source=SOURCE,
        message=event.message[:4096],
        request=request.metadata.name,
        check_name=event.check_name,
        component_class=event.component_class[:64],
        error_codes=[code[:64] for code in event.error_code[:16]],
        recommended_action=event.action_name()[:64],
        is_fatal=event.is_fatal,
        gpu_index=event.gpu_index(),
    )


def xid_of(e: NvSentinelEvidence) -> int | None:
    """The Xid an XID check's event names in its error codes (NVSentinel writes the number)."""
    if not _XID_CHECK.search(e.check_name):
        return None
    for code in e.error_codes:
        if code.isdigit() and int(code) <= 1023:
            return int(code)
    return None


def completion(outcome: Outcome | None) -> tuple[Literal["True", "False"], str]:
    """What an incident that ended so writes back (None: it failed or was ended by hand)."""
    if outcome is None:
        return "False", "IncidentFailed"
    return COMPLETIONS[outcome]
