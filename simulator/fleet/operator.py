"""A human operator: answers the tickets the remediation opens, as a person would.

The remediation hands a node to people by labelling it
``gpu-remediation.io/needs-human=true`` (and a Warning event). This model
watches for that label. For each new ticket it draws a **response time** (the
ticket waits that long before someone looks) and a **repair time** (the
hands-on work), with at most ``staff`` tickets worked at once, first looked at,
first served. Only the repair keeps a person busy: while a ticket waits for its
response (the page not yet answered) the staff work other tickets. When the
work is done the person acts on what is really wrong with the node, as someone
at the console would find out:

- a fault that only new hardware fixes (``Fix.REPLACE``): the node goes for
  RMA, i.e. its NodeClaim is deleted and Karpenter replaces it;
- any other fault (a reset or a reboot by hand, a job restarted): it is
  cleared, and the node is handed back: the remediation's quarantine taint
  and cordon are undone and the label removed;
- nothing wrong any more (the fault cleared on its own): the node is handed back.

The person never signals a workflow: the remediation sees what they did the way
it sees anything, through the node (its conditions clear, or the node is gone).

Draws are seeded per ticket (seed, node, the node's ticket number), so a ticket
gets the same times whatever else happens in the fleet.

Defaults are assumptions, not measurements (no public source gives on-call
response and hands-on repair times for GPU nodes): a paged on-call engineer
around the clock, response median 30 min (lognormal, sigma 1.0: p90 about
1 h 50 min), repair median 1 h (sigma 0.7: p90 about 2 h 30 min), two people.
Change them per run with :class:`OperatorConfig`.
"""

from __future__ import annotations

import heapq
import logging
import random
from typing import Any, Protocol

from gpu_remediation.contracts import QUARANTINE_TAINT_KEY
from simulator.fleet.faults import FAULTS, Fix
from simulator.fleet.model import ActiveFault
from simulator.fleet.operator_config import OperatorConfig
from simulator.fleet.ports import FleetCore
from simulator.kube_api import NODECLAIMS, NODES, ApiError
from simulator.kube_api.watch import Change

log = logging.getLogger(__name__)

NEEDS_HUMAN_LABEL = "gpu-remediation.io/needs-human"
"""The label the escalate activity sets (activities.kubernetes.NEEDS_HUMAN_LABEL)."""


class OperatorFleet(FleetCore, Protocol):
    """What the operator needs of the fleet: look at a node's faults, clear them."""

    def has_node(self, name: str) -> bool:
        """Whether the node exists."""

    def active_faults(self, name: str, *ids: int) -> list[ActiveFault]:
        """The node's faults."""

    def clear_faults(self, name: str, faults: list[ActiveFault], *, reason: str) -> None:
        """Remove these faults."""


class HumanOperator:
    """Answers ``needs-human`` tickets on the fleet (see the module docstring).

    Args:
        fleet: The fleet whose nodes it watches and repairs.
        config: Response and repair time distributions, staff.
        seed: The fleet's seed (each ticket's draws derive from it).
    """

    def __init__(self, fleet: OperatorFleet, config: OperatorConfig, seed: int) -> None:
        self._fleet = fleet
        self._config = config
        self._seed = seed
        self._open: set[str] = set()
        self._tickets: dict[str, int] = {}
        self._free_at: list[float] = [0.0] * config.staff
        heapq.heapify(self._free_at)

    def on_node_change(self, change: Change) -> None:
        """A Node changed (under the store lock): take a new ticket, never write here."""
        if change.type == "DELETED":
            return
        name = change.obj["metadata"]["name"]
        labels = change.obj["metadata"].get("labels") or {}
        if labels.get(NEEDS_HUMAN_LABEL) != "true" or name in self._open:
            return
        self._open.add(name)
        self._fleet.scheduler.call_soon(lambda: self._take(name))

    def draws(self, name: str, number: int) -> tuple[float, float]:
        """The response and repair time (seconds) of the node's ``number``-th ticket."""
        rng = random.Random(f"{self._seed}/{name}/{number}")
        return self._config.response.draw(rng), self._config.repair.draw(rng)

    def _take(self, name: str) -> None:
        fleet = self._fleet
        number = self._tickets.get(name, 0)
        self._tickets[name] = number + 1
        response, repair = self.draws(name, number)
        fleet.count("operator.tickets")
        # Nobody is busy with the ticket while it waits for its response (the page
        # is not yet answered): a person is taken only once someone looks.
        fleet.scheduler.call_at(fleet.clock.now() + response, lambda: self._look(name, repair))

    def _look(self, name: str, repair: float) -> None:
        fleet = self._fleet
        now = fleet.clock.now()
        person_free = heapq.heappop(self._free_at)
        start = max(now, person_free)
        done = start + repair
        heapq.heappush(self._free_at, done)
        log.info("ticket for %s: worked on in %.0fs, done in %.0fs more", name, start - now, repair)
        fleet.scheduler.call_at(done, lambda: self._act(name))

    def _act(self, name: str) -> None:
        fleet = self._fleet
        if not fleet.has_node(name):
            fleet.count("operator.node_gone")
            self._open.discard(name)
            return
        faults = fleet.active_faults(name)
        if any(FAULTS[f.kind].fix is Fix.REPLACE for f in faults):
            # The node stays in _open: it keeps its label until Karpenter deletes it.
            fleet.count("operator.rma")
            log.info("%s sent for RMA by the operator", name)
            self._delete_claim(name)
            return
        if faults:
            fleet.count("operator.repaired")
            fleet.clear_faults(name, faults, reason="repaired by the operator")
        else:
            fleet.count("operator.nothing_found")
        try:
            self._hand_back(name)
        finally:
            self._open.discard(name)

    def _delete_claim(self, name: str) -> None:
        try:
            self._fleet.store.delete_object(NODECLAIMS, name)
        except ApiError as err:
            if err.code != 404:
                raise

    def _hand_back(self, name: str) -> None:
        """Undo the remediation's quarantine and close the ticket (the label goes)."""

        def change(node: dict[str, Any]) -> None:
            spec = node.setdefault("spec", {})
            taints = [t for t in spec.get("taints") or [] if t.get("key") != QUARANTINE_TAINT_KEY]
            spec["taints"] = taints
            spec.pop("unschedulable", None)
            node["metadata"].setdefault("labels", {}).pop(NEEDS_HUMAN_LABEL, None)

        try:
            self._fleet.store.mutate(NODES, name, None, change)
        except ApiError as err:
            if err.code != 404:
                raise
