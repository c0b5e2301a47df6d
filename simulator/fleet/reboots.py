"""EC2 reboots of the simulated hosts: NotReady, then back with a new boot id.

moto tells the adapter which instances ``RebootInstances`` named
(``MotoCloud.on_reboot``, on moto's request thread); the reboot itself runs
on the fleet's scheduler:

- at once the kubelet shuts down: Ready False ("node is shutting down"), the
  job on the node fails;
- after ``durations.reboot`` the host is back: every fault a reboot clears is
  gone, ``status.nodeInfo.bootID`` is new, Ready is True and the restarted
  Node Problem Detector reports what is left. A host whose hardware failed
  (``host_failure``) never comes back: Ready stays Unknown, the boot id the same.

A reboot of a host that is already rebooting (or terminating) changes nothing
(counted as ``reboots.ignored``).
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING

from simulator.fleet.faults import Fix
from simulator.fleet.model import Phase
from simulator.fleet.ports import RebootFleet

if TYPE_CHECKING:
    from simulator.fleet.agent import NodeAgent
    from simulator.fleet.arrivals import Arrivals
    from simulator.fleet.workloads import Workloads

log = logging.getLogger(__name__)


class Reboots:
    """Reboots the fleet's hosts when EC2 is asked to.

    Args:
        fleet: The fleet whose hosts reboot.
        agent: Reports Ready and the restarted NPD's conditions.
        workloads: The training jobs a reboot interrupts (None without jobs).
    """

    def __init__(
        self,
        fleet: RebootFleet,
        agent: NodeAgent,
        workloads: Workloads | None,
        arrivals: Arrivals | None = None,
    ) -> None:
        self._fleet = fleet
        self._agent = agent
        self._workloads = workloads
        self._arrivals = arrivals

    def on_reboot(self, instance_id: str) -> None:
        """Moto's callback (its request thread): only hand over to the scheduler."""
        self._fleet.scheduler.call_soon(lambda: self._begin(instance_id))

    def _begin(self, instance_id: str) -> None:
        fleet = self._fleet
        name = fleet.node_name_for_instance(instance_id)
        with fleet.lock:
            node = fleet.nodes.get(name) if name is not None else None
            if name is None or node is None or node.phase is not Phase.RUNNING:
                fleet.count("reboots.ignored")
                return
            node.phase = Phase.REBOOTING
            node.reboot_token += 1
            token = node.reboot_token
            fleet.count("reboots")
        log.info("%s rebooting", name)
        self._agent.sync_ready(name)
        fleet.node_changed(name)
        if self._workloads is not None:
            self._workloads.node_broken(name)
        fleet.scheduler.call_later(
            fleet.config.durations.reboot.total_seconds(), lambda: self._finish(name, token)
        )

    def _finish(self, name: str, token: int) -> None:
        fleet = self._fleet
        with fleet.lock:
            node = fleet.nodes.get(name)
            if node is None or node.phase is not Phase.REBOOTING or node.reboot_token != token:
                return
            cleared = [f for f in node.faults if f.info.cleared_by(Fix.REBOOT)]
            node.faults = [f for f in node.faults if not f.info.cleared_by(Fix.REBOOT)]
            fleet.count("faults.cleared", len(cleared))
            node.phase = Phase.RUNNING
            booted = node.kubelet_up
            if booted:
                node.boot_id = str(uuid.UUID(int=fleet.rng.getrandbits(128), version=4))
                # The restarted Node Problem Detector reports afresh.
                node.written_gpu = node.written_efa = node.written_degraded = None
                node.written_efa_degraded = None
            boot_id = node.boot_id
        log.info("%s %s", name, "back from reboot" if booted else "did not come back")
        if booted:
            fleet.store.set_node_boot_id(name, boot_id)
            if self._arrivals is not None:
                self._arrivals.rebooted(name)
        self._agent.sync_ready(name)
        if booted:
            self._agent.tick(name)
        fleet.node_changed(name)
