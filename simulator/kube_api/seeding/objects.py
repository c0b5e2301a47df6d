"""Pieces of cluster objects as the kubelet and the controllers write them.

Pure functions (no store): the seeding helpers build Nodes, Pods and NodeClaims
from these, complete enough for the official client's model validation.
"""

from __future__ import annotations

import hashlib
import uuid
import zlib
from typing import Any

JSON = dict[str, Any]

NODEPOOL_LABEL = "karpenter.sh/nodepool"
TERMINATION_FINALIZER = "karpenter.sh/termination"
_OWNER_API = {"Job": "batch/v1", "Node": "v1"}


def condition(type_: str, status: str, reason: str, message: str, now: str) -> JSON:
    """A node or pod condition whose heartbeat and transition are ``now``."""
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }


def set_condition(conditions: list[JSON], new: JSON) -> list[JSON]:
    """``conditions`` with ``new`` added or replacing the condition of its type."""
    # lastTransitionTime moves only when the status flips, as the kubelet does.
    out = []
    found = False
    for cond in conditions:
        if cond.get("type") == new["type"]:
            found = True
            if cond.get("status") == new["status"]:
                new = {**new, "lastTransitionTime": cond.get("lastTransitionTime")}
            out.append(new)
        else:
            out.append(cond)
    if not found:
        out.append(new)
    return out


def node_ip(name: str) -> str:
    """The node's InternalIP: stable per name, so re-seeding a node keeps its address."""
    h = zlib.crc32(name.encode())
    return f"10.{(h >> 16) & 0xFF}.{(h >> 8) & 0xFF}.{h & 0xFF}"


def owner_reference(kind: str, name: str, uid: str) -> JSON:
    """A controller ownerReference (``apps/v1`` unless the kind is known otherwise)."""
    return {
        "apiVersion": _OWNER_API.get(kind, "apps/v1"),
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def container_status(container: JSON, state: JSON, *, ready: bool) -> JSON:
    """Every field the official client's V1ContainerStatus requires, with stable ids."""
    image = str(container.get("image") or "")
    digest = hashlib.sha256(image.encode()).hexdigest()
    return {
        "name": container["name"],
        "image": image,
        "imageID": f"{image.split(':')[0]}@sha256:{digest}",
        "containerID": f"containerd://{uuid.uuid4().hex}{uuid.uuid4().hex}",
        "ready": ready,
        "started": "running" in state,
        "restartCount": 0,
        "state": state,
    }
