"""What fleet to simulate: node pools, time factor, seed, faults, workloads."""

from __future__ import annotations

import math
import re
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpu_remediation.policy import Duration
from simulator.fleet.capacity import CapacityModel
from simulator.fleet.clock import Durations
from simulator.fleet.faults import FaultKind, FaultMix, Scenario
from simulator.fleet.operator_config import OperatorConfig

_POOL_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,40}[a-z0-9])?$")


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PoolSpec(_Strict):
    """One Karpenter node pool of identical GPU nodes.

    ``reset_supported`` False is the EC2 profile: the hypervisor blocks the
    function-level reset, so ``nvidia-smi -r`` reports "not supported".
    """

    name: str = Field(min_length=1, max_length=42)
    nodes: int = Field(ge=0, le=10_000)
    instance_type: str = "p5.48xlarge"
    gpus_per_node: int = Field(default=8, ge=1, le=64)
    reset_supported: bool = True

    @model_validator(mode="after")
    def _name_is_a_label_value(self) -> PoolSpec:
        if not _POOL_NAME.fullmatch(self.name):
            raise ValueError(
                f"pool name {self.name!r} must be lower-case letters, digits and '-' "
                "(it prefixes node names)"
            )
        return self


SURVIVABLE_FAULTS = frozenset(
    {
        FaultKind.XID_RESET,
        FaultKind.NVLINK,
        FaultKind.ROW_REMAP_PENDING,
        FaultKind.ROW_REMAP_FAILURE,
    }
)
"""Faults a running job lives through until its node is drained: the GPU still answers
(NVIDIA: row remap pending keeps working; an ECC error, a degraded link or a remap
failure leave it running but due for repair), so a checkpoint before the drain helps."""


HANGING_FAULTS = frozenset(
    {
        FaultKind.GSP_HANG,
        FaultKind.HOST_HANG,
        FaultKind.HOST_FAILURE,
        FaultKind.EFA_LINK,
    }
)
"""Faults that stop a rank without an error, so every rank of the gang waits at its next
collective until the collective's timeout: an assumption, by what each fault does to the
rank (a GPU that no longer answers its driver, a host that stops or dies, a network link
that goes silent). A network outage outside the nodes is not here: the simulator's jobs
run through it (``interrupts_jobs`` is False for it). A crash instead (an ECC error or a
GPU lost, which CUDA returns as an error to the process) ends the job at once. In the
Llama 3 mix these kinds are 98 of the 419 interruptions (23%); ByteDance counted job hangs
as 9.9% of 55,390 incidents of all kinds, about 12% of its failures (ByteRobust, arXiv
2509.16293, Table 1), so this set is on the generous side for hangs."""


class GangShare(_Strict):
    """Of each pool's nodes that jobs fill, the share in gangs of ``nodes`` nodes."""

    nodes: int = Field(ge=1, le=1000)
    share: float = Field(gt=0, le=1)


FLEET_GANGS = (
    GangShare(nodes=128, share=0.33),
    GangShare(nodes=32, share=0.33),
    GangShare(nodes=8, share=0.24),
    GangShare(nodes=1, share=0.10),
)
"""Gang sizes of a large research fleet, by their share of its GPU time: Meta's 16k-GPU
RSC-1, where jobs of 256 GPUs and more used 66% of the GPU time and jobs within one
8-GPU server under 10% (Kokolis et al., arXiv 2410.21680, read through reviews of it).
How the 66% and the 24% between split over sizes (128 and 32 nodes; 8 nodes) is an
assumption. The comparison's default (``remediate compare`` without ``--job-nodes``)."""

FLEET_BACKOFF_LIMIT = 0
"""The comparison's retry budget: none, as a JobSet (failurePolicy.maxRestarts) and
torchrun (--max-restarts) have by default, so any failure a job counts fails its run
(an eviction a podFailurePolicy ignores does not). Users raise it (3, 10 or 100 in
public examples); ``--model`` says so."""


