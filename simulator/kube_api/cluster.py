"""The cluster: the object store plus each resource's API rules.

:class:`ApiStore` is what the HTTP layer calls (create, replace, patch, delete, evict);
:class:`simulator.kube_api.seeding.KubeStore` extends it with the helpers tests and the
simulator use to seed and mutate the cluster directly. Every change, from either side,
bumps the global resourceVersion and reaches watchers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from . import errors
from .disruption import (
    ScaleKey,
    add_disruption_target,
    check_eviction,
    compute_status,
    pdb_matches,
    validate_pdb_spec,
)
from .errors import status_body
from .patching import (
    JSON_PATCH,
    MERGE_PATCH,
    STRATEGIC_MERGE_PATCH,
    json_patch,
    merge_patch,
    strategic_merge_patch,
)
from .resources import EVENTS, JOBS, NODES, PDBS, PODS, ResourceType
from .store import ObjectStore, rfc3339
from .watch import Change

JSON = dict[str, Any]


def _require_containers(spec: Any, field: str) -> None:
    if not isinstance(spec, dict) or not spec.get("containers"):
        raise errors.unprocessable(f"{field}.containers: Required value")


def _prepare_pod(obj: JSON) -> None:
    spec = obj.get("spec")
    _require_containers(spec, "spec")
    assert isinstance(spec, dict)
    # Defaults the real API server fills in, which clients and drains look at.
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("serviceAccountName", "default")
    status = obj.setdefault("status", {})
    status.setdefault("phase", "Pending")


def _prepare_job(obj: JSON) -> None:
    meta = obj["metadata"]
    spec = obj.get("spec")
    if not isinstance(spec, dict) or not isinstance(spec.get("template"), dict):
        raise errors.unprocessable("spec.template: Required value")
    template = spec["template"]
    _require_containers(template.get("spec"), "spec.template.spec")
    restart = template["spec"].get("restartPolicy")
    if restart not in ("Never", "OnFailure"):
        raise errors.unprocessable(
            f'spec.template.spec.restartPolicy: Unsupported value: "{restart}": supported '
            'values: "OnFailure", "Never"'
        )
    for key, value in (
        ("parallelism", 1),
        ("completions", 1),
        ("backoffLimit", 6),
        ("completionMode", "NonIndexed"),
        ("suspend", False),
    ):
        spec.setdefault(key, value)
    if not spec.get("manualSelector"):
        # The API server generates the selector and pod labels from the Job's uid.
        uid, name = meta["uid"], meta["name"]
        generated = {
            "batch.kubernetes.io/controller-uid": uid,
            "batch.kubernetes.io/job-name": name,
            "controller-uid": uid,
            "job-name": name,
        }
        spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
        template.setdefault("metadata", {}).setdefault("labels", {}).update(generated)
        if not meta.get("labels"):
            meta["labels"] = dict(template["metadata"]["labels"])
    obj.setdefault("status", {})


class ApiStore(ObjectStore):
    """The emulated cluster state with the per-resource API rules.

    Use :class:`simulator.kube_api.seeding.KubeStore`, which adds the seeding helpers.

    Args:
        history_size: Changes retained for watches (older resourceVersions get 410).
        clock: Returns "now" (UTC); injectable for virtual time.
        pod_grace_scale: Graceful pod deletion: a scheduled pod deleted with a grace
            period of G seconds keeps ``deletionTimestamp`` for ``G * pod_grace_scale``
            real seconds before it disappears (the kubelet's part). 0 deletes at once.
    """

    def __init__(
        self,
        *,
        history_size: int = 10_000,
        clock: Callable[[], datetime] | None = None,
        pod_grace_scale: float = 0.0,
    ) -> None:
        super().__init__(history_size=history_size, clock=clock)
        self.pod_grace_scale = pod_grace_scale
        self._scales: dict[ScaleKey, int] = {}
        self._timers: set[threading.Timer] = set()
        self._recomputing = False
        self.add_hook(self._on_change)

    # ------------------------------------------------------- PDB status upkeep

    def pdb_status(self, pdb: JSON) -> JSON:
        """Compute the status a PDB has right now."""
        with self.lock:
            ns = pdb["metadata"].get("namespace")
            return compute_status(pdb, self.peek(PODS, ns), self._scales, self.now())

    def _on_change(self, change: Change) -> None:
        # The disruption controller's job, done synchronously: keep PDB status current.
        if self._recomputing or change.resource not in (PODS.key, PDBS.key):
            return
        if change.resource == PDBS.key:
            if change.type == "DELETED":
                return
            names = {change.obj["metadata"]["name"]}
        else:
            # Only budgets selecting the pod before or after the change can move.
            names = {
                pdb["metadata"]["name"]
                for pdb in self.peek(PDBS, change.namespace)
                if pdb_matches(pdb, change.obj)
                or (change.old is not None and pdb_matches(pdb, change.old))
            }
        if names:
            self._refresh_pdbs(change.namespace, names)

    def _refresh_pdbs(self, namespace: str, names: set[str] | None = None) -> None:
        self._recomputing = True
        try:
            pods = self.peek(PODS, namespace)
            for pdb in self.peek(PDBS, namespace):
                name = pdb["metadata"]["name"]
                if names is not None and name not in names:
                    continue
                status = compute_status(pdb, pods, self._scales, self.now())
                if status != pdb.get("status"):

                    def write(obj: JSON, status: JSON = status) -> None:
                        obj["status"] = status

                    self.mutate(PDBS, name, namespace, write)
        finally:
            self._recomputing = False

    def set_workload_scale(self, namespace: str, kind: str, name: str, replicas: int) -> None:
        """Declare a workload controller's replica count (PDB ``expectedPods``).

        Pods whose controller ownerReference is ``kind``/``name`` then count as
        ``replicas`` expected pods together, as if a ReplicaSet or StatefulSet existed.
        """
        with self.lock:
            self._scales[(namespace, kind, name)] = replicas
            self._refresh_pdbs(namespace)

    # ----------------------------------------------------------- API writes

    def _create_prepare(self, rtype: ResourceType) -> Callable[[JSON], None] | None:
        if rtype is PODS:
            return _prepare_pod
        if rtype is JOBS:
            return _prepare_job
        if rtype is PDBS:

            def prepare_pdb(obj: JSON) -> None:
                validate_pdb_spec(obj.get("spec"))
                obj["status"] = self.pdb_status(obj)

            return prepare_pdb
        return None

    def _update_prepare(self, rtype: ResourceType) -> Callable[[JSON, JSON], None] | None:
        if rtype is PDBS:

            def prepare_pdb(old: JSON, new: JSON) -> None:
                del old
                validate_pdb_spec(new.get("spec"))
                # The controller owns the status: client writes are recomputed over.
                new["status"] = self.pdb_status(new)

            return prepare_pdb
        if rtype is PODS:

            def prepare_pod(old: JSON, new: JSON) -> None:
                del old
                _require_containers(new.get("spec"), "spec")

            return prepare_pod
        return None

    def create_object(
        self,
        rtype: ResourceType,
        body: Any,
        namespace: str | None = None,
        *,
        keep_status: bool = False,
    ) -> JSON:
        """POST: create with the type's defaulting and validation.

        Raises:
            ApiError: as the real API would (400, 409, 422, 500).
        """
        return self.create(
            rtype, body, namespace, keep_status=keep_status, prepare=self._create_prepare(rtype)
        )

    def replace_object(
        self,
        rtype: ResourceType,
        name: str,
        namespace: str | None,
        body: Any,
        subresource: str | None = None,
    ) -> JSON:
        """PUT on the object or its status, with optimistic concurrency.

        Raises:
            ApiError: 404, 409 on a stale resourceVersion, 400/422 for invalid bodies.
        """
        return self.update(
            rtype,
            name,
            namespace,
            body,
            subresource=subresource,
            prepare=self._update_prepare(rtype),
        )

    def patch_object(
        self,
        rtype: ResourceType,
        name: str,
        namespace: str | None,
        content_type: str,
        body: Any,
        subresource: str | None = None,
    ) -> JSON:
        """PATCH with any of the three JSON patch types.

        A resourceVersion inside the patch is a precondition (409 when stale), as in
        the real API; without one the patch applies to the latest version.

        Raises:
            ApiError: 404, 409, 415 for an unsupported patch type, 400/422 for bad patches.
        """
        with self.lock:
            current = self.get(rtype, name, namespace)
            if content_type == STRATEGIC_MERGE_PATCH:
                if rtype.merge_keys is None:
                    raise errors.unsupported_media_type(content_type)
                patched = strategic_merge_patch(current, body, rtype.merge_keys)
            elif content_type == MERGE_PATCH:
                if not isinstance(body, dict):
                    raise errors.bad_request("merge patch body must be a JSON object")
                patched = merge_patch(current, body)
            elif content_type == JSON_PATCH:
                patched = json_patch(current, body)
            else:
                raise errors.unsupported_media_type(content_type)
            new = self._validate_new(rtype, patched, namespace)
            return self._apply_update(rtype, current, new, subresource, self._update_prepare(rtype))

    def delete_object(
        self,
        rtype: ResourceType,
        name: str,
        namespace: str | None = None,
        options: JSON | None = None,
    ) -> tuple[JSON, bool]:
        """DELETE with ``DeleteOptions`` (preconditions, grace period, propagation).

        Returns:
            The response body (the object, or a Success ``Status``) and whether it is gone.

        Raises:
            ApiError: 404 when missing, 409 when a precondition fails.
        """
        opts = options or {}
        if opts.get("dryRun"):
            # Not emulated: refusing beats deleting for real on a "dry" request.
            raise errors.bad_request("dryRun is not supported by the Kubernetes API emulator")
        pre = opts.get("preconditions") or {}
        propagation = opts.get("propagationPolicy")
        if propagation is None and opts.get("orphanDependents") is not None:
            propagation = "Orphan" if opts["orphanDependents"] else "Background"
        if propagation is None:
            # batch/v1 Jobs keep the legacy default of orphaning their pods.
            propagation = "Orphan" if rtype is JOBS else "Background"
        with self.lock:
            current = self.get(rtype, name, namespace)
            graceful_until, grace = self._pod_grace(rtype, current, opts.get("gracePeriodSeconds"))
            obj, gone = self.delete(
                rtype,
                name,
                namespace,
                uid=pre.get("uid"),
                resource_version=pre.get("resourceVersion"),
                graceful_until=graceful_until,
                grace_seconds=grace,
            )
            if graceful_until is not None and grace is not None:
                self._schedule(grace * self.pod_grace_scale, rtype, name, namespace)
            if gone:
                # The garbage collector acts once the owner is gone (an owner held by
                # finalizers keeps its dependents; see README deviations).
                self._cascade(current["metadata"]["uid"], propagation)
        if gone and not rtype.return_deleted_object:
            details: JSON = {"name": name, "kind": rtype.plural, "uid": obj["metadata"]["uid"]}
            if rtype.group:
                details["group"] = rtype.group
            return status_body("Success", 200, details=details), True
        return obj, gone

    def _pod_grace(
        self, rtype: ResourceType, pod: JSON, requested: Any
    ) -> tuple[str | None, int | None]:
        if rtype is not PODS or self.pod_grace_scale <= 0:
            return None, None
        if not (pod.get("spec") or {}).get("nodeName"):
            return None, None  # unscheduled pods have no kubelet to wait for
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return None, None
        grace = requested
        if grace is None:
            grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
        grace = int(grace)
        if grace <= 0:
            return None, None
        deadline = self._clock() + timedelta(seconds=grace)
        return rfc3339(deadline), grace

    def _schedule(
        self, delay: float, rtype: ResourceType, name: str, namespace: str | None
    ) -> None:
        def fire() -> None:
            with self.lock:
                self._timers.discard(timer)
            if not self.closed:
                self.finish_deletion(rtype, name, namespace)

        timer = threading.Timer(delay, fire)
        timer.daemon = True
        with self.lock:
            self._timers.add(timer)
        timer.start()

    def _cascade(self, owner_uid: str, propagation: str) -> None:
        for rtype, dependent in self.dependents(owner_uid):
            meta = dependent["metadata"]
            if propagation == "Orphan":

                def drop_owner(obj: JSON) -> None:
                    refs = obj["metadata"].get("ownerReferences") or []
                    obj["metadata"]["ownerReferences"] = [
                        r for r in refs if r.get("uid") != owner_uid
                    ]

                self.mutate(rtype, meta["name"], meta.get("namespace"), drop_owner)
            else:
                self.delete_object(
                    rtype, meta["name"], meta.get("namespace"), {"propagationPolicy": propagation}
                )

    def evict(self, namespace: str, name: str, body: Any) -> JSON:
        """The pods/eviction subresource: delete the pod if its PDB allows it.

        Returns:
            The ``Status`` Success body the real API answers with (HTTP 201).

        Raises:
            ApiError: 404 when the pod is gone, 409 on a failed precondition, 429 when a
                PDB allows no disruption, 500 when several PDBs select the pod, 400 for a
                malformed Eviction.
        """
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request must be an Eviction object")
        body_name = (body.get("metadata") or {}).get("name")
        if body_name and body_name != name:
            raise errors.bad_request("name in URL does not match name in Eviction object")
        options = body.get("deleteOptions") or {}
        if not isinstance(options, dict):
            raise errors.bad_request("deleteOptions must be an object")
        with self.lock:
            pod = self.get(PODS, name, namespace)
            pdbs, _ = self.list_objects(PDBS, namespace)
            statuses = {p["metadata"]["name"]: self.pdb_status(p) for p in pdbs}
            check_eviction(pod, pdbs, statuses)
            self.delete_object(PODS, name, namespace, self._mark_evicted(pod, options))
        return status_body("Success", 201)

    def _mark_evicted(self, pod: JSON, options: JSON) -> JSON:
        """``addConditionAndDeletePod``: the DisruptionTarget condition, then the delete options.

        The preconditions are checked against the pod before it is written (a failed one
        leaves it untouched); a resourceVersion precondition then moves to the version the
        condition created, as the real registry does.
        """
        meta = pod["metadata"]
        pre = options.get("preconditions") or {}
        for label, want, have in (
            ("UID", pre.get("uid"), meta["uid"]),
            ("ResourceVersion", pre.get("resourceVersion"), meta["resourceVersion"]),
        ):
            if want and want != have:
                raise errors.conflict(
                    PODS.group,
                    PODS.plural,
                    meta["name"],
                    f"Precondition failed: {label} in precondition: {want}, "
                    f"{label} in object meta: {have}",
                )
        now = self.now()

        def mark(obj: JSON) -> None:
            add_disruption_target(obj, now)

        marked = self.mutate(PODS, meta["name"], meta.get("namespace"), mark)
        if pre.get("resourceVersion"):
            pre = {**pre, "resourceVersion": marked["metadata"]["resourceVersion"]}
            options = {**options, "preconditions": pre}
        return options

    def close(self) -> None:
        """Stop pending graceful-deletion timers and wake every watcher."""
        with self.lock:
            timers = list(self._timers)
            self._timers.clear()
        for timer in timers:
            timer.cancel()
        super().close()


__all__ = ["EVENTS", "JOBS", "NODES", "PDBS", "PODS", "ApiStore"]
