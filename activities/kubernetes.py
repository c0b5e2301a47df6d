"""Kubernetes side effects: quarantine, drain, node health, records, NodeClaims.

One class with the official client's APIs injected. Every write is safe to
repeat: read-modify-write with the object's resourceVersion (a 409 re-reads
and tries again, so a concurrent writer's edit is never lost), evictions carry
the pod's UID as a precondition, and "already done" answers (404 on delete, a
taint already present, an event that already exists) count as success.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.kube_drain import Drainer
from activities.kube_nodes import (
    NodeSummary,
    PoolWatch,
    list_node_summaries,
    list_node_summaries_at,
)
from activities.node_pin import check_pin
from activities.world_time import REAL_TIME, WorldTime
from gpu_remediation import contracts as c
from gpu_remediation.ids import Activities
from gpu_remediation.settings import Settings

T = TypeVar("T")

STATE_ANNOTATION = "gpu-remediation.io/state"
NEEDS_HUMAN_LABEL = "gpu-remediation.io/needs-human"
WAS_CORDONED_ANNOTATION = "gpu-remediation.io/was-cordoned"
HELD_ANNOTATION = "gpu-remediation.io/held-by-breaker"
"""On a quarantined node whose incident an open breaker holds: its quarantine alone
does not count it as unhealthy."""
REPLACES_ANNOTATION = "gpu-remediation.io/replaces"
"""On a new node: the node it was attributed to as a replacement. Claimed with a
resourceVersion-checked write, so concurrent replacements never share one."""
NODECLAIMS = ("karpenter.sh", "v1", "nodeclaims")
# Conditions whose True means a problem (Node Problem Detector polarity).
NPD_PROBLEM_CONDITIONS = ("GpuHealthProblem", "EfaHealthProblem")
CONFLICT_RETRIES = 10


class KubernetesActivities:
    """Activities that act on Nodes, Pods, Events and Karpenter NodeClaims."""

    def __init__(
        self, core_v1: Any, custom: Any, settings: Settings, world: WorldTime = REAL_TIME
    ) -> None:
        """Bind to the API clients.

        Args:
            core_v1: ``kubernetes.client.CoreV1Api``.
            custom: ``kubernetes.client.CustomObjectsApi`` (NodeClaims).
            settings: Label, taint and namespace names, intervals.
            world: The timeline the waits run on (``activities.world_time``).
        """
        self._core = core_v1
        self._custom = custom
        self._settings = settings
        self._world = world
        self._drainer = Drainer(core_v1, settings, world)

    @activity.defn(name=Activities.READ_NODE_HEALTH)
    async def read_node_health(self, input: c.ReadNodeHealthInput) -> c.NodeHealth:
        """Read readiness, conditions, boot id, provider id and pool; a missing node says so."""
        node = await call_api(self._core.read_node, input.node, missing_ok=True)
        if node is None:
            return c.NodeHealth(exists=False)
        status = node.status
        conditions = [
            c.NodeConditionState(
                type=cond.type,
                status=cond.status,
                reason=cond.reason or "",
                message=(cond.message or "")[:1024],
                last_transition_time=cond.last_transition_time,
            )
            for cond in (status.conditions or [] if status else [])
        ]
        return c.NodeHealth(
            exists=True,
            ready=node_ready(node),
            uid=node.metadata.uid or "",
            boot_id=status.node_info.boot_id if status and status.node_info else "",
            provider_id=(node.spec.provider_id if node.spec else None) or "",
            node_pool=(node.metadata.labels or {}).get(self._settings.node_pool_label),
            unschedulable=bool(node.spec and node.spec.unschedulable),
            conditions=conditions,
        )

    @activity.defn(name=Activities.QUARANTINE_NODE)
    async def quarantine_node(self, input: c.QuarantineNodeInput) -> c.QuarantineResult:
        """Cordon and add the NoSchedule quarantine taint (idempotent)."""
        result: dict[str, bool] = {}

        def change(node: Any) -> dict[str, Any] | None:
            spec = node.spec or k8s.V1NodeSpec()
            taints = [_taint_dict(t) for t in (spec.taints or [])]
            annotations = node.metadata.annotations or {}
            result["taint_added"] = not any(t["key"] == input.taint_key for t in taints)
            if result["taint_added"]:
                result["was_already_cordoned"] = bool(spec.unschedulable)
            else:
                # A retry after our own quarantine: the first attempt wrote down
                # whether someone else had cordoned the node.
                result["was_already_cordoned"] = annotations.get(WAS_CORDONED_ANNOTATION) == "true"
            held = "true" if input.held else None
            held_changed = annotations.get(HELD_ANNOTATION) != held
            if spec.unschedulable and not result["taint_added"] and not held_changed:
                return None
            if result["taint_added"]:
                taints.append({"key": input.taint_key, "effect": "NoSchedule"})
            was_cordoned = "true" if result["was_already_cordoned"] else "false"
            return {
                "metadata": {
                    "annotations": {WAS_CORDONED_ANNOTATION: was_cordoned, HELD_ANNOTATION: held}
                },
                "spec": {"unschedulable": True, "taints": taints},
            }

        await self._update_node(input.node, change, pin=input.pin)
        return c.QuarantineResult(
            was_already_cordoned=result["was_already_cordoned"], taint_added=result["taint_added"]
        )

    @activity.defn(name=Activities.RELEASE_NODE)
    async def release_node(self, input: c.ReleaseNodeInput) -> c.ReleaseResult:
        """Remove the quarantine taint and uncordon unless told not to (idempotent)."""
        result = {"taint_removed": False, "uncordoned": False}

        def change(node: Any) -> dict[str, Any] | None:
            spec = node.spec or k8s.V1NodeSpec()
            taints = [_taint_dict(t) for t in (spec.taints or [])]
            kept = [t for t in taints if t["key"] != input.taint_key]
            result["taint_removed"] = len(kept) != len(taints)
            result["uncordoned"] = input.uncordon and bool(spec.unschedulable)
            spec_patch: dict[str, Any] = {}
            if result["taint_removed"]:
                spec_patch["taints"] = kept
            if result["uncordoned"]:
                spec_patch["unschedulable"] = False
            if not spec_patch:
                return None
            annotations = {WAS_CORDONED_ANNOTATION: None, HELD_ANNOTATION: None}  # null deletes
            return {"metadata": {"annotations": annotations}, "spec": spec_patch}

        await self._update_node(input.node, change, missing_ok=True, pin=input.pin)
        return c.ReleaseResult(**result)

    @activity.defn(name=Activities.DRAIN_GPU_PODS)
    async def drain_gpu_pods(self, input: c.DrainGpuPodsInput) -> c.DrainResult:
        """Evict the node's GPU pods like ``kubectl drain`` (see ``activities.kube_drain``).

        Only on the incident's machine: the pods bound to the name of a node that
        is another machine now belong to other work.
        """
        node = await call_api(self._core.read_node, input.node, missing_ok=True)
        if node is not None:
            check_pin(node, input.node, input.pin)
        return await self._drainer.drain(input.node, input.timeout_s)

    @activity.defn(name=Activities.RECORD_STEP)
    async def record_step(self, input: c.RecordStepInput) -> None:
        """Annotate the node with the incident's state and add a Node event.

        The event's name derives from the incident and the message, so a retry
        finds it already there instead of adding a second one.
        """
        state = {
            "incident": input.incident_id,
            "rung": input.rung.value if input.rung else None,
            "fault_class": input.fault_class.value if input.fault_class else None,
            "message": input.message,
            "at": datetime.now(UTC).isoformat(),
        }
        patch = {"metadata": {"annotations": {STATE_ANNOTATION: json.dumps(state)}}}
        node = await self._update_node(input.node, lambda _: patch, missing_ok=True, pin=input.pin)
        if node is None:
            return
        reason = "GpuRemediation" + "".join(
            part.title() for part in (input.rung.value if input.rung else "step").split("_")
        )
        await self._event(node, input.incident_id, reason, input.message, warning=input.warning)

    @activity.defn(name=Activities.ESCALATE)
    async def escalate(self, input: c.EscalateInput) -> c.EscalationResult:
        """Hand the node to people: a label to find it by, the story, a Warning event."""
        patch = {
            "metadata": {
                "labels": {NEEDS_HUMAN_LABEL: "true"},
                "annotations": {
                    STATE_ANNOTATION: json.dumps(
                        {
                            "incident": input.incident_id,
                            "rung": "escalate",
                            "fault_class": input.fault_class.value,
                            "message": input.reason,
                            "at": datetime.now(UTC).isoformat(),
                        }
                    )
                },
            }
        }
        node = await self._update_node(input.node, lambda _: patch, missing_ok=True, pin=input.pin)
        if node is None:
            return c.EscalationResult(
                reference=f"node {input.node} is gone; see {input.incident_id}"
            )
        message = f"needs a human ({input.fault_class}): {input.reason}"
        name = await self._event(
            node, input.incident_id, "GpuRemediationEscalated", message, warning=True
        )
        namespace = self._settings.events_namespace
        return c.EscalationResult(
            reference=f"event {namespace}/{name}; nodes labelled {NEEDS_HUMAN_LABEL}=true"
        )

    @activity.defn(name=Activities.NOTIFY_WORKLOAD_OWNER)
    async def notify_workload_owner(self, input: c.NotifyWorkloadOwnerInput) -> None:
        """Put a Warning event on each GPU pod of the node: its owners watch their pods."""
        for pod in await self._drainer.gpu_pods(input.node):
            await self._event(
                pod,
                input.incident_id,
                "GpuApplicationFault",
                input.message,
                warning=True,
                kind="Pod",
            )

    @activity.defn(name=Activities.DELETE_NODE_CLAIM)
    async def delete_node_claim(self, input: c.DeleteNodeClaimInput) -> c.DeleteNodeClaimResult:
        """Delete the NodeClaim whose status.providerID is the node's; gone counts as done."""
        group, version, plural = NODECLAIMS
        claims = await call_api(self._custom.list_cluster_custom_object, group, version, plural)
        name = next(
            (
                item["metadata"]["name"]
                for item in claims.get("items", [])
                if input.provider_id
                and item.get("status", {}).get("providerID") == input.provider_id
            ),
            None,
        )
        if name is None:
            return c.DeleteNodeClaimResult(node_claim=None, already_gone=True)
        deleted = await call_api(
            self._custom.delete_cluster_custom_object, group, version, plural, name, missing_ok=True
        )
        return c.DeleteNodeClaimResult(node_claim=name, already_gone=deleted is None)

    @activity.defn(name=Activities.WAIT_FOR_REPLACEMENT)
    async def wait_for_replacement(self, input: c.WaitForReplacementInput) -> c.ReplacementResult:
        """Wait, heartbeating, until the old node is gone and a new pool node is Ready.

        Karpenter does not link a new node to the one it replaces, and several
        replacements may be under way in a pool. The new node is the oldest
        Ready pool node created after the deletion that no other replacement
        has claimed (nodes from the deletion's own second last); the claim
        (``gpu-remediation.io/replaces``) makes a retry return the same node.
        """
        deadline = await self._world.now() + input.timeout_s
        since = input.since.replace(microsecond=0)  # creationTimestamp has 1 s resolution
        selector = (
            f"{self._settings.node_pool_label}={input.node_pool}" if input.node_pool else None
        )
        # Pool nodes created since the deletion, as last seen: one listing once the old
        # node is gone, then a watch keeps them current (a pool of thousands is not
        # listed again per look: that listing was most of the worker's CPU at 10,000
        # nodes). The looks keep their pace on the world's timeline.
        fresh_seen: dict[str, NodeSummary] = {}
        fresh: list[NodeSummary] = []
        watch: PoolWatch | None = None
        try:
            while True:
                new_node = None
                old = (
                    None
                    if watch is not None
                    else await call_api(self._core.read_node, input.node, missing_ok=True)
                )
                # No new node is taken while the old one stands.
                if old is None:
                    if watch is None or watch.expired:
                        if watch is not None:
                            watch.stop()
                        try:
                            nodes, version = await list_node_summaries_at(self._core, selector)
                        except ApiException as err:
                            raise api_error("list_node", err) from err
                        fresh_seen = {n.metadata.name: n for n in nodes if _created_since(n, since)}
                        watch = PoolWatch(self._core, selector, version or "0").start()
                    for kind, node in watch.drain():
                        if kind == "DELETED":
                            fresh_seen.pop(node.metadata.name, None)
                        elif _created_since(node, since):
                            fresh_seen[node.metadata.name] = node
                    fresh = _replacement_candidates(list(fresh_seen.values()), input.node, since)
                    new_node = await self._claim_replacement(input.node, fresh)
                activity.heartbeat(
                    {
                        "old_node_gone": old is None,
                        "new_ready": [n.metadata.name for n in fresh],
                        "claimed": new_node,
                    }
                )
                if new_node is not None:
                    return c.ReplacementResult(old_node_gone=True, new_node=new_node)
                if await self._world.now() >= deadline:
                    raise ApplicationError(
                        f"replacement of {input.node} not complete within {input.timeout_s:.0f}s "
                        f"(old node gone: {old is None}, new Ready nodes: "
                        f"{_claims(fresh) or 'none'})",
                        type="ReplacementIncomplete",
                    )
                await self._world.sleep(self._settings.poll_interval.total_seconds())
        finally:
            if watch is not None:
                watch.stop()

    async def _claim_replacement(self, old: str, candidates: list[Any]) -> str | None:
        """Claim the first candidate no other replacement holds; None if all are taken."""
        for node in candidates:
            if _annotation(node, REPLACES_ANNOTATION) == old:
                return str(node.metadata.name)  # claimed by an earlier attempt
        for node in candidates:
            if _annotation(node, REPLACES_ANNOTATION) is not None:
                continue

            def claim(current: Any) -> dict[str, Any] | None:
                if _annotation(current, REPLACES_ANNOTATION) is not None:
                    return None  # taken meanwhile (or already ours)
                return {"metadata": {"annotations": {REPLACES_ANNOTATION: old}}}

            name = str(node.metadata.name)
            await self._update_node(name, claim, missing_ok=True)
            # The write may have lost a race: what counts is what the node says now.
            current = await call_api(self._core.read_node, name, missing_ok=True)
            if current is not None and _annotation(current, REPLACES_ANNOTATION) == old:
                return name
        return None

    @activity.defn(name=Activities.CHECK_BREAKER)
    async def check_breaker(self, input: c.CheckBreakerInput) -> c.PoolHealth:
        """Count the pool's nodes and those that look unhealthy right now."""
        # A node in no pool is judged against the GPU nodes, never the whole cluster.
        selector = (
            f"{self._settings.node_pool_label}={input.node_pool}"
            if input.node_pool
            else input.node_selector or None
        )
        try:
            nodes = await list_node_summaries(self._core, selector)
        except ApiException as err:
            raise api_error("list_node", err) from err
        unhealthy = sorted(n.metadata.name for n in nodes if self._unhealthy(n))
        return c.PoolHealth(
            node_pool=input.node_pool,
            total=len(nodes),
            unhealthy=len(unhealthy),
            unhealthy_nodes=unhealthy[:1000],
        )

    # ------------------------------------------------------------------ helpers

    def _unhealthy(self, node: Any) -> bool:
        if not node_ready(node):
            return True
        taints = (node.spec.taints or []) if node.spec else []
        held = (node.metadata.annotations or {}).get(HELD_ANNOTATION) == "true"
        if not held and any(t.key == self._settings.quarantine_taint_key for t in taints):
            # A quarantine counts (the node is being worked on), except one an open
            # breaker holds: held nodes count only for their own signals below.
            return True
        for cond in (node.status.conditions or []) if node.status else []:
            if cond.type in NPD_PROBLEM_CONDITIONS and cond.status == "True":
                return True
            if cond.type == "AcceleratedHardwareReady" and cond.status == "False":
                return True
        return False

    async def _update_node(
        self,
        name: str,
        change: Callable[[Any], dict[str, Any] | None],
        *,
        missing_ok: bool = False,
        pin: c.NodePin | None = None,
    ) -> Any:
        """Read, change, write with resourceVersion; re-read on 409 so no edit is lost.

        The write's resourceVersion makes the pin check hold for the write too:
        a node deleted and registered again under the name fails it (409).

        Returns:
            The node as read before the write (None when it is missing and
            ``missing_ok``).

        Raises:
            ApplicationError: ``NodeReplaced`` when the node is not ``pin``'s machine.
        """
        for _ in range(CONFLICT_RETRIES):
            node = await call_api(self._core.read_node, name, missing_ok=missing_ok)
            if node is None:
                return None
            check_pin(node, name, pin)
            patch = change(node)
            if patch is None:
                return node
            patch = {**patch, "metadata": {**patch.get("metadata", {})}}
            patch["metadata"]["resourceVersion"] = node.metadata.resource_version
            try:
                await asyncio.to_thread(self._core.patch_node, name, patch)
                return node
            except ApiException as err:
                if err.status != 409:
                    raise api_error(f"patch node {name}", err) from err
                activity.logger.info("node %s changed underneath, retrying", name)
        raise ApplicationError(f"node {name} kept changing; gave up after {CONFLICT_RETRIES} tries")

    async def _event(
        self,
        obj: Any,
        incident_id: str,
        reason: str,
        message: str,
        *,
        warning: bool,
        kind: str = "Node",
    ) -> str:
        digest = hashlib.sha256(f"{incident_id}\n{reason}\n{message}".encode()).hexdigest()[:16]
        name = f"{obj.metadata.name}.{digest}"[:253]
        namespace = obj.metadata.namespace or self._settings.events_namespace
        now = datetime.now(UTC)
        event = k8s.CoreV1Event(
            metadata=k8s.V1ObjectMeta(name=name, namespace=namespace),
            involved_object=k8s.V1ObjectReference(
                kind=kind,
                name=obj.metadata.name,
                namespace=obj.metadata.namespace,
                uid=obj.metadata.uid,
                api_version="v1",
            ),
            reason=reason,
            message=message[:1024],
            type="Warning" if warning else "Normal",
            first_timestamp=now,
            last_timestamp=now,
            count=1,
            source=k8s.V1EventSource(component="gpu-remediation"),
            reporting_component="gpu-remediation",
        )
        try:
            await asyncio.to_thread(self._core.create_namespaced_event, namespace, event)
        except ApiException as err:
            if err.status != 409:  # already recorded by an earlier attempt
                raise api_error(f"create event {name}", err) from err
        return name


