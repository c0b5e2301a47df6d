"""The generic seeding helpers every resource's helpers build on."""

from __future__ import annotations

import copy
from collections.abc import Iterable

from .. import errors
from ..cluster import ApiStore
from ..resources import ResourceType
from .objects import JSON, set_condition


class SeedingBase(ApiStore):
    """:class:`ApiStore` plus create-or-overwrite, existence and finalizer helpers."""

    def put(self, rtype: ResourceType, obj: JSON) -> JSON:
        """Create ``obj`` or overwrite the existing object of that name (status kept).

        Raises:
            ApiError: 400/422 when the object is invalid.
        """
        meta = obj.get("metadata") or {}
        namespace = meta.get("namespace") or ("default" if rtype.namespaced else None)
        with self.lock:
            try:
                self.get(rtype, meta.get("name", ""), namespace)
            except errors.ApiError as exc:
                if exc.code != 404:
                    raise
                return self.create_object(rtype, obj, namespace, keep_status=True)

            def overwrite(current: JSON) -> None:
                kept = {
                    k: current["metadata"][k]
                    for k in ("uid", "creationTimestamp", "deletionTimestamp")
                    if k in current["metadata"]
                }
                current.clear()
                current.update(copy.deepcopy(obj))
                current["apiVersion"] = rtype.api_version
                current["kind"] = rtype.kind
                current["metadata"] = {**current.get("metadata", {}), **kept}

            return self.mutate(rtype, meta["name"], namespace, overwrite)

    def exists(self, rtype: ResourceType, name: str, namespace: str | None = None) -> bool:
        """Whether the object exists (deleting objects with finalizers still exist)."""
        try:
            self.get(rtype, name, namespace)
        except errors.ApiError as exc:
            if exc.code == 404:
                return False
            raise
        return True

    def remove_finalizers(
        self,
        rtype: ResourceType,
        name: str,
        namespace: str | None = None,
        finalizers: Iterable[str] | None = None,
    ) -> JSON | None:
        """Remove some (default: all) finalizers; returns None when that deleted it."""
        drop = set(finalizers) if finalizers is not None else None

        def change(obj: JSON) -> None:
            current = obj["metadata"].get("finalizers") or []
            obj["metadata"]["finalizers"] = [
                f for f in current if drop is not None and f not in drop
            ]

        with self.lock:
            result = self.mutate(rtype, name, namespace, change)
            return result if self.exists(rtype, name, namespace) else None

    def _pod_status(self, status: JSON, phase: str, ready: bool) -> JSON:
        now = self.now()
        ready_word = "True" if ready and phase == "Running" else "False"
        conds = status.get("conditions") or []
        for type_ in ("Ready", "ContainersReady"):
            new = {"type": type_, "status": ready_word, "lastTransitionTime": now}
            conds = set_condition(conds, new)
            for cond in conds:
                cond.pop("lastHeartbeatTime", None)
        return {**status, "phase": phase, "conditions": conds}
