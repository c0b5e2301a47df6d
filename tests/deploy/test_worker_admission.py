"""The worker may change only its own keys on pods, GPU nodes and GPU NodeClaims.

deploy/worker-admission.yaml's ValidatingAdmissionPolicies, evaluated as the
API server applies them (tests/deploy/vap_support.py): the writes the
activities really make (recorded from the API emulator) pass, and each kind of
overreach a taken-over worker could try is refused.
"""

from __future__ import annotations

import copy
from typing import Any

import cel
import pytest

from gpu_remediation.jobs import INCIDENT_ANNOTATION, REQUEST_ANNOTATION
from gpu_remediation.policy_loader import load_policy
from simulator.kube_api import KubeApiServer, KubeStore
from simulator.kube_api.watch import Change
from tests.deploy.manifests import built
from tests.deploy.rbac_support import role
from tests.deploy.support import DEPLOY, yaml_documents
from tests.deploy.test_rbac_coverage import run_kubernetes_activities
from tests.deploy.vap_support import admit, matches, policies, request

POLICIES, BINDINGS = policies(DEPLOY / "worker-admission.yaml")
[ACCOUNT] = [
    d
    for d in yaml_documents(DEPLOY / "rbac.yaml")
    if d["kind"] == "ServiceAccount" and d["metadata"]["name"] == "gpu-remediation-worker"
]
WORKER = f"system:serviceaccount:{ACCOUNT['metadata']['namespace']}:{ACCOUNT['metadata']['name']}"
TENANT = "system:serviceaccount:team-a:trainer"
GPU_LABEL = "nvidia.com/gpu.present"


def pod(**changes: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "trainer-0",
            "namespace": "ml",
            "labels": {"jobset.sigs.k8s.io/jobset-name": "llm"},
            "annotations": {"gpu-remediation.io/checkpoint": "supported", "team": "a"},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "llm"}],
        },
        "spec": {
            "nodeName": "gpu-1",
            "containers": [{"name": "train", "image": "registry.example/train:1"}],
        },
    }
    for path, value in changes.items():
        set_path(obj, path, value)
    return obj


def node(gpu: bool = True, **changes: Any) -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": "gpu-1", "karpenter.sh/nodepool": "h100"}
    if gpu:
        labels[GPU_LABEL] = "true"
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "gpu-1",
            "labels": labels,
            "annotations": {"karpenter.sh/nodepool-hash": "123"},
            "finalizers": ["karpenter.sh/termination"],
        },
        "spec": {
            "providerID": "aws:///us-west-2a/i-0123456789abcdef0",
            "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
        },
    }
    for path, value in changes.items():
        set_path(obj, path, value)
    return obj


def nodeclaim(gpu: bool = True) -> dict[str, Any]:
    labels = {"karpenter.sh/nodepool": "h100" if gpu else "system"}
    if gpu:
        labels[GPU_LABEL] = "true"
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": "h100-abc", "labels": labels},
    }


def eviction(namespace: str = "ml") -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "trainer-0", "namespace": namespace},
    }


