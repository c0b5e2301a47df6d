"""Karpenter's part: NodeClaim deletion terminates a node, new capacity replaces it.

Deleting a NodeClaim (it carries the ``karpenter.sh/termination`` finalizer,
so it only gets a deletionTimestamp) makes Karpenter, as in v1:

1. taint the node ``karpenter.sh/disrupted:NoSchedule``;
2. evict its pods through the Eviction API, respecting PodDisruptionBudgets
   (blocked evictions are retried every ``drain_retry``; after ``drain_timeout``,
   its terminationGracePeriod, what is left is deleted);
3. terminate the EC2 instance (moto), wait ``instance_termination``, delete the
   Node and drop the finalizer, so the NodeClaim goes.

A launch or a termination that EC2 throttles (``RequestLimitExceeded``), answers
with a 5xx or never answers is retried after ``drain_retry``, as Karpenter's
controllers requeue a failed reconcile (the fleet's EC2 client does not retry
itself, so no backoff sleeps on the scheduler's thread).

The evicted pods go Pending, so Karpenter provisions: a new NodeClaim appears
at once (not yet launched) and ``node_launch`` later its instance runs and its
Node registers Ready. Each pool is kept at its configured size this way.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from simulator.fleet.model import Phase
from simulator.fleet.ports import KarpenterFleet
from simulator.kube_api import NODECLAIMS, NODEPOOLS, NODES, PODS, ApiError
from simulator.kube_api.watch import Change

if TYPE_CHECKING:
    from simulator.fleet.arrivals import Arrivals
    from simulator.fleet.config import PoolSpec
    from simulator.fleet.inventory import Inventory

log = logging.getLogger(__name__)

DISRUPTED_TAINT = {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
EC2_THROTTLING = frozenset({"RequestLimitExceeded", "ThrottlingException", "Throttling"})


def _retryable(err: ClientError | BotoCoreError) -> bool:
    """Throttling, a server error or a broken connection: worth another reconcile."""
    if isinstance(err, BotoCoreError):
        return True
    code = str(err.response.get("Error", {}).get("Code"))
    status = int(err.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
    return code in EC2_THROTTLING or status >= 500


def _deleting(obj: dict[str, Any] | None) -> bool:
    return bool(obj and (obj.get("metadata") or {}).get("deletionTimestamp"))


class Karpenter:
    """Terminates nodes whose NodeClaim is deleted and launches their replacements."""

    def __init__(
        self, fleet: KarpenterFleet, inventory: Inventory, arrivals: Arrivals | None = None
    ) -> None:
        self._fleet = fleet
        self._inventory = inventory
        self._arrivals = arrivals
        self._launching: dict[str, str] = {}
        """NodeClaims created but not launched yet: name -> pool."""
        self.in_flight = 0
        """Terminations started and not finished (NodeClaim deleted, Node not gone yet)."""
        self.max_in_flight = 0

    # ------------------------------------------------------------------ hook

    def on_change(self, change: Change) -> None:
        """Store hook (under the store lock): hand NodeClaim deletions to the scheduler."""
        if change.resource != NODECLAIMS.key:
            return
        name = change.obj["metadata"]["name"]
        started = _deleting(change.obj) and not _deleting(change.old)
        vanished = change.type == "DELETED" and not _deleting(change.old)
        if started or vanished:
            self._fleet.scheduler.call_soon(lambda: self.terminate(name))

    # ------------------------------------------------------------- provision

    def provision(self, pool: PoolSpec) -> str:
        """Create a NodeClaim for new capacity in ``pool``; its node follows after the delay."""
        fleet = self._fleet
        with fleet.lock:
            name = self._inventory.next_node_name(pool.name)
            self._launching[name] = pool.name
        fleet.store.put_nodeclaim(name, node_pool=pool.name, ready=False)
        fleet.count("karpenter.provisioned")
        fleet.scheduler.call_later(
            fleet.config.durations.node_launch.total_seconds(), lambda: self._launch(name)
        )
        return name

    def _launch(self, name: str) -> None:
        fleet = self._fleet
        with fleet.lock:
            pool_name = self._launching.pop(name, None)
        if pool_name is None:
            return  # its NodeClaim was deleted before the launch
        pool = fleet.pool(pool_name)
        try:
            (instance_id,) = self._inventory.launch_instances(pool, 1)
        except (ClientError, BotoCoreError) as err:
            if not _retryable(err):
                raise
            with fleet.lock:
                self._launching[name] = pool_name
            self._requeue("launch", err, lambda: self._launch(name))
            return
        # As Karpenter does: the NodePool's startupTaints are on the Node when it registers.
        self._inventory.add_node(name, pool, instance_id, taints=self._startup_taints(pool_name))
        fleet.count("karpenter.launched")
        if self._arrivals is not None:
            self._arrivals.launched(name)

    def _startup_taints(self, pool: str) -> list[dict[str, Any]]:
        try:
            obj = self._fleet.store.get(NODEPOOLS, pool)
        except ApiError as err:
            if err.code != 404:
                raise
            return []
        spec = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
        return [dict(t) for t in spec.get("startupTaints") or []]

    # ------------------------------------------------------------- terminate

    def terminate(self, claim: str) -> None:
        """Karpenter's termination of the NodeClaim ``claim`` (idempotent)."""
        fleet = self._fleet
        with fleet.lock:
            pool_name = self._launching.pop(claim, None)
            node = fleet.nodes.get(claim)
            starting = node is not None and node.phase in (Phase.RUNNING, Phase.REBOOTING)
            if node is not None and starting:
                node.phase = Phase.TERMINATING
                pool_name = node.pool
                self.in_flight += 1
                self.max_in_flight = max(self.max_in_flight, self.in_flight)
        if not starting:
            if pool_name is not None:
                # Deleted before it launched: nothing to drain; the pods still need capacity.
                self._drop_finalizer(claim)
                self.provision(fleet.pool(pool_name))
            elif node is None:
                self._drop_finalizer(claim)  # not a node of ours (or already finished)
            return
        assert pool_name is not None
        fleet.count("karpenter.terminations")
        fleet.node_changed(claim)
        self._taint(claim)
        self.provision(fleet.pool(pool_name))
        deadline = fleet.clock.now() + fleet.config.durations.drain_timeout.total_seconds()
        self._drain(claim, deadline)

    def _taint(self, name: str) -> None:
        def change(node: dict[str, Any]) -> None:
            taints = list(node["spec"].get("taints") or [])
            if not any(t.get("key") == DISRUPTED_TAINT["key"] for t in taints):
                taints.append(dict(DISRUPTED_TAINT))
            node["spec"]["taints"] = taints

        try:
            self._fleet.store.mutate(NODES, name, None, change)
        except ApiError as err:
            if err.code != 404:
                raise

    def _pods_on(self, name: str) -> list[dict[str, Any]]:
        store = self._fleet.store
        with store.lock:
            found = []
            for pod in store.peek(PODS):
                meta = pod["metadata"]
                if (pod.get("spec") or {}).get("nodeName") != name:
                    continue
                if meta.get("deletionTimestamp") or MIRROR_ANNOTATION in (
                    meta.get("annotations") or {}
                ):
                    continue
                if any(r.get("kind") == "DaemonSet" for r in meta.get("ownerReferences") or []):
                    continue
                if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                    continue
                found.append({"name": meta["name"], "ns": meta["namespace"], "uid": meta["uid"]})
            return found

    def _drain(self, name: str, deadline: float) -> None:
        fleet = self._fleet
        blocked = []
        for pod in self._pods_on(name):
            body = {
                "metadata": {"name": pod["name"], "namespace": pod["ns"]},
                "deleteOptions": {"preconditions": {"uid": pod["uid"]}},
            }
            try:
                fleet.store.evict(pod["ns"], pod["name"], body)
            except ApiError as err:
                if err.code in (404, 409):
                    continue  # gone already, or replaced by another pod
                if err.code not in (429, 500):
                    raise
                blocked.append(pod)  # a budget (or several) blocks it: try again later
        if blocked and fleet.clock.now() < deadline:
            fleet.scheduler.call_later(
                fleet.config.durations.drain_retry.total_seconds(),
                lambda: self._drain(name, deadline),
            )
            return
        for pod in blocked:
            # terminationGracePeriod is over: Karpenter deletes what is left.
            try:
                fleet.store.delete_object(PODS, pod["name"], pod["ns"])
            except ApiError as err:
                if err.code != 404:
                    raise
        with fleet.lock:
            node = fleet.nodes.get(name)
            instance_id = node.instance_id if node is not None else None
        if instance_id is not None:
            try:
                self._inventory.terminate_instance(instance_id)
            except (ClientError, BotoCoreError) as err:
                if not _retryable(err):
                    raise
                self._requeue("terminate", err, lambda: self._drain(name, deadline))
                return
        fleet.scheduler.call_later(
            fleet.config.durations.instance_termination.total_seconds(),
            lambda: self._finish(name),
        )

    def _requeue(
        self, what: str, err: ClientError | BotoCoreError, again: Callable[[], None]
    ) -> None:
        fleet = self._fleet
        fleet.count(f"karpenter.{what}_retried")
        log.info("karpenter: %s failed (%s); retrying after drain_retry", what, err)
        fleet.scheduler.call_later(fleet.config.durations.drain_retry.total_seconds(), again)

    def _finish(self, name: str) -> None:
        fleet = self._fleet
        with fleet.lock:
            self.in_flight -= 1
        self._inventory.remove_node(name)
        try:
            fleet.store.delete_object(NODES, name)
        except ApiError as err:
            if err.code != 404:
                raise
        self._drop_finalizer(name)

    def _drop_finalizer(self, claim: str) -> None:
        try:
            self._fleet.store.remove_finalizers(NODECLAIMS, claim)
        except ApiError as err:
            if err.code != 404:
                raise
