"""The resource types the emulator serves and their per-type API behaviour.

Each :class:`ResourceType` carries what the generic store and HTTP layer need to behave
like the real registry for that type: scope, status subresource, generation, supported
field selectors, strategic-merge-patch keys (copied from the Go struct tags of
``k8s.io/api``), and whether updates without a resourceVersion are allowed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .selectors import FieldGetter, path_getter

# Strategic merge patch: path of field names (list items add no component) -> merge key.
# A key of "" means "merge a list of primitives" (set union), like metadata.finalizers.
# Lists not named here are atomic: a patch replaces them, as the real API does for
# e.g. spec.taints and spec.tolerations (listType=atomic, no patchStrategy).
MergeKeys = Mapping[tuple[str, ...], str]

_METADATA_KEYS: dict[tuple[str, ...], str] = {
    ("metadata", "finalizers"): "",
    ("metadata", "ownerReferences"): "uid",
}


def _pod_spec_keys(prefix: tuple[str, ...]) -> dict[tuple[str, ...], str]:
    keys: dict[tuple[str, ...], str] = {}
    for containers in ("containers", "initContainers", "ephemeralContainers"):
        base = (*prefix, containers)
        keys[base] = "name"
        keys[(*base, "env")] = "name"
        keys[(*base, "ports")] = "containerPort"
        keys[(*base, "volumeMounts")] = "mountPath"
        keys[(*base, "volumeDevices")] = "devicePath"
    keys[(*prefix, "volumes")] = "name"
    keys[(*prefix, "imagePullSecrets")] = "name"
    keys[(*prefix, "hostAliases")] = "ip"
    keys[(*prefix, "topologySpreadConstraints")] = "topologyKey"
    return keys


@dataclass(frozen=True)
class ResourceType:
    """Static description of one served resource."""

    group: str
    version: str
    plural: str
    singular: str
    kind: str
    namespaced: bool
    has_status: bool = True
    # Generation is bumped on spec changes for types whose real registry does so.
    has_generation: bool = False
    # Strategic merge patch keys; None means SMP is refused with 415 (custom resources).
    merge_keys: MergeKeys | None = field(default_factory=dict)
    extra_fields: Mapping[str, FieldGetter] = field(default_factory=dict)
    allow_unconditional_update: bool = True
    # The real registry resets status on create for these (pods, jobs, PDBs, CRs).
    reset_status_on_create: bool = True
    # Pods and custom resources answer DELETE with the object; others with a Status.
    return_deleted_object: bool = False
    short_names: tuple[str, ...] = ()
    # Go struct fields always serialized (``"spec": {}``) for built-in types.
    struct_fields: tuple[str, ...] = ("spec", "status")

    @property
    def api_version(self) -> str:
        """``v1`` for core resources, ``group/version`` otherwise."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        """Kind of the list object (``NodeList``)."""
        return f"{self.kind}List"

    @property
    def key(self) -> str:
        """Stable identifier used by the store (``nodes``, ``nodeclaims.karpenter.sh``)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def field_getters(self) -> dict[str, FieldGetter]:
        """Return the getters for every field selector this type supports."""
        getters: dict[str, FieldGetter] = {
            "metadata.name": path_getter("metadata", "name"),
            "metadata.namespace": path_getter("metadata", "namespace"),
        }
        getters.update(self.extra_fields)
        return getters


NODES = ResourceType(
    group="",
    version="v1",
    plural="nodes",
    singular="node",
    kind="Node",
    namespaced=False,
    merge_keys={
        **_METADATA_KEYS,
        ("status", "conditions"): "type",
        ("status", "addresses"): "type",
    },
    extra_fields={"spec.unschedulable": path_getter("spec", "unschedulable")},
    reset_status_on_create=False,
    short_names=("no",),
)