def node_ready(node: Any) -> bool:
    """Whether the node's Ready condition is True."""
    conditions = (node.status.conditions or []) if node.status else []
    return any(cond.type == "Ready" and cond.status == "True" for cond in conditions)


def _taint_dict(taint: Any) -> dict[str, Any]:
    out = {"key": taint.key, "effect": taint.effect}
    if taint.value is not None:
        out["value"] = taint.value
    if taint.time_added is not None:
        out["timeAdded"] = taint.time_added.isoformat()
    return out


async def call_api(fn: Callable[..., T], *args: Any, missing_ok: bool = False, **kwargs: Any) -> T:
    """Run a blocking client call off the event loop; map its errors.

    With ``missing_ok`` a 404 returns None (the object is already gone).
    """
    try:
        return await asyncio.to_thread(fn, *args, **kwargs)
    except ApiException as err:
        if missing_ok and err.status == 404:
            return None  # type: ignore[return-value]
        raise api_error(getattr(fn, "__name__", "kubernetes call"), err) from err


async def read_pinned_node(core: k8s.CoreV1Api, name: str, pin: c.NodePin | None) -> Any:
    """Read the node an incident acts on and refuse another machine under its name.

    Raises:
        ApplicationError: ``NodeNotFound`` (non-retryable) when it is gone,
            ``NodeReplaced`` when it is not ``pin``'s machine, else
            :func:`api_error`'s mapping of the API's refusal.
    """
    try:
        node = await asyncio.to_thread(core.read_node, name)
    except ApiException as err:
        if err.status == 404:
            raise ApplicationError(
                f"node {name} not found", type="NodeNotFound", non_retryable=True
            ) from err
        raise api_error(f"read node {name}", err) from err
    check_pin(node, name, pin)
    return node


