"""Recoveries nobody saw: conditions that cleared while the watcher was not watching.

A condition that clears while the watcher is down (or between a lost watch
and the re-list) leaves its incident waiting for a recovery that no episode
of the restarted watcher would send. So after each listing the cluster's open
incidents are looked up (in the background: their ``state`` queries need a
worker) and every condition the watcher reported that an incident still
holds on a listed node is handed to the tracker
(:meth:`~triggers.condition_tracker.ConditionTracker.adopt`), which clears it
after the rule's grace of health like any other episode. A failed lookup is
retried with backoff; a newer listing replaces one still waiting.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Protocol

from temporalio.service import RPCError

from gpu_remediation.models import ConditionEvidence, Evidence
from gpu_remediation.workflow_models import NodeRemediationState
from triggers.condition_tracker import ConditionReport, ConditionTracker, ObservedCondition
from triggers.starter import TemporalUnavailableError

log = logging.getLogger("gpu_remediation.watcher")

Listing = Mapping[str, Sequence[ObservedCondition]]


class OpenIncidents(Protocol):
    """Where the open incidents come from (``IncidentStarter`` in the watcher)."""

    async def open_incidents(self) -> list[NodeRemediationState]:
        """The state of every running incident of the cluster."""
        ...


class UnseenRecoveries:
    """Checks each listing against the open incidents; driven by the watcher's loop.

    Args:
        incidents: Finds the cluster's open incidents.
        tracker: The watcher's tracker, which adopts what the incidents hold.
        backoff_initial: First delay after a failed lookup, seconds.
        backoff_max: Cap of the exponential backoff, seconds.
    """

    def __init__(
        self,
        incidents: OpenIncidents,
        tracker: ConditionTracker,
        *,
        backoff_initial: float,
        backoff_max: float,
    ) -> None:
        self._incidents = incidents
        self._tracker = tracker
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._waiting: Listing | None = None  # the latest listing not looked at yet
        self._lookup: asyncio.Task[list[NodeRemediationState]] | None = None
        self._lookup_listing: Listing = {}
        self._failures = 0
        self._retry_at = 0.0
        self.lookups_done = 0
        """Listings whose open incidents have been looked up (for status and tests)."""

    def listed(self, listing: Listing) -> None:
        """Note a fresh listing of the watched nodes (name to conditions)."""
        self._waiting = listing

    def poll(self, now: datetime) -> list[ConditionReport]:
        """Start a lookup that is due, or take one that finished; return reports to send.

        Must run in the watcher's event loop.

        Args:
            now: The current time (for the tracker).
        """
        lookup = self._lookup
        if lookup is not None:
            if not lookup.done():
                return []
            self._lookup = None
            try:
                states = lookup.result()
            except (TemporalUnavailableError, RPCError) as err:
                self._failures += 1
                delay = min(self._backoff_initial * 2 ** (self._failures - 1), self._backoff_max)
                self._retry_at = time.monotonic() + delay
                if self._waiting is None:
                    self._waiting = self._lookup_listing
                log.warning("could not look up open incidents (%s); retrying in %.1fs", err, delay)
                return []
            self._failures = 0
            self.lookups_done += 1
            return self._adopt(states, self._lookup_listing, now)
        if self._waiting is not None and time.monotonic() >= self._retry_at:
            self._lookup_listing, self._waiting = self._waiting, None
            self._lookup = asyncio.create_task(self._incidents.open_incidents())
        return []

    def cancel(self) -> None:
        """Stop a lookup under way (the watcher is stopping)."""
        if self._lookup is not None:
            self._lookup.cancel()
            self._lookup = None

    def _adopt(
        self, states: list[NodeRemediationState], listing: Listing, now: datetime
    ) -> list[ConditionReport]:
        reports: list[ConditionReport] = []
        for state in states:
            conditions = listing.get(state.node)
            if conditions is None:
                continue  # not a node this watcher watches (or it is gone)
            for held in state.active_evidence:
                if not isinstance(held, ConditionEvidence) or held.source != self._tracker.source:
                    continue
                current = next((c for c in conditions if c.type == held.type), None)
                start = _streak_start(state.evidence, held)
                reports += self._tracker.adopt(state.node, held, start, current, now)
        return reports


def _streak_start(history: list[Evidence], held: Evidence) -> datetime:
    """When the incident's current streak of ``held``'s signal began (after its last clear)."""
    start: datetime | None = None
    for item in history:
        if item.key != held.key:
            continue
        if item.cleared:
            start = None
        elif start is None:
            start = item.observed_at
    return start or held.observed_at
