"""Change history and watchers.

The store appends every change to a bounded history (like etcd before compaction). A
:class:`Watcher` replays the history after a resourceVersion and then follows new changes;
a resourceVersion older than the retained window raises 410 Expired, which the HTTP layer
turns into the ``ERROR`` watch event the real server sends.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import expired
from .resources import ResourceType
from .selectors import FieldSelector, LabelSelector

JSON = dict[str, Any]


@dataclass(frozen=True)
class Change:
    """One committed change; ``old`` is the previous state (None for ADDED)."""

    rv: int
    type: str
    resource: str
    namespace: str
    obj: JSON
    old: JSON | None


class History:
    """The retained window of changes; callers hold the store lock."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.changes: deque[Change] = deque()
        # Every change with rv <= compacted_rv is gone from the window.
        self.compacted_rv = 0

    def append(self, change: Change) -> None:
        """Record a change, dropping the oldest beyond the window."""
        self.changes.append(change)
        self.trim()

    def trim(self) -> None:
        """Drop changes beyond ``size``, advancing the compaction point."""
        while len(self.changes) > self.size:
            self.compacted_rv = self.changes.popleft().rv

    def compact(self, rv: int) -> None:
        """Forget everything up to and including ``rv``."""
        while self.changes and self.changes[0].rv <= rv:
            self.changes.popleft()
        self.compacted_rv = max(self.compacted_rv, rv)

    def after(self, rv: int) -> list[Change]:
        """Return the retained changes newer than ``rv`` (oldest first)."""
        newer: list[Change] = []
        for change in reversed(self.changes):
            if change.rv <= rv:
                break
            newer.append(change)
        newer.reverse()
        return newer


class Wakers:
    """One condition per resource over the store lock: a commit wakes only its type's watchers.

    With one condition for all, each commit (a job's pod, say) woke every watch
    stream of every type, each taking the store lock and the interpreter lock to
    find nothing for it: at 1,000 nodes that stole time from the simulator's thread.
    """

    def __init__(self, lock: threading.RLock, resources: list[str]) -> None:
        self._conds = {key: threading.Condition(lock) for key in resources}

    def of(self, resource: str) -> threading.Condition:
        """The condition a watcher of ``resource`` waits on."""
        return self._conds[resource]

    def notify(self, resource: str) -> None:
        """A change of ``resource`` was committed (caller holds the lock)."""
        self._conds[resource].notify_all()

    def notify_all(self) -> None:
        """Wake every watcher (caller holds the lock): closing, or a stop to re-check."""
        for cond in self._conds.values():
            cond.notify_all()


class Watcher:
    """Follows the store's changes for one resource, namespace and selector pair.

    Not thread-safe itself: one watcher serves one HTTP stream (or one Python consumer).
    """

    def __init__(
        self,
        *,
        rtype: ResourceType,
        namespace: str | None,
        labels: LabelSelector,
        fields: FieldSelector,
        cond: threading.Condition,
        history: History,
        current_rv: Callable[[], int],
        closed: Callable[[], bool],
        start_rv: int,
        initial: list[JSON],
    ) -> None:
        self.rtype = rtype
        self.namespace = namespace
        self.labels = labels
        self.fields = fields
        self._cond = cond
        self._history = history
        self._current_rv = current_rv
        self._closed = closed
        self.position = start_rv
        self._pending: list[JSON] = [{"type": "ADDED", "object": o} for o in initial]

    def _matches(self, obj: JSON | None) -> bool:
        if obj is None:
            return False
        meta = obj.get("metadata") or {}
        return self.labels.matches(meta.get("labels")) and self.fields.matches(obj)

    def _translate(self, change: Change) -> JSON | None:
        if change.resource != self.rtype.key:
            return None
        if self.namespace is not None and change.namespace != self.namespace:
            return None
        now = self._matches(change.obj)
        if change.type == "MODIFIED":
            # Like the watch cache: entering the selector is ADDED, leaving it DELETED.
            before = self._matches(change.old)
            if before and now:
                return {"type": "MODIFIED", "object": change.obj}
            if now:
                return {"type": "ADDED", "object": change.obj}
            if before:
                return {"type": "DELETED", "object": change.obj}
            return None
        return {"type": change.type, "object": change.obj} if now else None

    def poll(self, timeout: float, stop: Callable[[], bool] | None = None) -> list[JSON]:
        """Wait up to ``timeout`` seconds and return the next watch events (maybe none).

        ``stop`` is checked whenever the store's condition is notified (see
        ``ObjectStore.wake``), so a stopping server ends its watches at once.

        Raises:
            ApiError: 410 Expired when the watcher's position left the retained window.
        """
        if self._pending:
            out, self._pending = self._pending, []
            return out
        with self._cond:
            self._cond.wait_for(
                lambda: (
                    self._current_rv() > self.position
                    or self._closed()
                    or (stop is not None and stop())
                ),
                timeout,
            )
            if self.position < self._history.compacted_rv:
                raise expired(
                    f"too old resource version: {self.position} ({self._history.compacted_rv + 1})"
                )
            changes = self._history.after(self.position)
            self.position = max(self.position, self._current_rv())
        events = [e for e in map(self._translate, changes) if e is not None]
        return events

    def bookmark(self) -> JSON:
        """A BOOKMARK event carrying the watcher's current resourceVersion."""
        return {
            "type": "BOOKMARK",
            "object": {
                "kind": self.rtype.kind,
                "apiVersion": self.rtype.api_version,
                "metadata": {"resourceVersion": str(self.position)},
            },
        }
