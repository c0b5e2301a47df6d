"""A node agent can change only its own Node: the admission policy's CEL, and the agent's role.

The ValidatingAdmissionPolicy shipped in deploy/agent-daemonset.yaml is
evaluated here as the API server would apply it (match constraints, match
conditions, variables, then every validation; an expression that fails to
evaluate refuses the request, as ``failurePolicy: Fail`` does) with a CEL
evaluator from PyPI (``common-expression-language``, the Rust ``cel`` crate;
Kubernetes runs cel-go). The expressions use only standard CEL (``in`` on a
map, indexing, list equality, string concatenation), which both implement.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.deploy.manifests import built
from tests.deploy.support import DEPLOY, yaml_documents
from tests.deploy.vap_support import refusals

AGENT_DOCS = yaml_documents(DEPLOY / "agent-daemonset.yaml")
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"


def one(kind: str, docs: list[dict[str, Any]] = AGENT_DOCS) -> dict[str, Any]:
    [doc] = [d for d in docs if d["kind"] == kind]
    return doc


POLICY = one("ValidatingAdmissionPolicy")
DAEMONSET = one("DaemonSet")
AGENT_USER = (
    f"system:serviceaccount:{DAEMONSET['metadata']['namespace']}:"
    f"{DAEMONSET['spec']['template']['spec']['serviceAccountName']}"
)


def request(
    *,
    user: str = AGENT_USER,
    bound_node: str | None = "gpu-1",
    node: str = "gpu-1",
    subresource: str = "status",
    operation: str = "UPDATE",
) -> dict[str, Any]:
    """An AdmissionRequest (the fields CEL sees) for a change to ``node``.

    A PATCH arrives at admission as an UPDATE with the patched object.
    """
    extra = {NODE_NAME_EXTRA: [bound_node]} if bound_node is not None else {}
    obj = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}
    return {
        "operation": operation,
        "resource": {"group": "", "version": "v1", "resource": "nodes"},
        "subResource": subresource,
        "name": node,
        "userInfo": {"username": user, "groups": ["system:authenticated"], "extra": extra},
        "object": None if operation == "DELETE" else obj,
        "oldObject": None if operation == "CREATE" else obj,
    }


def admit(req: dict[str, Any], policy: dict[str, Any] = POLICY) -> list[str]:
    """The messages the policy refuses ``req`` with (empty: admitted)."""
    return refusals(policy, req)


def test_the_agent_may_set_conditions_on_the_node_its_token_is_bound_to() -> None:
    assert admit(request(bound_node="gpu-1", node="gpu-1")) == []


def test_the_agent_may_not_set_conditions_on_another_node() -> None:
    refused = admit(request(bound_node="gpu-1", node="gpu-2"))
    assert refused == ["the node agent may change only the node it runs on, not gpu-2"]


def test_an_agent_token_bound_to_no_node_is_refused() -> None:
    refused = admit(request(bound_node=None, node="gpu-1"))
    assert len(refused) == 1
    assert NODE_NAME_EXTRA in refused[0]


@pytest.mark.parametrize(
    ("subresource", "operation"),
    [("", "UPDATE"), ("", "DELETE"), ("", "CREATE"), ("status", "UPDATE")],
)
def test_the_agent_may_not_touch_another_node_any_other_way(
    subresource: str, operation: str
) -> None:
    req = request(bound_node="gpu-1", node="gpu-2", subresource=subresource, operation=operation)
    assert admit(req)


@pytest.mark.parametrize(
    "user",
    [
        "system:node:gpu-2",  # the kubelet (NodeRestriction keeps it to its own node)
        "system:serviceaccount:gpu-remediation:gpu-remediation-worker",
        "kubernetes-admin",
    ],
)
def test_other_users_are_not_affected(user: str) -> None:
    assert admit(request(user=user, bound_node=None, node="gpu-2")) == []
    assert admit(request(user=user, bound_node="gpu-1", node="gpu-2")) == []


def test_the_policy_names_the_daemonsets_own_service_account() -> None:
    # A renamed service account or namespace would leave the agent unconfined.
    assert AGENT_USER == "system:serviceaccount:gpu-remediation-agent:gpu-health-agent"
    assert admit(request(user=AGENT_USER, bound_node="gpu-1", node="gpu-2"))


def test_the_policy_refuses_when_it_cannot_decide_and_is_enforced() -> None:
    spec = POLICY["spec"]
    assert spec["failurePolicy"] == "Fail"
    binding = one("ValidatingAdmissionPolicyBinding")
    assert binding["spec"]["policyName"] == POLICY["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    # No resource filter narrows the binding (Nodes have no namespace to select).
    assert "matchResources" not in binding["spec"]
    [rule] = spec["matchConstraints"]["resourceRules"]
    assert set(rule["resources"]) == {"nodes", "nodes/status"}
    assert {"CREATE", "UPDATE", "DELETE"} <= set(rule["operations"])


def test_the_policy_and_its_binding_are_applied_with_the_rest() -> None:
    kinds = {d["kind"] for d in built()}
    assert {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} <= kinds


# ---------------------------------------------------------------- its role


def test_the_agent_is_granted_only_what_npd_calls() -> None:
    role = one("ClusterRole")
    granted = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert granted == {
        ("", "nodes", "get"),
        ("", "nodes/status", "patch"),
        ("", "events", "create"),
        ("", "events", "patch"),
    }
    assert not any("resourceNames" in rule for rule in role["rules"])


def test_the_agent_is_bound_to_its_own_role_not_the_built_in_one() -> None:
    binding = one("ClusterRoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": one("ClusterRole")["metadata"]["name"],
    }
    [subject] = binding["subjects"]
    assert subject["name"] == DAEMONSET["spec"]["template"]["spec"]["serviceAccountName"]
    assert subject["namespace"] == DAEMONSET["metadata"]["namespace"]
    for doc in built():
        if doc["kind"].endswith("Binding") and "roleRef" in doc:
            assert doc["roleRef"]["name"] != "system:node-problem-detector", doc["metadata"]


def test_npd_is_not_configured_to_taint_nodes() -> None:
    # Tainting would need update on nodes, which the role does not grant.
    config = one("ConfigMap")["data"]["gpu-health-monitor.json"]
    assert "taint" not in json.dumps(json.loads(config)).lower()
