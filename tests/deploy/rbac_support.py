"""Kubernetes authorization attributes of requests, and what RBAC rules grant.

``attributes`` resolves a request the way the API server's RequestInfo does
(API group, resource with subresource, verb), so a request log from the API
emulator can be checked against the manifests' rules.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from tests.deploy.support import DEPLOY, yaml_documents


@dataclass(frozen=True, order=True)
class Access:
    """One authorization attribute set: API group, resource[/subresource], verb."""

    group: str
    resource: str
    verb: str

    def __str__(self) -> str:
        return f"{self.verb} {self.group or 'core'}/{self.resource}"


def attributes(method: str, path: str, query: str) -> Access:
    """The RBAC attributes of one request to the Kubernetes API."""
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        group, rest = "", parts[2:]
    elif parts[0] == "apis" and len(parts) >= 3:
        group, rest = parts[1], parts[3:]
    else:
        raise ValueError(f"not a resource request: {method} {path}")
    if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) > 2:
        rest = rest[2:]
    resource, name, sub = rest[0], rest[1] if len(rest) > 1 else None, rest[2:]
    if sub:
        resource = f"{resource}/{sub[0]}"
    # As the API server decides: any watch value but false/0 (the client sends "True").
    watching = parse_qs(query).get("watch", ["false"])[0].lower() not in ("false", "0")
    if method == "GET":
        verb = "watch" if watching else ("get" if name else "list")
    elif method == "DELETE":
        verb = "delete" if name else "deletecollection"
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch"}[method]
    return Access(group, resource, verb)


def rule_accesses(rules: Iterable[dict[str, Any]]) -> set[Access]:
    """Every (group, resource, verb) the rules grant; wildcards are refused."""
    granted: set[Access] = set()
    for rule in rules:
        for field in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule.get(field, []), f"wildcard in {rule}"
        assert "resourceNames" not in rule, rule
        assert "nonResourceURLs" not in rule, rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    granted.add(Access(group, resource, verb))
    return granted


def role(file: str, kind: str, name: str) -> set[Access]:
    """What the named (Cluster)Role in ``deploy/<file>`` grants."""
    [doc] = [
        d
        for d in yaml_documents(DEPLOY / file)
        if d["kind"] == kind and d["metadata"]["name"] == name
    ]
    return rule_accesses(doc["rules"])