def api_error(call: str, err: ApiException) -> ApplicationError:
    """An activity error for an API failure: 4xx other than throttling is final."""
    status = err.status or 0
    final = 400 <= status < 500 and status not in (408, 409, 429)
    return ApplicationError(
        f"{call}: {status} {err.reason}: {(err.body or '')[:300]}",
        type="KubernetesError" if not final else "InvalidInput",
        non_retryable=final,
    )


def _created_since(node: NodeSummary, since: datetime) -> bool:
    created = node.metadata.creation_timestamp
    return created is not None and created >= since


def _replacement_candidates(
    nodes: list[NodeSummary], old: str, since: datetime
) -> list[NodeSummary]:
    """Ready nodes created at or after ``since`` (not ``old``), oldest first.

    Nodes from the deletion's own second may have existed before it (1 s
    resolution): those clearly created after come first.
    """
    created = [
        (n.metadata.creation_timestamp, n)
        for n in nodes
        if n.metadata.name != old
        and n.metadata.creation_timestamp is not None
        and n.metadata.creation_timestamp >= since
        and node_ready(n)
    ]
    created.sort(key=lambda pair: (pair[0] <= since, pair[0], pair[1].metadata.name))
    return [n for _, n in created]


def _annotation(node: Any, key: str) -> str | None:
    annotations = (node.metadata.annotations or {}) if node.metadata else {}
    value = annotations.get(key)
    return str(value) if value is not None else None


def _claims(nodes: list[Any]) -> str:
    """Names with the node each was claimed for, for error messages."""
    named = ((str(n.metadata.name), _annotation(n, REPLACES_ANNOTATION)) for n in nodes)
    return ", ".join(f"{name} (replaces {old})" if old else name for name, old in named)
