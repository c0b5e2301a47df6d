"""Watch fan-out: several HTTP watchers of one resource, events received against events committed.

The emulator's store calls a hook on every committed change (under its lock);
:class:`CommitLog` records each change's resourceVersion by resource. Each
:class:`Follower` lists the resource once over HTTP with the official client,
then watches from the list's resourceVersion (with bookmarks), resuming after
each watch timeout from the last version it saw, exactly as a controller
does. It records the resourceVersion of every event it receives. A ``410
Gone`` (the watcher fell out of the retained window) is counted and followed
by a fresh list, so the changes it skipped show up as missing.

When the load ends the caller lists once more (``end_rv``) and lets every
follower run until it has seen that version (a bookmark carries it once the
follower has caught up). :func:`account` then compares, per follower, the
versions received in ``(start_rv, end_rv]`` with the versions committed there:
missing, duplicated and unexpected events, and whether they arrived in order.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes.watch.watch import iter_resp_lines

from simulator.kube_api.watch import Change

GONE = 410


class CommitLog:
    """The resourceVersions committed per resource (a store hook; called under its lock)."""

    def __init__(self) -> None:
        self.rvs: dict[str, list[int]] = {}

    def hook(self, change: Change) -> None:
        """Record one committed change."""
        self.rvs.setdefault(change.resource, []).append(change.rv)


@dataclass
class Follower:
    """One list-then-watch client of a resource, counting what it receives.

    Args:
        name: Label in the results.
        list_call: The official client's list method (``CoreV1Api.list_node``, ...).
        watch_timeout: Seconds each watch request lasts before it is resumed.
    """

    name: str
    list_call: Callable[..., Any]
    watch_timeout: int = 5
    start_rv: int = 0
    rv: int = 0
    received: list[int] = field(default_factory=list)
    expired: int = 0
    errors: list[str] = field(default_factory=list)
    watches: int = 0
    end_rv: int | None = None
    """Set by the caller when the load is over: stop once this version is seen."""
    _stop: threading.Event = field(default_factory=threading.Event)

    def _list(self) -> int:
        response = self.list_call(_preload_content=False)
        return int(json.loads(response.data)["metadata"]["resourceVersion"])

    def run(self, hard_deadline: float) -> None:
        """List, then watch until ``end_rv`` is reached or ``hard_deadline`` (monotonic) passes."""
        self.start_rv = self.rv = self._list()
        while not self._done() and time.monotonic() < hard_deadline:
            try:
                self._watch_once()
            except Exception as err:  # recorded and reported, never hidden
                self.errors.append(f"{type(err).__name__}: {err}"[:300])
                if len(self.errors) > 20:
                    return
                time.sleep(0.2)

    def stop(self) -> None:
        """Stop after the current watch request."""
        self._stop.set()

    def _done(self) -> bool:
        return self._stop.is_set() or (self.end_rv is not None and self.rv >= self.end_rv)

    def _watch_once(self) -> None:
        self.watches += 1
        response = self.list_call(
            watch=True,
            resource_version=str(self.rv),
            allow_watch_bookmarks=True,
            timeout_seconds=self.watch_timeout,
            _preload_content=False,
            _request_timeout=(10, self.watch_timeout + 30),
        )
        try:
            for line in iter_resp_lines(response):
                event = json.loads(line)
                kind = event.get("type")
                obj = event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == GONE:
                        # Fell out of the window: what was skipped stays missing.
                        self.expired += 1
                        self.rv = self._list()
                        return
                    raise RuntimeError(f"watch error event: {obj!r:.200}")
                version = int(obj["metadata"]["resourceVersion"])
                if kind != "BOOKMARK":
                    self.received.append(version)
                self.rv = max(self.rv, version)
                if self._done():
                    return
        finally:
            response.release_conn()


@dataclass(frozen=True)
class FanOutCount:
    """What one follower received of what was committed in its window."""

    name: str
    committed: int
    received: int
    missing: int
    duplicates: int
    unexpected: int
    in_order: bool
    expired: int
    errors: int


def account(
    name: str,
    committed: Sequence[int],
    received: Sequence[int],
    start_rv: int,
    end_rv: int,
    *,
    expired: int = 0,
    errors: int = 0,
) -> FanOutCount:
    """Compare the versions a follower received in ``(start_rv, end_rv]`` with those committed."""
    expected = {rv for rv in committed if start_rv < rv <= end_rv}
    got = [rv for rv in received if start_rv < rv <= end_rv]
    unique = set(got)
    return FanOutCount(
        name=name,
        committed=len(expected),
        received=len(got),
        missing=len(expected - unique),
        duplicates=len(got) - len(unique),
        unexpected=len(unique - expected),
        in_order=all(a < b for a, b in itertools.pairwise(got)),
        expired=expired,
        errors=errors,
    )


def run_followers(
    followers: Sequence[Follower], end_rv: Callable[[], int], load_s: float, grace_s: float = 60.0
) -> None:
    """Run ``followers`` in threads for ``load_s`` seconds, then until each reaches ``end_rv()``.

    ``end_rv`` is called once the load time is over (a list's resourceVersion).
    """
    hard_deadline = time.monotonic() + load_s + grace_s
    threads = [
        threading.Thread(target=f.run, args=(hard_deadline,), name=f"follow-{f.name}", daemon=True)
        for f in followers
    ]
    for thread in threads:
        thread.start()
    time.sleep(load_s)
    last = end_rv()
    for follower in followers:
        follower.end_rv = last
    for thread in threads:
        thread.join(timeout=max(0.0, hard_deadline - time.monotonic()) + 5)
    for follower in followers:
        follower.stop()


def counts(
    followers: Sequence[Follower], log: CommitLog, resource_of: dict[str, str]
) -> list[FanOutCount]:
    """:func:`account` for each follower (``resource_of``: follower name -> store resource key)."""
    out = []
    for f in followers:
        assert f.end_rv is not None, "run_followers sets end_rv"
        out.append(
            account(
                f.name,
                log.rvs.get(resource_of[f.name], []),
                f.received,
                f.start_rv,
                f.end_rv,
                expired=f.expired,
                errors=len(f.errors),
            )
        )
    return out
