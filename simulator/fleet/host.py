"""The simulated hosts: what the fixed host commands do on a node's true hardware.

Both executors reach this: SSM Run Command through the moto adapter
(``MotoCloud.host_simulator``) and the Job executor through the simulated
kubelet (``JobKubelet``'s runner). The command is recognised from the SSM
document's typed parameters or a Job script's tag line
(``gpu_remediation.host_command``), never guessed.

- ``nvidia-smi -r``: clears what a reset clears on each GPU it resets; exits 3
  ("not supported") on a pool whose profile blocks the reset, 15 for a GPU that
  fell off the bus, 255 while GPU pods still run on the node.
- ``dcgmi diag``: fails each GPU by its true faults (DCGM error ids and
  messages), passes healthy ones; a passed GPU's spurious report clears.
- ``dcgmi health``: Failure per faulty GPU and system.
- the EFA loopback: ``fi_pingpong``'s report per EFA device, the slow or
  down port failing (``simulator.fleet.efa_loopback``).

A command takes its simulated duration (InProgress meanwhile); its effect on
the hardware happens when the host runs it. A host that is down (rebooting,
hung, terminated) cannot be reached: the command times out.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from gpu_remediation.host_command import HostCommand, encode_output
from simulator.aws import SimulatedInvocation
from simulator.fleet import dcgm
from simulator.fleet.efa_loopback import loopback_report
from simulator.fleet.faults import FaultKind, Fix
from simulator.fleet.model import Phase
from simulator.fleet.ports import HostFleet
from simulator.kube_api import PODS

log = logging.getLogger(__name__)

GPU_RESOURCE = "nvidia.com/gpu"


@dataclass(frozen=True, slots=True)
class HostRun:
    """What a command did: its result and how long it took (simulated seconds)."""

    exit_code: int
    stdout: str
    stderr: str
    duration: float


class HostSimulator:
    """Runs the fixed host commands against the fleet's true state."""

    def __init__(self, fleet: HostFleet) -> None:
        self._fleet = fleet

    # ------------------------------------------------------------- executors

    def ssm(
        self, instance_id: str, command: HostCommand | None, script: list[str]
    ) -> SimulatedInvocation:
        """The moto adapter's host: the invocation an SSM command ends with."""
        del script
        fleet = self._fleet
        name = fleet.node_name_for_instance(instance_id)
        run = self.run(name, command) if name is not None else None
        if run is None:
            return SimulatedInvocation(
                status="TimedOut",
                exit_code=-1,
                stderr=f"instance {instance_id} is not reachable (SSM agent offline)",
                in_progress_seconds=fleet.config.durations.unreachable_command.total_seconds(),
            )
        return SimulatedInvocation(
            status="Success" if run.exit_code == 0 else "Failed",
            exit_code=run.exit_code,
            stdout=run.stdout,
            stderr=run.stderr,
            in_progress_seconds=run.duration,
        )

    def job(self, job: dict[str, Any], command: HostCommand | None) -> tuple[int, str, str] | None:
        """The simulated kubelet's runner: run the Job's command for its duration."""
        fleet = self._fleet
        spec = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
        name = spec.get("nodeName")
        run = self.run(name, command) if isinstance(name, str) else None
        if run is None:
            # No pod can start on a host that is down: the Job runs into its deadline.
            fleet.clock.wait_until(
                fleet.clock.now() + fleet.config.durations.unreachable_command.total_seconds(),
                fleet.stopping,
            )
            return None
        fleet.clock.wait_until(fleet.clock.now() + run.duration, fleet.stopping)
        return run.exit_code, run.stdout, run.stderr

    # --------------------------------------------------------------- commands

    def run(self, name: str, command: HostCommand | None) -> HostRun | None:
        """Run ``command`` on node ``name``; None when the host cannot be reached."""
        fleet = self._fleet
        if command is None:
            return HostRun(127, "", "sh: not a gpu-remediation host command", 1.0)
        busy = command.kind == "gpu_reset" and self._gpu_pods_running(name)
        durations = fleet.config.durations
        with fleet.lock:
            node = fleet.nodes.get(name)
            if node is None or node.phase not in (Phase.RUNNING, Phase.TERMINATING):
                fleet.count("commands.unreachable")
                return None
            if any(f.info.kubelet_down for f in node.faults):
                fleet.count("commands.unreachable")
                return None
            if command.kind == "gpu_reset":
                exit_code, out, err, done = dcgm.reset_output(node, command.gpu_indices, busy=busy)
                cleared = [f for f in node.faults if f.gpu in done and f.info.cleared_by(Fix.RESET)]
                fleet.count(f"resets.exit_{exit_code}")
                run = HostRun(
                    exit_code,
                    out,
                    err,
                    durations.gpu_reset.total_seconds() * max(1, len(done)),
                )
            elif command.kind == "dcgm_diag":
                assert command.level is not None
                exit_code, document = dcgm.diag_output(node, command.level, command.gpu_indices)
                tested = set(command.gpu_indices) if command.gpu_indices else set(range(node.gpus))
                # The spurious reports of GPUs that just tested clean go away.
                cleared = [
                    f for f in node.faults if f.kind is FaultKind.FALSE_POSITIVE and f.gpu in tested
                ]
                fleet.count("diag.fail" if exit_code else "diag.pass")
                run = HostRun(exit_code, encode_output(document), "", durations.diag(command.level))
            elif command.kind == "efa_loopback":
                cleared = []
                fleet.count("efa_loopback.runs")
                run = HostRun(
                    0,
                    encode_output(loopback_report(node)),
                    "",
                    durations.efa_loopback.total_seconds(),
                )
            else:
                cleared = []
                run = HostRun(
                    0,
                    encode_output(dcgm.health_output(node)),
                    "",
                    durations.health_check.total_seconds(),
                )
        if cleared:
            fleet.clear_faults(name, cleared, reason=f"{command.kind} on the host")
        return run

    def _gpu_pods_running(self, name: str) -> bool:
        store = self._fleet.store
        with store.lock:
            for pod in store.peek(PODS):
                spec = pod.get("spec") or {}
                if spec.get("nodeName") != name:
                    continue
                if (pod.get("status") or {}).get("phase") not in ("Running", "Pending"):
                    continue
                for container in spec.get("containers") or []:
                    resources = container.get("resources") or {}
                    wanted = {
                        **(resources.get("requests") or {}),
                        **(resources.get("limits") or {}),
                    }
                    if str(wanted.get(GPU_RESOURCE, "0")) not in ("0", ""):
                        return True
        return False
