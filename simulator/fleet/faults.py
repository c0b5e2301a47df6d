"""Fault kinds, what fixes each, and where faults come from (scenario file or fault mix).

Every kind says how the hardware shows it (the Xid in the kernel log and the
Node Problem Detector condition, the DCGM error id in diagnostics and health
watches, a kubelet that stops) and what clears it: a GPU reset, a reboot, only a
replacement, or nothing on the node (the fault clears by itself). The truth is
what the simulated host reports; the remediation has to find out.

Faults are injected from a scenario file (at simulated time T, fault F on a
node, a GPU, or a number of nodes of a pool) or drawn from a fault mix: a
Poisson process with a rate per node-hour for each kind. The default mix is
the Meta Llama 3 405B table (419 interruptions on 2,048 nodes of 8 H100 in 54
days; gpu-faults.md section 7), each cause mapped to the kinds below.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from pathlib import Path
from typing import Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gpu_remediation.models import GpuIndex
from gpu_remediation.policy import Duration


class Fix(StrEnum):
    """The least disruptive step that clears a fault."""

    RESET = "reset"
    """A GPU reset (so also a reboot or new hardware)."""
    REBOOT = "reboot"
    """A host reboot (a GPU reset reports success but changes nothing)."""
    REPLACE = "replace"
    """Only new hardware: the fault survives resets and reboots."""
    NONE = "none"
    """Nothing on the node: it clears by itself (or was never real)."""
    OUTSIDE = "outside"
    """The cause is outside the node (network, control plane): no step on the node
    clears it; it clears when the outside heals (the scenario's ``clears_after``)."""


SLOW_GANG = 1.34
"""How many times slower a gang runs with a rank on a slow node: an assumption, of the
size of the average delay that fail-slows caused large training jobs on a 10,000-GPU
production cluster (1.34x; Wu et al., "Falcon", arXiv 2410.12588, published as
"Greyhound", USENIX ATC '25). That figure is an average over jobs, not one straggler's
effect; the real slowdown varies with the cause."""


class FaultKind(StrEnum):
    """The faults the simulated hardware can have."""

    XID_RESET = "xid_reset"
    NVLINK = "nvlink"
    GSP_HANG = "gsp_hang"
    FALLEN_OFF_BUS = "fallen_off_bus"
    ROW_REMAP_PENDING = "row_remap_pending"
    ROW_REMAP_FAILURE = "row_remap_failure"
    GPU_HARDWARE = "gpu_hardware"
    APPLICATION = "application"
    FALSE_POSITIVE = "false_positive"
    EFA_LINK = "efa_link"
    EFA_DEVICE_MISSING = "efa_device_missing"
    HOST_HANG = "host_hang"
    HOST_FAILURE = "host_failure"
    NETWORK_OUTAGE = "network_outage"
    GPU_DEGRADED = "gpu_degraded"
    GPU_SLOW = "gpu_slow"
    GPU_THROTTLED = "gpu_throttled"
    EFA_DEGRADED = "efa_degraded"
    NVLINK_DEGRADED = "nvlink_degraded"


Scope = Literal["gpu", "node"]
DiagTest = Literal["software", "memory", "pcie", "targeted_stress"]


@dataclass(frozen=True, slots=True)
class FaultInfo:
    """How one fault kind shows and what clears it.

    Attributes:
        kind: The kind.
        scope: ``gpu`` (one GPU) or ``node``.
        fix: What clears it (see :class:`Fix`).
        xid: The Xid the driver logs (what the node agent reports), if any.
        action: What is wrong, in a few words (the EFA check's message).
        dcgm_error: DCGM error id diagnostics and health watches report; None means
            the GPU tests clean (the fault is elsewhere, or not real).
        dcgm_severity: DCGM severity of that error.
        diag_test: The ``dcgmi diag`` test (level 2 and up) that fails on it.
        health_system: The ``dcgmi health`` system that reports it.
        health_message: DCGM's message template (``{gpu}``, ``{bus}``).
        efa_check: The agent's EFA check that fails (``EfaEvidence.check``).
        kubelet_down: The kubelet stops (Ready turns Unknown); commands cannot reach the host.
        survives_reboot: The host does not come back from a reboot.
        interrupts_jobs: A training job on the node fails.
        clears_after: Name of the :class:`Durations` field after which it clears by itself.
        slowdown: Slow, not dead: the GPU works, and a gang with a rank on this node
            runs this many times slower (every rank waits for the slowest); 1.0 for
            a fault that does not slow a job it leaves running. The diagnostic's
            level-3 targeted stress test fails on such a GPU.
        agent_signal: What the node agent's degradation checks read of a slowdown:
            ``(what, observed, expected, cycles)`` of its finding (``gpu-degraded`` for
            a GPU fault, ``efa-degraded`` for a node's EFA), reported after that many
            consecutive cycles; None for a slowdown none of its signals shows, which
            only the job's step times reveal.
    """

    kind: FaultKind
    scope: Scope
    fix: Fix
    xid: int | None = None
    action: str = ""
    dcgm_error: int | None = None
    dcgm_severity: int = 2
    diag_test: DiagTest = "software"
    health_system: str = ""
    health_message: str = ""
    efa_check: Literal["device_count", "provider", "link", "counters"] | None = None
    kubelet_down: bool = False
    survives_reboot: bool = False
    interrupts_jobs: bool = True
    clears_after: str | None = None
    slowdown: float = 1.0
    agent_signal: tuple[str, str, str, int] | None = None

    @property
    def degrades(self) -> bool:
        """Whether the GPU works on, slower (the device plugin keeps offering it)."""
        return self.slowdown > 1.0

    def cleared_by(self, step: Fix) -> bool:
        """Whether a reset, reboot or replacement clears this fault."""
        order = {Fix.RESET: 1, Fix.REBOOT: 2, Fix.REPLACE: 3}
        if self.fix is Fix.NONE:
            return True  # nothing real to keep: any corrective step clears the report
        if self.fix is Fix.OUTSIDE:
            return False  # the cause is not on the node
        return order[step] >= order[self.fix]


K = FaultKind
FAULTS: dict[FaultKind, FaultInfo] = {
    info.kind: info
    for info in (
        # Double-bit ECC and friends (Xid 46/48/62/95/109/...): NVIDIA says RESET_GPU.
        FaultInfo(
            K.XID_RESET,
            "gpu",
            Fix.RESET,
            xid=48,
            action="double-bit ECC error, GPU reset required",
            dcgm_error=4,
            diag_test="memory",
            health_system="Memory",
            health_message="Detected 1 volatile double-bit ECC error(s) in GPU {gpu}.",
        ),
        # Xid 74: reset or reboot retrains the link.
        FaultInfo(
            K.NVLINK,
            "gpu",
            Fix.RESET,
            xid=74,
            action="NVLink error",
            dcgm_error=14,
            diag_test="pcie",
            health_system="NVLink",
            health_message="GPU {gpu}'s NvLink link 3 is currently down",
        ),
        # GSP RPC timeout that a reset does not cure (power cycle: reboot).
        FaultInfo(
            K.GSP_HANG,
            "gpu",
            Fix.REBOOT,
            xid=119,
            action="GSP RPC timeout",
            dcgm_error=126,
            dcgm_severity=2,
            diag_test="software",
            health_system="Driver",
            health_message="GPU {gpu} recovery action: node reboot required",
        ),
        # Xid 79: only a reboot brings the GPU back; nvidia-smi -r exits 15.
        FaultInfo(
            K.FALLEN_OFF_BUS,
            "gpu",
            Fix.REBOOT,
            xid=79,
            action="GPU has fallen off the bus",
            dcgm_error=120,
            diag_test="pcie",
            health_system="PCIe",
            health_message="GPU {gpu} ({bus}) has fallen off the bus",
        ),
        # Xid 63: the remap is applied by the next reset.
        FaultInfo(
            K.ROW_REMAP_PENDING,
            "gpu",
            Fix.RESET,
            xid=63,
            action="row remapping pending, reset to apply",
            dcgm_error=85,
            dcgm_severity=6,
            diag_test="memory",
            health_system="Memory",
            health_message="GPU {gpu} had memory errors and row remappings are pending",
        ),
        # Xid 64: an RMA criterion; resets and reboots change nothing.
        FaultInfo(
            K.ROW_REMAP_FAILURE,
            "gpu",
            Fix.REPLACE,
            xid=64,
            action="row remapping failure",
            dcgm_error=80,
            dcgm_severity=6,
            diag_test="memory",
            health_system="Memory",
            health_message="GPU {gpu} had memory errors and row remapping failed",
        ),
        # A GPU that is simply broken: uncorrectable errors come back after every reset.
        FaultInfo(
            K.GPU_HARDWARE,
            "gpu",
            Fix.REPLACE,
            xid=140,
            action="ECC unrecovered error",
            dcgm_error=4,
            diag_test="memory",
            health_system="Memory",
            health_message="Detected 3 volatile double-bit ECC error(s) in GPU {gpu}.",
        ),
        # Xid 13 from a crashing job: the GPU is fine, the report lasts until the restart.
        FaultInfo(
            K.APPLICATION,
            "gpu",
            Fix.NONE,
            xid=13,
            action="graphics engine exception (application)",
            clears_after="application_clear",
        ),
        # Slow, not dead (issue 37): a GPU whose PCIe link trained below its width
        # (the node agent's gpu-degraded check, condition GpuDegraded). The node
        # stays Ready and the job runs on, slower. SLOW_GANG (1.34x) is an assumption
        # of the size Falcon/Greyhound measured (below); that a GPU reset retrains the
        # link is an assumption. The level-3 diagnostic's targeted stress test fails on
        # it until then. Greyhound also found fail-slows transient (sub-minutes to
        # nearly ten hours); these faults last until a step clears them.
        FaultInfo(
            K.GPU_DEGRADED,
            "gpu",
            Fix.RESET,
            action="PCIe link width x8, expected x16",
            interrupts_jobs=False,
            slowdown=SLOW_GANG,
            agent_signal=("pcie_width", "x8", "x16", 2),
        ),
        # Slow, throttled (issue 37): the GPU's HW Thermal Slowdown clock-event reason
        # stays Active (cooling or a sensor; NVML: the clocks cut by half or more), which
        # the agent's gpu-degraded check reports after its 10 cycles. SLOW_GANG again
        # (the real slowdown depends on how far the clocks drop); that a GPU reset
        # clears it is an assumption.
        FaultInfo(
            K.GPU_THROTTLED,
            "gpu",
            Fix.RESET,
            action="HW Thermal Slowdown active",
            interrupts_jobs=False,
            slowdown=SLOW_GANG,
            agent_signal=("clock_event:hw_thermal_slowdown", "Active", "Not Active", 10),
        ),
        # Slow, and silent (issue 37): a GPU as slow as above whose cause none of the
        # agent's signals shows (no downtrained link, no clock-event reason): only the
        # job's step times reveal it, and the level-3 targeted stress test confirms it.
        # That such GPUs exist is the straggler studies' finding (Falcon, arXiv
        # 2410.12588: causes found only by profiling); that a GPU reset clears it, as
        # for the link above, is an assumption.
        FaultInfo(
            K.GPU_SLOW,
            "gpu",
            Fix.RESET,
            action="slower than its peers, no signal of the agent's shows it",
            interrupts_jobs=False,
            slowdown=SLOW_GANG,
        ),
        # Slow, on NVLink (issue 37): a link that keeps replaying (a marginal link or
        # connector: ScuffedSquared's V100 notes show replay and CRC counts rising under
        # NCCL load) while collectives still run over it, slower: SLOW_GANG, an
        # assumption again. Unlike the other slow kinds every detector sees this one:
        # DCGM's health watch fails a GPU on any new replay error (NVLINK_ERROR_CRITICAL,
        # DCGM 71; DcgmHealthWatch.cpp), which this project's gpu check reports as an
        # nvlink_error fault (GpuHealthProblem), and its NVLink policy fires on any new
        # NVLink error ("This may be causing throughput issues", DcgmPolicyManager.cpp),
        # which the EKS node monitoring agent turns into NvidiaNVLinkError, Fatal
        # (AcceleratedHardwareReady False: node auto repair acts). The job keeps running.
        # That a GPU reset retrains the link, as for a link down, is an assumption.
        FaultInfo(
            K.NVLINK_DEGRADED,
            "gpu",
            Fix.RESET,
            action="NVLink replay errors rising",
            dcgm_error=71,
            diag_test="pcie",
            health_system="NVLink",
            health_message="Detected 12 Replay NvLink errors on GPU {gpu}'s NVLink (should be 0)",
            interrupts_jobs=False,
            slowdown=SLOW_GANG,
        ),
        # A spurious report: the hardware is healthy, diagnostics pass.
        FaultInfo(
            K.FALSE_POSITIVE,
            "gpu",
            Fix.NONE,
            xid=79,
            action="GPU has fallen off the bus",
            interrupts_jobs=False,
            clears_after="false_positive_clear",
        ),
        # A switch or cable: link retraining (reboot) helps, or the network team fixes it.
        FaultInfo(
            K.EFA_LINK,
            "node",
            Fix.REBOOT,
            efa_check="link",
            action="state DOWN physical_state LINK_DOWN",
            clears_after="efa_link_clear",
        ),
        FaultInfo(
            K.EFA_DEVICE_MISSING,
            "node",
            Fix.REPLACE,
            efa_check="device_count",
            action="expected 32 EFA devices, found 31",
        ),
        # Slow, on the network (issue 37): an EFA port whose retransmit timeouts keep
        # rising (a marginal cable or switch port) at 60 a minute or more, the agent's
        # default (AWS's own check's rate), which its efa-degraded check reports once
        # the rate held over its 300 s span; that a slowing port crosses it is an
        # assumption (one that does not is as unseen as gpu_slow). Collectives slow the whole
        # gang: SLOW_GANG again. That a reboot retrains the link, as for a link down,
        # is an assumption.
        FaultInfo(
            K.EFA_DEGRADED,
            "node",
            Fix.REBOOT,
            action="EFA retransmit timeouts rising",
            interrupts_jobs=False,
            slowdown=SLOW_GANG,
            agent_signal=("efa_counter:retrans_timeout_events", "60+/min", "under 60/min", 10),
        ),
        # Unplanned host maintenance / a hung kernel: the kubelet stops, a reboot helps.
        FaultInfo(K.HOST_HANG, "node", Fix.REBOOT, kubelet_down=True, action="host hung"),
        # PSU, SSD, CPU, memory, board: the host never comes back from a reboot.
        FaultInfo(
            K.HOST_FAILURE,
            "node",
            Fix.REPLACE,
            kubelet_down=True,
            survives_reboot=True,
            action="host hardware failure",
        ),
        # A network or control-plane outage (an assumption of this project, not a
        # measured rate: it is injected by scenarios only): the kubelet cannot
        # reach the API server, so Ready turns Unknown on many nodes at once; the
        # hardware is fine, nothing on the node helps, and it heals by itself.
        FaultInfo(
            K.NETWORK_OUTAGE,
            "node",
            Fix.OUTSIDE,
            kubelet_down=True,
            survives_reboot=True,
            interrupts_jobs=False,
            action="the kubelet lost the API server (network or control-plane outage)",
        ),
    )
}


def info(kind: FaultKind) -> FaultInfo:
    """The table row of ``kind``."""
    return FAULTS[kind]


# ------------------------------------------------------------------ fault mix

LLAMA3_NODE_HOURS = 2048 * 54 * 24
"""16,384 H100 = 2,048 nodes of 8 GPUs, for 54 days."""

LLAMA3_CAUSES: tuple[tuple[str, int, dict[FaultKind, int]], ...] = (
    # (cause, interruptions, how they are split over fault kinds)
    (
        "faulty GPU incl. NVLink",
        148,
        {K.XID_RESET: 50, K.NVLINK: 30, K.FALLEN_OFF_BUS: 34, K.GPU_HARDWARE: 34},
    ),
    ("GPU HBM3", 72, {K.ROW_REMAP_PENDING: 48, K.ROW_REMAP_FAILURE: 24}),
    ("software bug", 54, {K.APPLICATION: 54}),
    ("network switch/cable", 35, {K.EFA_LINK: 35}),
    ("unplanned host maintenance", 32, {K.HOST_HANG: 32}),
    ("GPU SRAM", 19, {K.XID_RESET: 19}),
    ("GPU system processor", 17, {K.GSP_HANG: 17}),
    ("NIC", 7, {K.EFA_DEVICE_MISSING: 7}),
    ("NCCL watchdog", 7, {K.APPLICATION: 7}),
    ("silent data corruption", 6, {K.GPU_HARDWARE: 6}),
    ("thermal interface/sensor", 6, {K.GPU_HARDWARE: 6}),
    ("SSD, PSU, chassis, IO board, CPU, system memory", 14, {K.HOST_FAILURE: 14}),
    ("dependency", 2, {K.APPLICATION: 2}),
)
"""The Llama 3 table: 419 unexpected interruptions by cause."""

FALSE_POSITIVES_PER_INTERRUPTION = 0.2
"""Not in the Llama 3 table (a spurious report interrupts nothing): an assumption."""


def _llama3_rates() -> dict[FaultKind, float]:
    counts: dict[FaultKind, float] = {}
    for _cause, total, split in LLAMA3_CAUSES:
        if sum(split.values()) != total:
            raise AssertionError(f"split of {_cause} does not add up to {total}")
        for kind, count in split.items():
            counts[kind] = counts.get(kind, 0) + count
    interruptions = sum(total for _, total, _ in LLAMA3_CAUSES)
    counts[K.FALSE_POSITIVE] = interruptions * FALSE_POSITIVES_PER_INTERRUPTION
    return {kind: count / LLAMA3_NODE_HOURS for kind, count in counts.items()}


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


MEAN_LEMON_FACTOR = 226.0
"""A lemon's fault rate over the mix's, when only a share is given: what Meta's finding
implies if the lemons' extra faults were all of the difference. Removing its lemons,
1.2% of RSC-1's nodes, cut failures of jobs of 512 GPUs and more from 14% to 4%
(arXiv 2410.21680, read through reviews of it): the failure hazard fell by
ln(0.86)/ln(0.96) = 3.69 times, so 1 + 0.012 * (factor - 1) = 3.69 and factor = 226.
An upper bound, and an assumption: Meta's lemons also failed jobs in ways its health
checks did not see."""


class LemonModel(_Strict):
    """Some hosts fault far more often than the rest (issue 36).

    Meta found such "lemon" nodes in its research clusters and removing them cut
    large jobs' failures from 14% to 4% (arXiv 2410.21680); how many there are and
    how much more often they fault is not a published rate, so both are
    assumptions a mix file states. A share of the fleet's slots start with a lemon
    host, whose faults come ``factor`` times as often as the mix says; a repair
    keeps the host (and its extra faults), a replacement brings a fresh host.
    """

    share: float = Field(gt=0, le=1, description="Of the fleet's slots, those with a lemon host.")
    factor: float = Field(gt=1, le=1000, description="A lemon host's fault rate over the mix's.")


class FaultDuration(_Strict):
    """How long a kind's faults last before they clear by themselves: log-uniform in a range.

    For faults that come and go, such as fail-slows, which lasted from under a minute to
    nearly ten hours on a 10,000-GPU cluster (Greyhound, USENIX ATC '25); the shape of
    the distribution between the two is an assumption a mix file states. A step that
    fixes the fault earlier clears it then.
    """

    shortest: Duration = Field(gt=timedelta(0))
    longest: Duration = Field(gt=timedelta(0))

    @model_validator(mode="after")
    def _ordered(self) -> FaultDuration:
        if self.longest < self.shortest:
            raise ValueError(f"longest {self.longest} is shorter than shortest {self.shortest}")
        return self

    def draw(self, rng: random.Random) -> float:
        """Seconds, log-uniform between the two bounds."""
        low, high = self.shortest.total_seconds(), self.longest.total_seconds()
        return math.exp(rng.uniform(math.log(low), math.log(high)))


def _may_last(kind: FaultKind) -> bool:
    """Whether a mix may give ``kind`` a duration (slowdowns; nothing on the node to fix)."""
    info = FAULTS[kind]
    return info.slowdown > 1.0 or info.fix in (Fix.NONE, Fix.OUTSIDE)


class FaultMix(_Strict):
    """Random faults: a rate per node-hour for each kind, times ``multiplier``.

    The default is the Llama 3 table (about one fault per 6,300 node-hours).
    ``lemons``: hosts with more faults than the rest (off by default). ``extra_rates``:
    more kinds on top of ``rates``, drawn apart so the ``rates`` plan stays the same
    (none by default). ``lasts``: kinds whose faults clear by themselves after a drawn
    time (none by default).
    """

    rates: dict[FaultKind, float] = Field(default_factory=_llama3_rates)
    multiplier: float = Field(default=1.0, ge=0)
    lemons: LemonModel | None = None
    extra_rates: dict[FaultKind, float] = Field(default_factory=dict)
    lasts: dict[FaultKind, FaultDuration] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _rates_not_negative(self) -> FaultMix:
        for name, rates in (("rates", self.rates), ("extra_rates", self.extra_rates)):
            bad = {k.value: r for k, r in rates.items() if r < 0 or math.isnan(r)}
            if bad:
                raise ValueError(f"{name} must be >= 0: {bad}")
        return self

    @model_validator(mode="after")
    def _lasts_only_for_transient_kinds(self) -> FaultMix:
        # A hard fault that went away by itself would be a different fault: a fallen-off
        # GPU or a dead host does not heal, and a model that let it would hand every
        # policy free repairs. Slowdowns come and go (Greyhound: sub-minute to about 10
        # hours), as do faults with nothing on the node to fix.
        hard = sorted(k.value for k in self.lasts if not _may_last(k))
        if hard:
            allowed = sorted(k.value for k in FaultKind if _may_last(k))
            raise ValueError(f"lasts cannot end hard faults {hard}; kinds that may: {allowed}")
        return self

    def per_node_hour(self) -> float:
        """Total faults per node-hour of ``rates`` (lemons and extra rates not counted)."""
        return sum(self.rates.values()) * self.multiplier

    def events(self, seed: int, nodes: int) -> Iterator[PlannedFault]:
        """Endless planned faults for a fleet of ``nodes`` nodes, in time order.

        Deterministic for a seed: the same times, kinds, node ordinals and GPUs.
        The node is an ordinal in [0, 1) that the fleet maps to one of its live
        nodes when the fault is due.
        """
        planned = self._stream(random.Random(seed), nodes, None)
        if self.lemons is not None:
            # A stream of its own (its own generator): the base plan stays what it is
            # without lemons, and lemon hosts get the extra faults on top of it.
            rng = random.Random(f"lemons-{seed}")
            count = min(nodes, max(1, round(self.lemons.share * nodes)))
            slots = sorted(rng.sample(range(nodes), count))
            extra = self._stream(rng, nodes, slots)
            planned = heapq.merge(planned, extra, key=lambda fault: fault.at)
        if self.extra_rates:
            more = FaultMix(rates=self.extra_rates, multiplier=self.multiplier)
            added = more._stream(random.Random(f"extra-{seed}"), nodes, None)
            planned = heapq.merge(planned, added, key=lambda fault: fault.at)
        if not self.lasts:
            yield from planned
            return
        # Durations from a generator of their own, too: times, kinds and places stay
        # the plan's without them.
        rng = random.Random(f"lasts-{seed}")
        for fault in planned:
            lasts = self.lasts.get(fault.kind)
            yield fault if lasts is None else dataclasses.replace(fault, lasts=lasts.draw(rng))

    def _stream(
        self, rng: random.Random, nodes: int, lemon_slots: list[int] | None
    ) -> Iterator[PlannedFault]:
        """The mix's faults over ``nodes`` slots, or over ``lemon_slots`` the lemons' extra."""
        kinds = sorted((k for k, r in self.rates.items() if r > 0), key=lambda k: k.value)
        weights = [self.rates[k] for k in kinds]
        if lemon_slots is None:
            per_second = self.per_node_hour() * nodes / 3600.0
        else:
            assert self.lemons is not None
            per_second = self.per_node_hour() * (self.lemons.factor - 1) * len(lemon_slots) / 3600.0
        at = 0.0
        while per_second > 0 and kinds:
            at += rng.expovariate(per_second)
            kind = rng.choices(kinds, weights)[0]
            if lemon_slots is None:
                ordinal, lemon = rng.random(), False
            else:
                ordinal, lemon = (rng.choice(lemon_slots) + 0.5) / nodes, True
            yield PlannedFault(
                at=at, kind=kind, ordinal=ordinal, gpu_draw=rng.random(), lemon=lemon
            )

    @classmethod
    def llama3(cls, multiplier: float = 1.0) -> FaultMix:
        """The default mix, optionally scaled."""
        return cls(multiplier=multiplier)

    @classmethod
    def load(cls, path: Path) -> FaultMix:
        """Read a fault mix YAML file (``rates: {kind: per node-hour}``, ``multiplier``).

        Raises:
            ScenarioError: The file cannot be read or is not a valid mix.
        """
        return _load(cls, path)


@dataclass(frozen=True, slots=True)
class PlannedFault:
    """One fault drawn from a mix: when, what, and where (as ordinals)."""

    at: float
    kind: FaultKind
    ordinal: float
    gpu_draw: float
    lemon: bool = False
    """One of a lemon host's extra faults: only while the slot still holds that host."""
    lasts: float | None = None
    """Simulated seconds after which it clears by itself (the mix's ``lasts``); None: the
    kind's own rule."""


# ------------------------------------------------------------------ scenario


class ScenarioEvent(_Strict):
    """At simulated time ``at``, inject ``fault`` on a node, a GPU, or several nodes.

    Target: ``node`` (a name), else ``count`` nodes or a ``fraction`` of ``pool``
    (or of the fleet without a pool), chosen at random among nodes still running,
    fault-free schedulable ones first; one node at random when neither is given.
    """

    at: Duration = Field(ge=timedelta(0))
    fault: FaultKind
    node: str | None = Field(default=None, min_length=1, max_length=253)
    pool: str | None = Field(default=None, min_length=1, max_length=63)
    count: int | None = Field(default=None, ge=1, le=100_000)
    fraction: float | None = Field(default=None, gt=0, le=1)
    gpu: GpuIndex | None = None
    xid: int | None = Field(
        default=None, ge=0, le=1023, description="Report this Xid instead of the kind's own."
    )
    clears_after: Duration | None = Field(
        default=None, gt=timedelta(0), description="Clears by itself after this."
    )

    @model_validator(mode="after")
    def _target_is_consistent(self) -> ScenarioEvent:
        if self.node is not None and (self.pool or self.count or self.fraction):
            raise ValueError("give either node or pool/count/fraction, not both")
        if self.count is not None and self.fraction is not None:
            raise ValueError("give count or fraction, not both")
        kind = FAULTS[self.fault]
        if self.gpu is not None and kind.scope != "gpu":
            raise ValueError(f"{self.fault.value} is a node fault: no gpu")
        if self.xid is not None and kind.xid is None:
            raise ValueError(f"{self.fault.value} reports no Xid: no xid")
        return self


class Scenario(_Strict):
    """A scripted list of faults (a YAML file with ``events:``)."""

    events: list[ScenarioEvent] = Field(default_factory=list, max_length=100_000)

    def ordered(self) -> list[ScenarioEvent]:
        """The events by time (stable for equal times)."""
        return sorted(self.events, key=lambda e: e.at)

    @classmethod
    def load(cls, path: Path) -> Scenario:
        """Read a scenario YAML file.

        Raises:
            ScenarioError: The file cannot be read or is not a valid scenario.
        """
        return _load(cls, path)


class ScenarioError(ValueError):
    """A scenario or fault-mix file that cannot be used; the message names the problem."""


_M = TypeVar("_M", bound=BaseModel)


def _load(model: type[_M], path: Path) -> _M:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise ScenarioError(f"{path}: cannot read: {err.strerror or err}") from err
    except yaml.YAMLError as err:
        raise ScenarioError(f"{path}: not valid YAML: {err}") from err
    if not isinstance(data, dict):
        raise ScenarioError(f"{path}: expected a mapping at the top level")
    try:
        return model.model_validate(data)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}" for e in err.errors()
        )
        raise ScenarioError(f"{path}: {problems}") from err