class WorkloadConfig(_Strict):
    """Gang-scheduled training jobs: one pod of all GPUs per node, ``job_nodes`` per job.

    A run of a job does ``job_duration`` of work (simulated time on nodes, not counting
    checkpoints or restarts); it saves a checkpoint every ``checkpoint_interval`` of work,
    which takes ``checkpoint_cost``; it survives ``backoff_limit`` failures and resumes
    from its last checkpoint after each, ``restart_cost`` after its placement (see
    ``workloads.py``). With ``gangs``, jobs come in several sizes instead.
    """

    namespace: str = Field(
        default="training", description="Where the jobs' pods run (a name, not a figure)."
    )
    job_nodes: int = Field(
        default=4,
        ge=1,
        le=1000,
        description="Nodes of every job when gangs is None: an assumption (the demo's).",
    )
    gangs: tuple[GangShare, ...] | None = Field(
        default=None,
        max_length=16,
        description="Gang sizes, each with its share of the nodes jobs fill (largest "
        "placed first); None: every job has job_nodes nodes. The comparison's default is "
        "FLEET_GANGS: 128, 32, 8 and 1 nodes at 33/33/24/10%, after Meta RSC-1's GPU time "
        "by job size (Kokolis et al., arXiv 2410.21680); the split is an assumption.",
    )
    utilization: float = Field(
        default=0.9,
        ge=0,
        le=1,
        description="Share of each pool's nodes the jobs try to fill: an assumption, near "
        "the 83% and 85% Meta's research clusters averaged (arXiv 2410.21680).",
    )
    job_duration: Duration = Field(
        default=timedelta(hours=6),
        gt=timedelta(0),
        description="Work in one run of a job: an assumption (Meta's research clusters let "
        "a job run 2 hours before preemption and 7 days at most; arXiv 2410.21680).",
    )
    restart_delay: Duration = Field(
        default=timedelta(minutes=5),
        ge=timedelta(0),
        description="An interrupted job is placed again after this: an assumption (with "
        "restart_cost, the 10 minutes of ByteRobust's measured requeue).",
    )
    checkpoint_interval: Duration = Field(
        default=timedelta(minutes=30),
        gt=timedelta(0),
        description="Work between checkpoints: an assumption (Meta's model of its clusters "
        "uses 60 minutes; arXiv 2410.21680).",
    )
    checkpoint_cost: Duration = Field(
        default=timedelta(minutes=2),
        ge=timedelta(0),
        description="How long saving a checkpoint stops training: an assumption, on the slow "
        "side of the 6.8-13 s of a Megatron save that ByteRobust measured (arXiv 2509.16293).",
    )
    backoff_limit: int = Field(
        default=3,
        ge=0,
        description="Failures of a run (not disruptions) it survives, as a Job's backoffLimit: "
        "an assumption (users set 3, 10 or 100 in public examples). The comparison's default "
        "is 0, JobSet's failurePolicy.maxRestarts and torchrun's --max-restarts default.",
    )
    handshake_share: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="Share of each pool's jobs that speak the checkpoint handshake "
        "(the first job of a pool does whenever the share is above 0): an assumption.",
    )
    survivable_faults: frozenset[FaultKind] = Field(
        default=SURVIVABLE_FAULTS,
        description="Faults a running job keeps running through until its node is drained "
        "(of the others, those in hanging_faults hang it, the rest fail it at once): "
        "NVIDIA's descriptions of each (a pending row remap, a corrected ECC error or a "
        "degraded link leave the GPU working).",
    )
    step_times: Duration | None = Field(
        default=None,
        gt=timedelta(0),
        description="While a node of a job is slow, every pod of the job writes its own step "
        "time this often (docs/checkpoint-contract.md, 'Step times'), and once more when the "
        "job is back at full pace; None: jobs write none.",
    )
    hanging_faults: frozenset[FaultKind] = Field(
        default=HANGING_FAULTS,
        description="Faults that hang a job until collective_timeout instead of failing it "
        "at once (an eviction before then ends it without spending its budget): an "
        "assumption, by what each does to a rank; 23% of the Llama 3 interruptions against "
        "ByteRobust's 12% of failures (arXiv 2509.16293), so generous.",
    )
    collective_timeout: Duration = Field(
        default=timedelta(minutes=10),
        gt=timedelta(0),
        description="How long a hung collective waits before the job fails: PyTorch's "
        "default for NCCL process groups since 2.2 (init_process_group: '10 minutes for "
        "NCCL'; pytorch/pytorch#110947), after which its watchdog aborts the job. Users "
        "often raise it (ByteRobust, arXiv 2509.16293: '30 or 60 minutes').",
    )
    restart_cost: Duration = Field(
        default=timedelta(minutes=5),
        ge=timedelta(0),
        description="A restarted attempt holds its nodes this long before it trains "
        "(loading the checkpoint, the gang's rendezvous and warm-up): the 5 minutes Meta's "
        "model of its research clusters takes (of 5-20; Kokolis et al., arXiv 2410.21680). "
        "With restart_delay, a restart costs 10 minutes, as ByteDance measured a requeue "
        "(454-768 s at 2,048-16,384 GPUs; ByteRobust, arXiv 2509.16293, Table 7).",
    )

    @model_validator(mode="after")
    def _gangs_are_a_mix(self) -> WorkloadConfig:
        if self.gangs is None:
            return self
        sizes = [g.nodes for g in self.gangs]
        if not sizes:
            raise ValueError("gangs: give at least one size (or leave gangs out)")
        if len(set(sizes)) != len(sizes):
            raise ValueError(f"gangs: each size once, got {sizes}")
        total = sum(g.share for g in self.gangs)
        if total > 1 + 1e-9:
            raise ValueError(f"gangs: the shares add up to {total:g}, more than 1")
        if "job_nodes" in self.model_fields_set:
            raise ValueError("give job_nodes or gangs, not both")
        return self

    def gang_sizes(self) -> list[tuple[int, float]]:
        """(nodes, share) of each size, largest first; one size at ``job_nodes`` without gangs."""
        if self.gangs is None:
            return [(self.job_nodes, 1.0)]
        return sorted(((g.nodes, g.share) for g in self.gangs), reverse=True)

    def jobs_in(self, nodes: int) -> list[int]:
        """The gang size of each job a pool of ``nodes`` nodes runs, largest first.

        Each size, largest first, gets its share of the nodes the jobs fill, plus what the
        sizes before it left over (whole gangs rarely fill a share exactly), so the jobs
        fill the pool to ``utilization`` as far as the smallest size allows. In a pool too
        small for a size of the mix, its gangs shrink to its room (a 128-node share of a
        40-node pool becomes one gang of 11), so a small fleet keeps the mix's shares.
        """
        target = nodes * self.utilization
        sizes: list[int] = []
        left = 0.0
        for size, share in self.gang_sizes():
            room = target * share + left
            whole = math.floor(round(room, 9))
            fits = size if self.gangs is None else max(1, min(size, whole))
            count = math.floor(round(room / fits, 9))
            sizes += [fits] * count
            left = room - count * fits
        return sorted(sizes, reverse=True)

    def with_gangs(self, gangs: tuple[GangShare, ...] | None, **update: Any) -> WorkloadConfig:
        """This workload with jobs of the ``gangs`` mix (None: of ``job_nodes``) and ``update``."""
        values = {k: getattr(self, k) for k in self.model_fields_set}
        if gangs is not None:
            values.pop("job_nodes", None)  # one or the other
        return WorkloadConfig.model_validate({**values, "gangs": gangs, **update})


