"""Small builders shared by the emulator tests."""

from __future__ import annotations

import json
from typing import Any

from kubernetes.client.rest import ApiException


def pod_body(
    name: str, *, node: str | None = None, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    """A minimal valid Pod manifest."""
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "busybox"}]}
    if node is not None:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": spec}


def status_of(exc: ApiException) -> dict[str, Any]:
    """The Status body of an ApiException."""
    body: dict[str, Any] = json.loads(exc.body)
    return body
