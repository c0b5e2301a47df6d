"""Availability accounting: node-seconds healthy and schedulable over the pools' capacity.

Beside it, capacity doing work (issue 36): node-seconds a node is available *or*
runs a training job's pod. A quarantined node that finishes its job first, or a
slow one, is not available but still works; a node that is down, rebooting or
idle behind a cordon does neither.

The counts of available, healthy and schedulable nodes are piecewise constant
between changes, so each change first adds ``count * elapsed`` to the
integrals and then moves the count: O(1) per change, for any fleet size.
Capacity is the configured size of the pools: a node slot being replaced
counts as unavailable until the new node is Ready.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.fleet.model import NodeState, Phase


@dataclass(slots=True)
class _Integral:
    count: int = 0
    seconds: float = 0.0


class Availability:
    """Integrals over simulated time; the caller serialises calls (the fleet lock).

    Args:
        capacity: Node slots of the fleet (the pools' configured sizes).
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._last = 0.0
        self._started = 0.0
        self._available = _Integral()
        self._healthy = _Integral()
        self._schedulable = _Integral()
        self._working = _Integral()

    def _advance(self, now: float) -> None:
        elapsed = max(0.0, now - self._last)
        for integral in (self._available, self._healthy, self._schedulable, self._working):
            integral.seconds += integral.count * elapsed
        self._last = max(self._last, now)

    def change(
        self,
        now: float,
        *,
        available: int = 0,
        healthy: int = 0,
        schedulable: int = 0,
        working: int = 0,
    ) -> None:
        """Move the counts by the given deltas at simulated time ``now``."""
        self._advance(now)
        self._available.count += available
        self._healthy.count += healthy
        self._schedulable.count += schedulable
        self._working.count += working

    def track(self, node: NodeState, now: float) -> None:
        """Count ``node`` by its flags now (a change since it was last counted moves the counts).

        The caller holds the fleet lock (the flags live on the node).
        """
        flags = (node.available, node.truly_healthy, node.schedulable, node.working)
        if node.phase is Phase.GONE:
            flags = (False, False, False, False)
        if flags == node.counted:
            return
        delta = [int(new) - int(old) for new, old in zip(flags, node.counted, strict=True)]
        self.change(
            now, available=delta[0], healthy=delta[1], schedulable=delta[2], working=delta[3]
        )
        node.counted = flags

    def report(self, now: float) -> dict[str, float]:
        """Fractions of capacity-seconds so far (1.0 before any time has passed)."""
        self._advance(now)
        total = self.capacity * (self._last - self._started)
        if total <= 0:
            return {
                "available": 1.0,
                "healthy": 1.0,
                "schedulable": 1.0,
                "working": 1.0,
                "node_seconds": 0.0,
            }
        return {
            "available": self._available.seconds / total,
            "healthy": self._healthy.seconds / total,
            "schedulable": self._schedulable.seconds / total,
            "working": self._working.seconds / total,
            "node_seconds": total,
        }
