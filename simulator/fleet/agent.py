"""The node agent, Node Problem Detector and kubelet of each simulated node.

Each node's agent turns its true hardware state into the conditions the
node-condition watcher watches, as the project's NPD health plugin does:

- ``GpuHealthProblem`` True (reason ``GpuHealthCheckFailed``) while a GPU shows
  an Xid, or a DCGM health failure with no Xid (a slow NVLink), ``EfaHealthProblem``
  True (``EfaHealthCheckFailed``) while an EFA check fails, each with the message
  the real agent writes (``gpu_remediation.npd_message.format_message``:
  ``Xid 79 on GPU 3 (0000:86:00): ...``, ``EFA link (rdmap113s0): ...``, most
  severe first, within NPD's 1024 bytes);
- ``GpuDegraded`` True (``GpuDegradationDetected``) while a GPU works but slows
  its job (issue 37), with the message the agent's ``gpu-degraded`` check writes
  (``agent.findings.degraded_text``: ``Degraded on GPU 2 (0000:53:00.0)
  [pcie_width]: x8, expected x16 (2+ cycles)``), and ``EfaDegraded``
  (``EfaDegradationDetected``) likewise for a slow EFA port (``efa-degraded``);
  a slowdown none of the agent's signals shows (``gpu_slow``) writes neither;
- each False with NPD's default reasons when healthy (as ``deploy/npd`` configures them).

NPD runs its plugin every ``npd_interval``: a fault shows at the node's next
tick (each node has its own phase), not at once. Rather than ticking every
node all the time, a change of the hardware schedules that node's next tick;
an unchanged node would write nothing anyway. The agent runs only while the
host is up: during a reboot or a hang the conditions keep their last values,
and after a reboot the restarted NPD reports afresh.

The NVIDIA device plugin part: a GPU with a hardware fault is dropped from the
node's allocatable ``nvidia.com/gpu`` (its health check), at the same tick, so
the scheduler no longer fits an all-GPU pod there.

The kubelet part: ``Ready`` False ("node is shutting down") from the moment a
reboot starts, Unknown once a hung kubelet has been silent for the node
controller's grace period, True when the kubelet is back.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

from agent.findings import Problem, degraded_text
from gpu_remediation import catalog
from gpu_remediation.models import DcgmEvidence, EfaEvidence, Evidence, XidEvidence
from gpu_remediation.npd_message import NPD_EFA_REASON, NPD_GPU_REASON, format_message
from simulator.fleet.model import NodeState, Phase, pci_bus
from simulator.fleet.ports import AgentFleet
from simulator.kube_api import NODES, ApiError

Condition = tuple[str, str, str]  # (status, reason, message)

# NPD's default (healthy) conditions and rule reasons, as deploy/npd configures them.
GPU_HEALTHY: Condition = (
    "False",
    "GpuIsHealthy",
    "DCGM health, nvidia-smi and the kernel log show no GPU fault",
)
EFA_HEALTHY: Condition = (
    "False",
    "EfaIsHealthy",
    "EFA devices, provider and links are as expected",
)
DEGRADED_HEALTHY: Condition = (
    "False",
    "GpuNotDegraded",
    "PCIe links at their maximum and no sustained hardware or thermal clock slowdown",
)
EFA_DEGRADED_HEALTHY: Condition = (
    "False",
    "EfaNotDegraded",
    "EFA ports at their expected rate and no error counter rising",
)
EFA_DEGRADED_REASON = "EfaDegradationDetected"
EFA_COUNTER_SPAN_S = 300
"""The agent's default span a counter's rate must hold (``efa_degraded_counter_min_span``)."""
DEGRADED_REASON = "GpuDegradationDetected"
MAX_OUTPUT_LENGTH = 1024
"""NPD's ``max_output_length``: the agent fits its message into it."""
READY: Condition = ("True", "KubeletReady", "kubelet is posting ready status")
SHUTTING_DOWN: Condition = ("False", "KubeletNotReady", "node is shutting down")
STATUS_UNKNOWN: Condition = ("Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.")
EFA_DEVICE = "rdmap113s0"
GPU_RESOURCE = "nvidia.com/gpu"