class AdmissionSimConfig(_Strict):
    """New and rebooted nodes: the startup taint, and how often they come up faulty.

    A NodePool with ``startup_taint`` carries gpu-remediation's startup taint, so
    Karpenter's new nodes register with it (nodes seeded at the start were there
    before and have none). A new node comes up faulty with
    ``new_node_fault_probability`` (or when it is one of the ``faulty_launches``,
    counted from 1 over the fleet's Karpenter launches: deterministic
    dead-on-arrival nodes for scenarios); a rebooted one with
    ``reboot_fault_probability``. The fault is drawn from ``faults``.
    """

    startup_taint: bool = True
    new_node_fault_probability: float = Field(default=0.0, ge=0.0, le=1.0)
    reboot_fault_probability: float = Field(default=0.0, ge=0.0, le=1.0)
    faulty_launches: list[int] = Field(default_factory=list, max_length=1000)
    faults: list[str] = Field(
        default_factory=lambda: ["row_remap_failure", "gpu_hardware", "efa_device_missing"],
        min_length=1,
        description="Fault kinds a faulty arrival gets (one, drawn at random).",
    )


class FleetConfig(_Strict):
    """Everything the simulated fleet is built from."""

    pools: list[PoolSpec] = Field(
        default_factory=lambda: [PoolSpec(name="gpu", nodes=8)], min_length=1
    )
    time_factor: float = Field(default=1.0, gt=0, le=1_000_000)
    seed: int = 0
    durations: Durations = Field(default_factory=Durations)
    capacity: CapacityModel = Field(
        default_factory=CapacityModel,
        description="Launch-time spread, capacity shortages, Capacity Block relaunches.",
    )
    scenario: Scenario | None = None
    fault_mix: FaultMix | None = None
    workloads: WorkloadConfig | None = None
    faults_until: Duration | None = Field(
        default=None, description="No fault of the mix after this simulated time (None: ever)."
    )
    operator: OperatorConfig | None = Field(
        default=None, description="People answering needs-human tickets; None: nobody does."
    )
    zone: str = "us-west-2a"
    history_size: int = Field(
        default=10_000, ge=100, description="Changes the Kubernetes emulator keeps for watches."
    )
    admission: AdmissionSimConfig | None = Field(
        default=None, description="Startup taint and faulty arrivals; None: neither."
    )
    job_executor: bool = Field(
        default=True,
        description="Also run host-command Jobs (GPU_REMEDIATION_HOST_EXECUTOR=job) on the nodes.",
    )

    @model_validator(mode="after")
    def _pools_are_distinct(self) -> FleetConfig:
        names = [p.name for p in self.pools]
        if len(set(names)) != len(names):
            raise ValueError(f"pool names must be distinct: {names}")
        return self

    @property
    def total_nodes(self) -> int:
        """Nodes the fleet keeps across all pools."""
        return sum(p.nodes for p in self.pools)