def namespace(name: str = "ml", **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def evict(namespace_object: dict[str, Any], user: str = WORKER) -> list[str]:
    name = namespace_object["metadata"]["name"]
    req = request(
        "CREATE",
        user,
        new=eviction(name),
        subresource="eviction",
        namespace_object=namespace_object,
    )
    return admit(POLICIES, req)


def set_path(obj: dict[str, Any], path: str, value: Any) -> None:
    """Set ``a__b__c`` (``__`` separates keys); None removes the key."""
    *parents, last = path.split("__")
    for key in parents:
        obj = obj.setdefault(key, {})
    if value is None:
        obj.pop(last, None)
    else:
        obj[last] = value


def update(
    old: dict[str, Any], new: dict[str, Any], user: str = WORKER, sub: str = ""
) -> list[str]:
    return admit(POLICIES, request("UPDATE", user, old=old, new=new, subresource=sub))


# ------------------------------------------------------------------ the wiring


def test_each_policy_is_bound_to_deny_and_fails_closed() -> None:
    names = {p["metadata"]["name"] for p in POLICIES}
    assert names == {
        "gpu-remediation-worker-pods",
        "gpu-remediation-worker-nodes",
        "gpu-remediation-worker-nodeclaims",
        "gpu-remediation-worker-evictions",
    }
    assert {b["spec"]["policyName"] for b in BINDINGS} == names
    for binding in BINDINGS:
        assert binding["spec"]["validationActions"] == ["Deny"]
        assert "matchResources" not in binding["spec"]  # every namespace, kube-system too
    for policy in POLICIES:
        assert policy["spec"]["failurePolicy"] == "Fail"


def test_the_policies_are_keyed_on_the_worker_service_account_and_applied_with_it() -> None:
    for policy in POLICIES:
        [condition] = policy["spec"]["matchConditions"]
        assert condition["expression"] == f'request.userInfo.username == "{WORKER}"'
    applied = {(d["kind"], d["metadata"]["name"]) for d in built()}
    for policy in POLICIES:
        assert ("ValidatingAdmissionPolicy", policy["metadata"]["name"]) in applied
    worker = [d for d in built() if d["kind"] == "Deployment" and "worker" in d["metadata"]["name"]]
    [deployment] = worker
    assert (
        deployment["spec"]["template"]["spec"]["serviceAccountName"] == ACCOUNT["metadata"]["name"]
    )
    assert deployment["metadata"]["namespace"] == ACCOUNT["metadata"]["namespace"]


def test_every_write_the_worker_role_grants_falls_under_a_policy() -> None:
    # RBAC grants "patch pods", "patch nodes", "delete nodeclaims" whole: each such
    # right must be narrowed by one of the policies.
    verbs = {"patch": "UPDATE", "update": "UPDATE", "delete": "DELETE", "create": "CREATE"}
    sample = {
        "pods": pod(),
        "nodes": node(),
        "nodeclaims": nodeclaim(),
        "pods/eviction": eviction(),
    }
    for access in role("rbac.yaml", "ClusterRole", "gpu-remediation-worker"):
        if access.verb not in verbs or access.resource not in sample:
            continue  # events: creations the API server governs itself
        obj = sample[access.resource]
        sub = access.resource.partition("/")[2]
        req = request(verbs[access.verb], WORKER, old=obj, new=obj, subresource=sub)
        assert any(matches(p, req) for p in POLICIES), str(access)


def test_the_pod_policy_allows_exactly_the_annotations_the_handshake_writes() -> None:
    [pods] = [p for p in POLICIES if p["metadata"]["name"] == "gpu-remediation-worker-pods"]
    [variable] = pods["spec"]["variables"]
    assert set(cel.evaluate(variable["expression"], {})) == {
        REQUEST_ANNOTATION,
        INCIDENT_ANNOTATION,
    }


def test_the_gpu_label_is_the_one_the_watcher_selects_nodes_by() -> None:
    assert load_policy().triggers.node_selector == f"{GPU_LABEL}=true"


# ------------------------------------------------------------------------ pods


@pytest.mark.parametrize("key", [REQUEST_ANNOTATION, INCIDENT_ANNOTATION])
def test_the_worker_may_add_change_and_remove_its_own_pod_annotations(key: str) -> None:
    bare = pod()
    annotated = pod(**{f"metadata__annotations__{key}": "v1"})
    assert update(bare, annotated) == []
    assert update(annotated, pod(**{f"metadata__annotations__{key}": "v2"})) == []
    assert update(annotated, bare) == []


@pytest.mark.parametrize(
    "overreach",
    [
        {"spec__containers": [{"name": "train", "image": "attacker.example/miner:1"}]},
        {"metadata__labels__jobset.sigs.k8s.io/jobset-name": "other"},
        {"metadata__labels": None},
        {"metadata__annotations__team": "b"},
        {"metadata__annotations__team": None},
        {"metadata__annotations__gpu-remediation.io/checkpoint-answer": "forged"},
        {"metadata__annotations__gpu-remediation.io/checkpoint": None},
        {"metadata__ownerReferences": None},
        {"metadata__finalizers": ["example.com/hold"]},
    ],
)
def test_the_worker_may_change_nothing_else_on_a_pod(overreach: dict[str, Any]) -> None:
    assert update(pod(), pod(**overreach)) != []


def test_a_kube_system_pod_image_change_by_the_worker_is_refused() -> None:
    old = pod(metadata__namespace="kube-system")
    new = pod(
        metadata__namespace="kube-system",
        spec__containers=[{"name": "train", "image": "attacker.example/x:1"}],
    )
    assert update(old, new) != []


def test_other_identities_are_not_concerned_by_the_pod_policy() -> None:
    new = pod(spec__containers=[{"name": "train", "image": "registry.example/train:2"}])
    assert update(pod(), new, user=TENANT) == []


# ----------------------------------------------------------------------- nodes


def quarantined(gpu: bool = True) -> dict[str, Any]:
    """The quarantine's patch applied: cordon, the taint, the was-cordoned annotation."""
    return node(
        gpu,
        spec__unschedulable=True,
        spec__taints=[
            {"key": "nvidia.com/gpu", "effect": "NoSchedule"},
            {"key": "gpu-remediation.io/quarantine", "effect": "NoSchedule"},
        ],
        **{"metadata__annotations__gpu-remediation.io/was-cordoned": "false"},
    )


def test_the_worker_may_cordon_taint_label_and_annotate_a_gpu_node_and_undo_it() -> None:
    assert update(node(), quarantined()) == []
    assert update(quarantined(), node()) == []
    escalated = node(**{"metadata__labels__gpu-remediation.io/needs-human": "true"})
    assert update(node(), escalated) == []


def test_the_worker_may_not_touch_a_node_that_is_not_a_gpu_node() -> None:
    assert update(node(gpu=False), quarantined(gpu=False)) != []
    labelled_false = node(gpu=False, **{f"metadata__labels__{GPU_LABEL}": "false"})
    cordoned = copy.deepcopy(labelled_false)
    cordoned["spec"]["unschedulable"] = True
    assert update(labelled_false, cordoned) != []


@pytest.mark.parametrize(
    "overreach",
    [
        {"spec__taints": []},  # drops another owner's taint
        {"spec__taints": [{"key": "nvidia.com/gpu", "effect": "NoExecute"}]},
        {
            "spec__taints": [
                {"key": "nvidia.com/gpu", "effect": "NoSchedule"},
                {"key": "example.com/evict", "effect": "NoExecute"},
            ]
        },
        {f"metadata__labels__{GPU_LABEL}": None},
        {"metadata__labels__node-role.kubernetes.io/control-plane": ""},
        {"metadata__labels__karpenter.sh/nodepool": "other"},
        {"metadata__annotations__karpenter.sh/nodepool-hash": None},
        {"metadata__annotations__karpenter.sh/do-not-disrupt": "true"},
        {"metadata__finalizers": None},
        {"spec__providerID": "aws:///us-west-2a/i-0fedcba9876543210"},
        {"spec__podCIDR": "10.0.0.0/24"},
    ],
)
def test_the_worker_may_change_nothing_else_on_a_gpu_node(overreach: dict[str, Any]) -> None:
    assert update(node(), node(**overreach)) != []


def test_the_worker_may_not_write_node_status_create_or_delete_nodes() -> None:
    assert update(node(), node(), sub="status") != []
    assert admit(POLICIES, request("DELETE", WORKER, old=node())) != []
    assert admit(POLICIES, request("CREATE", WORKER, new=node())) != []


def test_other_identities_are_not_concerned_by_the_node_policy() -> None:
    assert update(node(gpu=False), node(gpu=False, spec__taints=[]), user=TENANT) == []


# ------------------------------------------------------------------ nodeclaims


def test_the_worker_may_delete_a_gpu_nodeclaim_only() -> None:
    assert admit(POLICIES, request("DELETE", WORKER, old=nodeclaim())) == []
    assert admit(POLICIES, request("DELETE", WORKER, old=nodeclaim(gpu=False))) != []
    assert admit(POLICIES, request("UPDATE", WORKER, old=nodeclaim(), new=nodeclaim())) != []
    assert admit(POLICIES, request("DELETE", TENANT, old=nodeclaim(gpu=False))) == []


def test_the_worker_may_evict_in_a_tenant_namespace() -> None:
    assert evict(namespace("ml")) == []
    assert evict(namespace("team-a", **{"gpu-remediation.io/evictions": "allow"})) == []


@pytest.mark.parametrize(
    "name",
    ["kube-system", "kube-public", "kube-node-lease", "gpu-remediation", "gpu-remediation-jobs"],
)
def test_the_worker_may_not_evict_in_system_namespaces_or_its_own(name: str) -> None:
    assert evict(namespace(name)) == [
        "the worker may not evict pods in the cluster's system namespaces or its own"
    ]


def test_a_namespace_labelled_deny_keeps_the_worker_from_evicting_there() -> None:
    refused = evict(namespace("team-b", **{"gpu-remediation.io/evictions": "deny"}))
    assert refused == [
        "the worker may not evict pods in a namespace labelled gpu-remediation.io/evictions=deny"
    ]


def test_other_identities_are_not_concerned_by_the_eviction_policy() -> None:
    assert evict(namespace("kube-system"), user=TENANT) == []


def test_the_protected_namespaces_include_the_ones_deploy_creates() -> None:
    [policy] = [p for p in POLICIES if p["metadata"]["name"] == "gpu-remediation-worker-evictions"]
    protected = cel.evaluate(policy["spec"]["variables"][0]["expression"], {})
    created = {d["metadata"]["name"] for d in built() if d["kind"] == "Namespace"}
    assert created <= set(protected), created - set(protected)


# ------------------------------------------------- the activities' real writes


def as_requests(change: Change) -> list[dict[str, Any]]:
    """The worker's admission request behind a recorded change (none for others)."""
    kinds = {"pods": "Pod", "nodes": "Node", "nodeclaims.karpenter.sh": "NodeClaim"}
    if change.resource not in kinds or change.old is None:
        return []
    old = {"kind": kinds[change.resource], **copy.deepcopy(change.old)}
    new = {"kind": kinds[change.resource], **copy.deepcopy(change.obj)}
    if change.resource == "nodeclaims.karpenter.sh":
        deleting = change.type == "DELETED" or (
            "deletionTimestamp" in new["metadata"] and "deletionTimestamp" not in old["metadata"]
        )
        return [request("DELETE", WORKER, old=old)] if deleting else []
    if change.type != "MODIFIED" or "deletionTimestamp" in new["metadata"]:
        return []  # the emulator's own deletes and the evictions' status writes
    return [request("UPDATE", WORKER, old=old, new=new)]


async def test_every_write_the_activities_make_passes_the_policies(
    kube: KubeApiServer, store: KubeStore, api: Any
) -> None:
    changes: list[Change] = []
    store.add_hook(changes.append)
    await run_kubernetes_activities(store, api)
    checked: dict[str, int] = {}
    for change in changes:
        for req in as_requests(change):
            assert admit(POLICIES, req) == [], (change.resource, req["name"])
            checked[change.resource] = checked.get(change.resource, 0) + 1
    # The scenario wrote to each kind: quarantine/release/records/claims, annotations, delete.
    assert checked.keys() == {"pods", "nodes", "nodeclaims.karpenter.sh"}, checked
    assert checked["nodes"] >= 6
