"""Discovery documents (``/api``, ``/apis``, ``/apis/{group}/{version}``, ``/version``)."""

from __future__ import annotations

from typing import Any

from .resources import ALL_RESOURCES, ResourceType

JSON = dict[str, Any]

_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


def version_info() -> JSON:
    """``/version``: the emulated server reports Kubernetes 1.33."""
    return {
        "major": "1",
        "minor": "33",
        "gitVersion": "v1.33.0-gpu-remediation-emulator",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z",
        "goVersion": "go1.24.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def _groups() -> dict[str, list[ResourceType]]:
    groups: dict[str, list[ResourceType]] = {}
    for rtype in ALL_RESOURCES:
        groups.setdefault(rtype.group, []).append(rtype)
    return groups


def api_versions(server_address: str) -> JSON:
    """``/api``: the core group's versions."""
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    }


def _group_doc(group: str, version: str) -> JSON:
    gv = {"groupVersion": f"{group}/{version}", "version": version}
    return {"name": group, "versions": [gv], "preferredVersion": gv}


def api_group_list() -> JSON:
    """``/apis``: every non-core group served."""
    groups = [_group_doc(g, types[0].version) for g, types in _groups().items() if g]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(group: str) -> JSON | None:
    """``/apis/{group}``, or None when the group is not served."""
    types = _groups().get(group)
    if not group or not types:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group_doc(group, types[0].version)}


def resource_list(group: str, version: str) -> JSON | None:
    """``/api/v1`` or ``/apis/{group}/{version}``, or None when not served."""
    types = [t for t in ALL_RESOURCES if t.group == group and t.version == version]
    if not types:
        return None
    resources: list[JSON] = []
    for rtype in types:
        resources.append(
            {
                "name": rtype.plural,
                "singularName": rtype.singular,
                "namespaced": rtype.namespaced,
                "kind": rtype.kind,
                "verbs": _VERBS,
                "shortNames": list(rtype.short_names),
            }
        )
        if rtype.has_status:
            resources.append(
                {
                    "name": f"{rtype.plural}/status",
                    "singularName": "",
                    "namespaced": rtype.namespaced,
                    "kind": rtype.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
        if rtype.plural == "pods" and not group:
            resources.append(
                {
                    "name": "pods/eviction",
                    "singularName": "",
                    "namespaced": True,
                    "group": "policy",
                    "version": "v1",
                    "kind": "Eviction",
                    "verbs": ["create"],
                }
            )
            resources.append(
                {
                    "name": "pods/log",
                    "singularName": "",
                    "namespaced": True,
                    "kind": "Pod",
                    "verbs": ["get"],
                }
            )
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }
