"""The true hardware state of the simulated fleet: compact, one small object per node.

A node's GPUs are indices ``0..gpus-1``; a GPU is healthy unless an active fault
names it. Faults are kept per node (usually none), so 2,000 nodes of 8 GPUs cost
a few hundred bytes each. Only the fleet mutates these objects, under its lock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from simulator.fleet.faults import FAULTS, FaultInfo, FaultKind, Fix

# PCI bus ids of the eight GPUs of a p5.48xlarge, in nvidia-smi's order.
_P5_BUSES = ("53", "64", "75", "86", "97", "A8", "B9", "CA")


def pci_bus(gpu: int) -> str:
    """The PCI bus id of GPU ``gpu``, e.g. ``00000000:53:00.0``."""
    bus = _P5_BUSES[gpu] if gpu < len(_P5_BUSES) else f"{0x10 + gpu:02X}"
    return f"00000000:{bus}:00.0"


class Phase(StrEnum):
    """Where a node is in its life."""

    RUNNING = "running"
    REBOOTING = "rebooting"
    TERMINATING = "terminating"
    GONE = "gone"


@dataclass(slots=True)
class ActiveFault:
    """One fault present on a node (on one GPU, or on the node itself)."""

    id: int
    kind: FaultKind
    gpu: int | None
    xid: int | None
    since: float
    """Simulated time it appeared."""

    @property
    def info(self) -> FaultInfo:
        """The kind's table row."""
        return FAULTS[self.kind]

    def describe(self) -> str:
        """``fallen_off_bus on GPU 3 (Xid 79)``."""
        where = f" on GPU {self.gpu}" if self.gpu is not None else ""
        xid = f" (Xid {self.xid})" if self.xid is not None else ""
        return f"{self.kind.value}{where}{xid}"


@dataclass(slots=True)
class NodeState:
    """One GPU node: identity, life phase, faults, and what Kubernetes shows of it."""

    name: str
    pool: str
    instance_id: str
    zone: str
    boot_id: str
    reset_supported: bool
    gpus: int
    agent_phase: float
    """Offset of this node's agent ticks within the tick interval (simulated seconds)."""
    created_at: float
    phase: Phase = Phase.RUNNING
    faults: list[ActiveFault] = field(default_factory=list)
    reboot_token: int = 0
    # What Kubernetes shows, as last seen by the fleet's hook.
    k8s_ready: bool = True
    k8s_schedulable: bool = True
    # Last condition values the agent wrote, to skip writing what did not change.
    written_gpu: tuple[str, str, str] | None = None
    written_efa: tuple[str, str, str] | None = None
    written_degraded: tuple[str, str, str] | None = None
    written_efa_degraded: tuple[str, str, str] | None = None
    written_ready: tuple[str, str, str] | None = None
    written_allocatable: int = 8
    """``nvidia.com/gpu`` allocatable as last written (the device plugin's healthy GPUs)."""
    job: str | None = None
    """The training job whose pod runs here."""
    counted: tuple[bool, bool, bool, bool] = (False, False, False, False)
    """(available, healthy, schedulable, working) as last added to the accounting."""

    @property
    def provider_id(self) -> str:
        """``spec.providerID`` of the node."""
        return f"aws:///{self.zone}/{self.instance_id}"

    @property
    def kubelet_up(self) -> bool:
        """Whether the host is up and its kubelet posting status."""
        return self.phase is Phase.RUNNING and not any(f.info.kubelet_down for f in self.faults)

    @property
    def truly_healthy(self) -> bool:
        """Up, with no fault that impairs work (false positives impair nothing)."""
        return self.kubelet_up and not any(f.info.interrupts_jobs for f in self.faults)

    @property
    def schedulable(self) -> bool:
        """Ready, not cordoned and not tainted, as Kubernetes shows it."""
        return self.phase is not Phase.GONE and self.k8s_ready and self.k8s_schedulable

    @property
    def available(self) -> bool:
        """Healthy and open to new work: what availability accounting counts."""
        return self.truly_healthy and self.schedulable

    @property
    def working(self) -> bool:
        """Available, or up and running a training job's pod (issue 36's "doing work")."""
        running = self.phase is Phase.RUNNING and self.kubelet_up and self.job is not None
        return self.available or running

    def real_faults(self) -> list[ActiveFault]:
        """Faults of the hardware itself (not spurious reports, not the application's)."""
        return [f for f in self.faults if f.info.fix is not Fix.NONE]

    def healthy_gpus(self) -> int:
        """GPUs the NVIDIA device plugin still offers.

        Its health check drops GPUs with a hardware Xid (not the application's,
        not a spurious report of the agent, not a GPU that only runs slower).
        """
        broken = {
            f.gpu
            for f in self.faults
            if f.gpu is not None and f.info.fix is not Fix.NONE and not f.info.degrades
        }
        return self.gpus - len(broken)

    def slowdown(self) -> float:
        """How many times slower a job with a rank here runs (1.0: full speed)."""
        return max((f.info.slowdown for f in self.faults), default=1.0)

    def gpu_faults(self, gpu: int) -> list[ActiveFault]:
        """Faults on GPU ``gpu``."""
        return [f for f in self.faults if f.gpu == gpu]

    def hardware_faults_on(self, gpu: int) -> list[ActiveFault]:
        """Faults on GPU ``gpu`` that DCGM sees."""
        return [f for f in self.faults if f.gpu == gpu and f.info.dcgm_error is not None]
