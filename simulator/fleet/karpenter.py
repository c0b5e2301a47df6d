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
at once (not yet launched) and its launch is attempted. The capacity model
(``capacity.py``, issue 36) answers the attempt: an attempt that finds no capacity
(InsufficientInstanceCapacity) is counted and tried again ``capacity_retry`` later,
the NodeClaim staying unlaunched meanwhile (real Karpenter deletes it and creates
another for the still-Pending pods; one NodeClaim that waits is the same shortage
with fewer objects); an attempt that finds capacity starts the instance, whose Node
registers Ready a drawn launch time later (``node_launch`` with the model's
defaults). In a Capacity Block (``capacity_block_relaunch``) a replacement's first
attempt waits until the instance it replaces was terminated and its slot cleaned up.
Each pool is kept at its configured size this way.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from simulator.fleet.capacity import CapacityLedger, attempt_draws, launch_draws
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


@dataclass(slots=True)
class _Claim:
    """A NodeClaim created and not launched yet."""

    pool: str
    number: int
    """The pool's how-manieth NodeClaim (from 1): what its capacity draws are keyed by."""
    replaces: str | None
    """The NodeClaim whose node this one replaces (None: new capacity)."""
    attempts: int = 0


class Karpenter:
    """Terminates nodes whose NodeClaim is deleted and launches their replacements."""

    def __init__(
        self, fleet: KarpenterFleet, inventory: Inventory, arrivals: Arrivals | None = None
    ) -> None:
        self._fleet = fleet
        self._inventory = inventory
        self._arrivals = arrivals
        self._launching: dict[str, _Claim] = {}
        """NodeClaims created but not launched yet, by name."""
        self._claims: Counter[str] = Counter()
        """NodeClaims created so far, per pool."""
        self._held: set[str] = set()
        """In a Capacity Block: NodeClaims being replaced whose slot is not free yet."""
        self._blocked: dict[str, str] = {}
        """In a Capacity Block: old NodeClaim -> the NodeClaim waiting for its slot."""
        self.capacity = CapacityLedger()
        """Node-hours short and overlap instance-hours (under the fleet lock)."""
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

    def provision(self, pool: PoolSpec, *, replaces: str | None = None) -> str:
        """Create a NodeClaim for new capacity in ``pool`` and attempt its launch.

        Args:
            pool: Where the capacity is missing.
            replaces: The NodeClaim whose node the new one replaces, if any (a Capacity
                Block's replacement waits for its slot; the overlap is counted against it).
        """
        fleet = self._fleet
        with fleet.lock:
            name = self._inventory.next_node_name(pool.name)
            self._claims[pool.name] += 1
            claim = _Claim(pool.name, self._claims[pool.name], replaces)
            self._launching[name] = claim
            held = False
            if replaces is not None:
                self.capacity.replacing(name, replaces)
                if replaces in self._held:
                    # A full Capacity Block: the launch waits for the old instance's slot.
                    held = True
                    self._blocked[replaces] = name
                    self.capacity.waiting(name, fleet.clock.now())
        fleet.store.put_nodeclaim(name, node_pool=pool.name, ready=False)
        fleet.count("karpenter.provisioned")
        if held:
            fleet.count("karpenter.capacity_block_waits")
        else:
            self._attempt(name)
        return name

    def _attempt(self, name: str) -> None:
        """One launch attempt of NodeClaim ``name``: capacity (start its instance) or a retry."""
        fleet = self._fleet
        model = fleet.config.capacity
        with fleet.lock:
            claim = self._launching.get(name)
            if claim is None:
                return  # its NodeClaim was deleted while it waited for capacity
            claim.attempts += 1
            now = fleet.clock.now()
            seed = fleet.config.seed
            found = model.finds_capacity(
                attempt_draws(seed, claim.pool, claim.number, claim.attempts)
            )
            if found:
                self.capacity.launch_started(name, now)
            else:
                self.capacity.waiting(name, now)
        if not found:
            fleet.count("karpenter.insufficient_capacity")
            log.info("karpenter: no capacity for %s; next attempt after capacity_retry", name)
            fleet.scheduler.call_later(
                model.capacity_retry.total_seconds(), lambda: self._attempt(name)
            )
            return
        median = model.launch_median(
            fleet.pool(claim.pool).instance_type, fleet.config.durations.node_launch
        )
        launch_s = model.launch_seconds(median, launch_draws(seed, claim.pool, claim.number))
        fleet.scheduler.call_later(launch_s, lambda: self._launch(name))

    def _launch(self, name: str) -> None:
        fleet = self._fleet
        with fleet.lock:
            claim = self._launching.pop(name, None)
        if claim is None:
            return  # its NodeClaim was deleted before the launch
        pool_name = claim.pool
        pool = fleet.pool(pool_name)
        try:
            (instance_id,) = self._inventory.launch_instances(pool, 1)
        except (ClientError, BotoCoreError) as err:
            if not _retryable(err):
                raise
            with fleet.lock:
                self._launching[name] = claim
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
            unlaunched = self._launching.pop(claim, None)
            node = fleet.nodes.get(claim)
            starting = node is not None and node.phase in (Phase.RUNNING, Phase.REBOOTING)
            pool_name = unlaunched.pool if unlaunched is not None else None
            if unlaunched is not None:
                self.capacity.dropped(claim, fleet.clock.now())
            if node is not None and starting:
                node.phase = Phase.TERMINATING
                pool_name = node.pool
                self.in_flight += 1
                self.max_in_flight = max(self.max_in_flight, self.in_flight)
                self.capacity.terminating(claim)
                if fleet.config.capacity.capacity_block_relaunch is not None:
                    self._held.add(claim)
        if not starting:
            if unlaunched is not None:
                # Deleted before it launched: nothing to drain; the pods still need capacity
                # (for the node the deleted NodeClaim was to replace, if any).
                self._drop_finalizer(claim)
                self.provision(fleet.pool(unlaunched.pool), replaces=unlaunched.replaces)
            elif node is None:
                self._drop_finalizer(claim)  # not a node of ours (or already finished)
            return
        assert pool_name is not None
        fleet.count("karpenter.terminations")
        fleet.node_changed(claim)
        self._taint(claim)
        self.provision(fleet.pool(pool_name), replaces=claim)
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
        self._instance_ended(name)
        fleet.scheduler.call_later(
            fleet.config.durations.instance_termination.total_seconds(),
            lambda: self._finish(name),
        )

    def _instance_ended(self, name: str) -> None:
        """``name``'s instance is terminated: its overlap ends, a Capacity Block slot frees."""
        fleet = self._fleet
        relaunch = fleet.config.capacity.capacity_block_relaunch
        with fleet.lock:
            self.capacity.instance_ended(name, fleet.clock.now())
            held = name in self._held
        if held and relaunch is not None:
            fleet.scheduler.call_later(relaunch.total_seconds(), lambda: self._slot_free(name))

    def _slot_free(self, old: str) -> None:
        """The Capacity Block cleaned ``old``'s instance up: its replacement may launch."""
        with self._fleet.lock:
            self._held.discard(old)
            waiting = self._blocked.pop(old, None)
        if waiting is not None:
            self._attempt(waiting)

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
