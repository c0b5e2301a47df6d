"""ValidatingAdmissionPolicies of deploy/ applied to admission requests, as the API server does.

Match constraints (group, version, operation, resource with subresource), match
conditions, variables in order, then every validation; an expression that
fails to evaluate refuses, as ``failurePolicy: Fail`` does. The CEL evaluator is
PyPI's ``common-expression-language`` (the Rust ``cel`` crate); Kubernetes runs
cel-go. The policies use only standard CEL both implement (``has``, ``in``,
``all``/``exists``, ``startsWith``, equality of maps, lists and objects) and no
optional syntax, which the Rust crate does not parse.
"""

from __future__ import annotations

from typing import Any

import cel

from tests.deploy.support import yaml_documents

JSON = dict[str, Any]

RESOURCES = {
    "Pod": ("", "pods"),
    "Eviction": ("", "pods"),  # the pods/eviction subresource (policy/v1 Eviction)
    "Node": ("", "nodes"),
    "NodeClaim": ("karpenter.sh", "nodeclaims"),
}


def request(
    operation: str,
    user: str,
    *,
    old: JSON | None = None,
    new: JSON | None = None,
    subresource: str = "",
    namespace_object: JSON | None = None,
) -> JSON:
    """An AdmissionRequest (the fields CEL sees) for ``new`` replacing ``old``.

    A PATCH arrives at admission as an UPDATE with the patched object.
    ``namespace_object`` is the request's Namespace, which CEL sees as
    ``namespaceObject`` beside the request (kept here under that key).
    """
    obj = new if new is not None else old
    assert obj is not None
    group, resource = RESOURCES[obj["kind"]]
    return {
        "operation": operation,
        "resource": {"group": group, "version": "v1", "resource": resource},
        "subResource": subresource,
        "name": obj["metadata"]["name"],
        "namespace": obj["metadata"].get("namespace", ""),
        "userInfo": {"username": user, "groups": ["system:authenticated"], "extra": {}},
        "object": None if operation == "DELETE" else new,
        "oldObject": None if operation == "CREATE" else old,
        "namespaceObject": namespace_object,
    }


def matches(policy: JSON, req: JSON) -> bool:
    """Whether ``req`` falls under the policy's match constraints."""
    resource = req["resource"]["resource"]
    if req["subResource"]:
        resource += "/" + req["subResource"]
    for rule in policy["spec"]["matchConstraints"]["resourceRules"]:
        if (
            req["resource"]["group"] in rule["apiGroups"]
            and ("*" in rule["apiVersions"] or req["resource"]["version"] in rule["apiVersions"])
            and ("*" in rule["operations"] or req["operation"] in rule["operations"])
            and resource in rule["resources"]
        ):
            return True
    return False


def refusals(policy: JSON, req: JSON) -> list[str]:
    """The messages ``policy`` refuses ``req`` with (empty: admitted or not concerned)."""
    spec = policy["spec"]
    if not matches(policy, req):
        return []
    context: JSON = {
        "request": req,
        "object": req["object"],
        "oldObject": req["oldObject"],
        "namespaceObject": req.get("namespaceObject"),
    }
    for condition in spec.get("matchConditions", []):
        if cel.evaluate(condition["expression"], context) is not True:
            return []
    variables: JSON = {}
    for variable in spec.get("variables", []):
        variables[variable["name"]] = cel.evaluate(
            variable["expression"], {**context, "variables": variables}
        )
    context["variables"] = variables
    refused = []
    for validation in spec["validations"]:
        try:
            allowed = cel.evaluate(validation["expression"], context)
        except Exception as err:  # an evaluation error refuses (failurePolicy: Fail)
            refused.append(f"evaluation error: {err}")
            continue
        if allowed is not True:
            if "messageExpression" in validation:
                refused.append(str(cel.evaluate(validation["messageExpression"], context)))
            else:
                refused.append(str(validation["message"]))
    return refused


def policies(path: Any) -> tuple[list[JSON], list[JSON]]:
    """(ValidatingAdmissionPolicies, their bindings) in a manifest file."""
    docs = yaml_documents(path)
    return (
        [d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"],
        [d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"],
    )


def admit(all_policies: list[JSON], req: JSON) -> list[str]:
    """The refusals of every policy for ``req``."""
    return [message for policy in all_policies for message in refusals(policy, req)]
