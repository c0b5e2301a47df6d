"""Ground truth of the nodes, recorded as the fleet's cluster changes.

The recorder is a store hook of the Kubernetes API emulator (``KubeStore.add_hook``,
called under the store lock after every committed change), attached before the
fleet starts, so it sees every Node from its creation: each new boot id, each
span a trigger condition was a problem (judged by the policy's own rules), each
NodeClaim deletion, and the node's cordon and taints when it ends or is deleted.
It reads what the simulator wrote, not what any client saw, so a watcher that
missed a change while it was down does not hide it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from demo.chaos.facts import BootChange, NodeRecord, ProblemEpisode, Taint
from gpu_remediation.policy import TriggerPolicy
from simulator.kube_api import NODECLAIMS, NODES, KubeStore
from simulator.kube_api.selectors import parse_label_selector
from simulator.kube_api.watch import Change


@dataclass
class _Track:
    name: str
    watched: bool
    instance_id: str | None = None
    boots: list[BootChange] = field(default_factory=list)
    open: dict[str, tuple[datetime, float]] = field(default_factory=dict)
    """Condition type -> (problem since, grace in seconds)."""
    closed: list[ProblemEpisode] = field(default_factory=list)
    claim_deleted_at: list[datetime] = field(default_factory=list)
    deleted_at: datetime | None = None
    unschedulable: bool = False
    taints: list[Taint] = field(default_factory=list)


def _taints(spec: dict[str, Any]) -> list[Taint]:
    return [
        Taint(key=str(t.get("key")), value=t.get("value"), effect=str(t.get("effect")))
        for t in spec.get("taints") or []
    ]


def _instance_id(provider_id: str | None) -> str | None:
    # aws:///us-west-2a/i-0abc -> i-0abc
    return provider_id.rsplit("/", 1)[-1] if provider_id else None


class GroundTruthRecorder:
    """Records what really happened to every node of one store.

    Args:
        triggers: The policy's triggers (already in real time): which conditions
            are problems and their graces, and the watcher's node selector.
        clock: Returns "now" (UTC).
    """

    def __init__(
        self,
        triggers: TriggerPolicy,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._triggers = triggers
        self._selector = parse_label_selector(triggers.node_selector)
        self._clock = clock
        self._lock = threading.Lock()
        self._nodes: dict[str, _Track] = {}

    def attach(self, store: KubeStore) -> GroundTruthRecorder:
        """Start recording ``store``'s changes (before the fleet seeds it, to see every node)."""
        store.add_hook(self._on_change)
        return self

    def _on_change(self, change: Change) -> None:
        # Under the store lock: only bookkeeping, never a call back into the store.
        if change.resource == NODES.key:
            self._node_changed(change)
        elif change.resource == NODECLAIMS.key:
            self._claim_changed(change)

    def _node_changed(self, change: Change) -> None:
        obj = change.obj
        meta = obj.get("metadata") or {}
        name = str(meta.get("name"))
        now = self._clock()
        with self._lock:
            track = self._nodes.get(name)
            if track is None or track.deleted_at is not None:
                # A name can come back (a node re-registered): a new life, recorded afresh.
                track = _Track(name=name, watched=self._selector.matches(meta.get("labels")))
                self._nodes[name] = track
            spec, status = obj.get("spec") or {}, obj.get("status") or {}
            track.unschedulable = bool(spec.get("unschedulable"))
            track.taints = _taints(spec)
            track.instance_id = _instance_id(spec.get("providerID")) or track.instance_id
            if change.type == "DELETED":
                track.deleted_at = now
                self._close_all(track, now)
                return
            boot_id = (status.get("nodeInfo") or {}).get("bootID")
            if boot_id and (not track.boots or track.boots[-1].boot_id != boot_id):
                track.boots.append(BootChange(at=now, boot_id=str(boot_id)))
            self._conditions(track, status.get("conditions") or [], now)

    def _conditions(self, track: _Track, conditions: list[dict[str, Any]], now: datetime) -> None:
        problems: dict[str, float] = {}
        for condition in conditions:
            rule = self._triggers.rule_for(
                str(condition.get("type")),
                str(condition.get("status")),
                str(condition.get("reason") or ""),
            )
            if rule is not None:
                problems[rule.type] = rule.grace.total_seconds()
        for kind, grace in problems.items():
            track.open.setdefault(kind, (now, grace))
        for kind in [k for k in track.open if k not in problems]:
            start, grace = track.open.pop(kind)
            track.closed.append(ProblemEpisode(condition=kind, start=start, end=now, grace_s=grace))

    @staticmethod
    def _close_all(track: _Track, now: datetime) -> None:
        for kind, (start, grace) in track.open.items():
            track.closed.append(ProblemEpisode(condition=kind, start=start, end=now, grace_s=grace))
        track.open.clear()

    def _claim_changed(self, change: Change) -> None:
        def deleting(obj: dict[str, Any] | None) -> bool:
            return bool(obj and (obj.get("metadata") or {}).get("deletionTimestamp"))

        started = deleting(change.obj) and not deleting(change.old)
        vanished = change.type == "DELETED" and not deleting(change.old)
        if not (started or vanished):
            return
        name = str((change.obj.get("metadata") or {}).get("name"))
        now = self._clock()
        with self._lock:
            track = self._nodes.get(name)
            if track is not None:
                track.claim_deleted_at.append(now)

    def records(self) -> dict[str, NodeRecord]:
        """Every node seen so far, as it is now."""
        with self._lock:
            return {
                name: NodeRecord(
                    name=name,
                    watched=t.watched,
                    instance_id=t.instance_id,
                    boot_ids=list(t.boots),
                    episodes=[
                        *t.closed,
                        *(
                            ProblemEpisode(condition=kind, start=start, grace_s=grace)
                            for kind, (start, grace) in t.open.items()
                        ),
                    ],
                    claim_deleted_at=list(t.claim_deleted_at),
                    deleted_at=t.deleted_at,
                    unschedulable=t.unschedulable,
                    taints=list(t.taints),
                )
                for name, t in self._nodes.items()
            }

    def owed_problems(self, now: datetime, slack_s: float) -> set[str]:
        """Watched nodes with a problem still open that has lasted its grace plus ``slack_s``."""
        with self._lock:
            return {
                t.name
                for t in self._nodes.values()
                if t.watched
                and t.deleted_at is None
                and any(
                    (now - start).total_seconds() >= grace + slack_s
                    for start, grace in t.open.values()
                )
            }

    def node_for_instance(self) -> dict[str, str]:
        """EC2 instance id -> node name, for every node seen."""
        with self._lock:
            return {t.instance_id: t.name for t in self._nodes.values() if t.instance_id}