def kernel_bus(gpu: int) -> str:
    """The GPU's PCI bus as the kernel log's Xid lines write it (``0000:53:00``)."""
    return "0000:" + pci_bus(gpu).split(":", 1)[1].rsplit(".", 1)[0]


def _findings(node: NodeState, kind: str) -> list[Evidence]:
    now = datetime.now(UTC)
    found: list[Evidence] = []
    for fault in node.faults:
        if kind == "gpu" and fault.xid is not None:
            found.append(
                XidEvidence(
                    observed_at=now,
                    source="kernel-log",
                    xid=fault.xid,
                    gpu_index=fault.gpu,
                    pci_bus=kernel_bus(fault.gpu) if fault.gpu is not None else None,
                )
            )
        elif kind == "gpu" and fault.info.dcgm_error is not None and fault.info.health_system:
            # No Xid in the kernel log: the agent's DCGM health read shows it (the
            # `gpu` check runs `dcgmi health -c`), as a slow NVLink's replays do.
            found.append(
                DcgmEvidence(
                    observed_at=now,
                    source="dcgm-health",
                    check="health",
                    error_id=fault.info.dcgm_error,
                    severity=fault.info.dcgm_severity,
                    gpu_index=fault.gpu,
                    test=fault.info.health_system,
                )
            )
        elif kind == "efa" and fault.info.efa_check is not None:
            found.append(
                EfaEvidence(
                    observed_at=now,
                    source="efa-check",
                    check=fault.info.efa_check,
                    device=EFA_DEVICE if fault.info.efa_check == "link" else None,
                    message=fault.info.action,
                )
            )
    return found


def gpu_condition(node: NodeState) -> Condition:
    """What the GPU health plugin reports for ``node``'s true state."""
    found = _findings(node, "gpu")
    if not found:
        return GPU_HEALTHY
    return ("True", NPD_GPU_REASON, format_message(found, max_bytes=MAX_OUTPUT_LENGTH))


def _degraded_lines(node: NodeState, *, gpus: bool) -> list[str]:
    """The degradation findings the agent writes for the node's GPU or EFA slow faults."""
    lines = []
    for fault in node.faults:
        signal = fault.info.agent_signal
        if signal is None or (fault.gpu is not None) != gpus:
            continue
        what, observed, expected, cycles = signal
        where: dict[str, Any] = (
            {"gpu_index": fault.gpu, "pci_bus": kernel_bus(fault.gpu), "source": "nvidia-smi"}
            if fault.gpu is not None
            else {"device": EFA_DEVICE, "source": "efa-sysfs"}
        )
        persisted = f"{cycles}+ cycles" if gpus else f"over {EFA_COUNTER_SPAN_S}+ s"
        lines.append(
            degraded_text(
                Problem(
                    kind="degraded",
                    what=what,
                    observed=observed,
                    expected=expected,
                    text=persisted,
                    **where,
                )
            )
        )
    return lines


def degraded_condition(node: NodeState) -> Condition:
    """What the GPU degradation plugin reports for ``node``'s true state."""
    lines = _degraded_lines(node, gpus=True)
    if not lines:
        return DEGRADED_HEALTHY
    return ("True", DEGRADED_REASON, "; ".join(lines)[:MAX_OUTPUT_LENGTH])


def efa_degraded_condition(node: NodeState) -> Condition:
    """What the EFA degradation plugin reports for ``node``'s true state."""
    lines = _degraded_lines(node, gpus=False)
    if not lines:
        return EFA_DEGRADED_HEALTHY
    return ("True", EFA_DEGRADED_REASON, "; ".join(lines)[:MAX_OUTPUT_LENGTH])