PODS = ResourceType(
    group="",
    version="v1",
    plural="pods",
    singular="pod",
    kind="Pod",
    namespaced=True,
    merge_keys={
        **_METADATA_KEYS,
        **_pod_spec_keys(("spec",)),
        ("status", "conditions"): "type",
    },
    extra_fields={
        "spec.nodeName": path_getter("spec", "nodeName"),
        "spec.restartPolicy": path_getter("spec", "restartPolicy"),
        "spec.schedulerName": path_getter("spec", "schedulerName"),
        "spec.serviceAccountName": path_getter("spec", "serviceAccountName"),
        "spec.hostNetwork": path_getter("spec", "hostNetwork"),
        "status.phase": path_getter("status", "phase"),
        "status.podIP": path_getter("status", "podIP"),
        "status.nominatedNodeName": path_getter("status", "nominatedNodeName"),
    },
    return_deleted_object=True,
    short_names=("po",),
)

EVENTS = ResourceType(
    group="",
    version="v1",
    plural="events",
    singular="event",
    kind="Event",
    namespaced=True,
    has_status=False,
    struct_fields=(),
    merge_keys=dict(_METADATA_KEYS),
    extra_fields={
        **{
            f"involvedObject.{name}": path_getter("involvedObject", name)
            for name in (
                "kind",
                "namespace",
                "name",
                "uid",
                "apiVersion",
                "resourceVersion",
                "fieldPath",
            )
        },
        "reason": path_getter("reason"),
        "reportingComponent": path_getter("reportingComponent"),
        "source": path_getter("source", "component"),
        "type": path_getter("type"),
    },
    reset_status_on_create=False,
    short_names=("ev",),
)

PDBS = ResourceType(
    group="policy",
    version="v1",
    plural="poddisruptionbudgets",
    singular="poddisruptionbudget",
    kind="PodDisruptionBudget",
    namespaced=True,
    has_generation=True,
    merge_keys={**_METADATA_KEYS, ("status", "conditions"): "type"},
    short_names=("pdb",),
)

JOBS = ResourceType(
    group="batch",
    version="v1",
    plural="jobs",
    singular="job",
    kind="Job",
    namespaced=True,
    has_generation=True,
    merge_keys={
        **_METADATA_KEYS,
        **_pod_spec_keys(("spec", "template", "spec")),
        ("status", "conditions"): "type",
    },
    extra_fields={"status.successful": path_getter("status", "succeeded")},
)

NODECLAIMS = ResourceType(
    group="karpenter.sh",
    version="v1",
    plural="nodeclaims",
    singular="nodeclaim",
    kind="NodeClaim",
    namespaced=False,
    has_generation=True,
    merge_keys=None,
    struct_fields=(),
    allow_unconditional_update=False,
    return_deleted_object=True,
)

NODEPOOLS = ResourceType(
    group="karpenter.sh",
    version="v1",
    plural="nodepools",
    singular="nodepool",
    kind="NodePool",
    namespaced=False,
    has_generation=True,
    merge_keys=None,
    struct_fields=(),
    allow_unconditional_update=False,
    return_deleted_object=True,
)

# NVIDIA NVSentinel's hand-over of a node to an external remediator (its janitor's CRD
# external_remediation.crd.yaml: cluster-scoped, status subresource; gpu_remediation/
# nvsentinel.py). Served so the tests and the demo run the NVSentinel trigger.
EXTERNAL_REMEDIATION_REQUESTS = ResourceType(
    group="nvsentinel.dgxc.nvidia.com",
    version="v1",
    plural="externalremediationrequests",
    singular="externalremediationrequest",
    kind="ExternalRemediationRequest",
    namespaced=False,
    has_generation=True,
    merge_keys=None,
    struct_fields=(),
    return_deleted_object=True,
    short_names=("extrr",),
)

ALL_RESOURCES: tuple[ResourceType, ...] = (
    NODES,
    PODS,
    EVENTS,
    PDBS,
    JOBS,
    NODECLAIMS,
    NODEPOOLS,
    EXTERNAL_REMEDIATION_REQUESTS,
)

BY_KEY: dict[str, ResourceType] = {r.key: r for r in ALL_RESOURCES}


def lookup(group: str, version: str, plural: str) -> ResourceType | None:
    """Find the served type for a URL's group, version and resource, if any."""
    rtype = BY_KEY.get(f"{plural}.{group}" if group else plural)
    if rtype is None or rtype.version != version:
        return None
    return rtype