def parse_pools(text: str, nodes: int | None = None) -> list[PoolSpec]:
    """Parse ``h100:12,h200:4:no-reset`` (``NAME[:COUNT][:no-reset]``, comma-separated).

    Pools without a count share ``nodes`` evenly (the first ones get the remainder).

    Raises:
        ValueError: A malformed item, or counts missing without ``nodes``.
    """
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise ValueError("no pools given")
    parsed: list[tuple[str, int | None, bool]] = []
    for item in items:
        parts = item.split(":")
        name, count, reset = parts[0], None, True
        for part in parts[1:]:
            if part == "no-reset":
                reset = False
            elif part.isdigit():
                count = int(part)
            else:
                raise ValueError(f"pool {item!r}: expected NAME[:COUNT][:no-reset]")
        parsed.append((name, count, reset))
    missing = [p for p in parsed if p[1] is None]
    if missing and nodes is None:
        raise ValueError("give --nodes or a count for every pool")
    share = 0 if not missing else (nodes or 0) - sum(c for _, c, _ in parsed if c is not None)
    if share < 0:
        raise ValueError(f"pool counts exceed --nodes {nodes}")
    pools = []
    index = 0
    for name, count, reset in parsed:
        if count is None:
            count = share // len(missing) + (1 if index < share % len(missing) else 0)
            index += 1
        pools.append(PoolSpec(name=name, nodes=count, reset_supported=reset))
    return pools