def efa_condition(node: NodeState) -> Condition:
    """What the EFA health plugin reports for ``node``'s true state."""
    found = _findings(node, "efa")
    if not found:
        return EFA_HEALTHY
    return ("True", NPD_EFA_REASON, format_message(found, max_bytes=MAX_OUTPUT_LENGTH))


class NodeAgent:
    """Writes each node's conditions from its true state (see the module docstring)."""

    def __init__(self, fleet: AgentFleet) -> None:
        self._fleet = fleet
        self._pending: set[str] = set()

    def next_tick(self, node: NodeState, now: float) -> float:
        """The node's first agent tick at or after simulated time ``now``."""
        interval = self._fleet.config.durations.npd_interval.total_seconds()
        ticks = math.ceil((now - node.agent_phase) / interval)
        return node.agent_phase + max(ticks, 0) * interval

    def schedule(self, name: str) -> None:
        """Have the node's agent look at its hardware at its next tick."""
        fleet = self._fleet
        with fleet.lock:
            node = fleet.nodes.get(name)
            if node is None or name in self._pending:
                return
            self._pending.add(name)
            at = self.next_tick(node, fleet.clock.now())
        fleet.scheduler.call_at(at, lambda: self.tick(name))

    def tick(self, name: str) -> None:
        """One plugin run: write the conditions that differ from the last ones written."""
        fleet = self._fleet
        with fleet.lock:
            self._pending.discard(name)
            node = fleet.nodes.get(name)
            if node is None or not node.kubelet_up:
                return
            gpu, efa = gpu_condition(node), efa_condition(node)
            degraded = degraded_condition(node)
            efa_degraded = efa_degraded_condition(node)
            allocatable = node.healthy_gpus()
            if allocatable == node.written_allocatable:
                allocatable = -1
            else:
                node.written_allocatable = allocatable
            writes = []
            if gpu != node.written_gpu:
                writes.append((catalog.NPD_GPU_CONDITION, gpu))
                node.written_gpu = gpu
            if efa != node.written_efa:
                writes.append((catalog.NPD_EFA_CONDITION, efa))
                node.written_efa = efa
            if degraded != node.written_degraded:
                writes.append((catalog.NPD_GPU_DEGRADED_CONDITION, degraded))
                node.written_degraded = degraded
            if efa_degraded != node.written_efa_degraded:
                writes.append((catalog.NPD_EFA_DEGRADED_CONDITION, efa_degraded))
                node.written_efa_degraded = efa_degraded
        for type_, (status, reason, message) in writes:
            self._write(name, type_, status, reason, message)
        if allocatable >= 0:
            self._allocatable(name, allocatable)

    def _allocatable(self, name: str, gpus: int) -> None:
        def change(node: dict[str, Any]) -> None:
            node["status"].setdefault("allocatable", {})[GPU_RESOURCE] = str(gpus)

        try:
            self._fleet.store.mutate(NODES, name, None, change)
        except ApiError as err:
            if err.code != 404:
                raise

    def sync_ready(self, name: str) -> None:
        """Write the kubelet's Ready condition for the node's current life phase."""
        fleet = self._fleet
        with fleet.lock:
            node = fleet.nodes.get(name)
            if node is None or node.phase is Phase.GONE:
                return
            if node.phase is Phase.REBOOTING and not any(f.info.kubelet_down for f in node.faults):
                wanted = SHUTTING_DOWN
            elif node.kubelet_up:
                wanted = READY
            else:
                wanted = STATUS_UNKNOWN
            if node.written_ready == wanted:
                return
            node.written_ready = wanted
        self._write(name, catalog.READY_CONDITION, *wanted)

    def _write(self, name: str, type_: str, status: str, reason: str, message: str) -> None:
        try:
            self._fleet.store.set_node_condition(
                name, type_, status, reason=reason, message=message
            )
        except ApiError as err:
            if err.code != 404:  # the node was deleted meanwhile: nothing to report on
                raise
