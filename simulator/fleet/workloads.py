"""Gang-scheduled training jobs: what faults and drains interrupt.

Each job runs one pod per node (all of the node's GPUs) on ``job_nodes`` nodes
of one pool, all at once or not at all. A run ends:

- successfully after ``job_duration``;
- failed when one of its nodes has a fault that breaks work (a spurious report
  breaks nothing) or loses the job's pod (an eviction by a drain, Karpenter's
  termination), or when the job was placed on a node that is already broken:
  the scheduler only sees cordons, taints, readiness and the GPUs the device
  plugin offers (they drop at the node's next health tick), not the hardware.

A failed job is placed again after ``restart_delay`` on free nodes (Ready, not
cordoned, not tainted, all GPUs allocatable, no job), chosen at random as the
scheduler's tie-break would. Runs that succeed and fail are counted for
the demo's job-success summary.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from simulator.fleet.model import Phase
from simulator.kube_api import PODS, ApiError
from simulator.kube_api.watch import Change

if TYPE_CHECKING:
    from simulator.fleet.config import WorkloadConfig
    from simulator.fleet.ports import WorkloadsFleet

JOB_LABEL = "training.gpu-remediation.io/job"
RUN_LABEL = "training.gpu-remediation.io/run"


@dataclass(slots=True)
class TrainingJob:
    """One gang-scheduled job and its current run."""

    name: str
    pool: str
    run: int = 0
    running: bool = False
    nodes: list[str] = field(default_factory=list)
    ready_at: float = 0.0


@dataclass(slots=True)
class JobStats:
    """Runs so far."""

    succeeded: int = 0
    failed: int = 0
    failed_by_fault: int = 0
    failed_by_eviction: int = 0

    @property
    def success_rate(self) -> float:
        """Succeeded runs over finished runs (1.0 before any finished)."""
        finished = self.succeeded + self.failed
        return self.succeeded / finished if finished else 1.0


class Workloads:
    """Places, fails and completes the training jobs of the fleet."""

    def __init__(self, fleet: WorkloadsFleet, config: WorkloadConfig) -> None:
        self._fleet = fleet
        self.config = config
        self.jobs: dict[str, TrainingJob] = {}
        self.stats = JobStats()
        self._placing = False
        self._rng = random.Random(fleet.config.seed + 2)
        for pool in fleet.config.pools:
            count = math.floor(pool.nodes * config.utilization / config.job_nodes)
            for index in range(count):
                name = f"{pool.name}-job-{index:03d}"
                self.jobs[name] = TrainingJob(name=name, pool=pool.name)

    # ------------------------------------------------------------ placement

    def request_placement(self) -> None:
        """Try to place waiting jobs soon (coalesced)."""
        fleet = self._fleet
        with fleet.lock:
            if self._placing:
                return
            self._placing = True
        fleet.scheduler.call_soon(self._place)

    def _place(self) -> None:
        fleet = self._fleet
        now = fleet.clock.now()
        starts: list[tuple[TrainingJob, list[str]]] = []
        wake: float | None = None
        with fleet.lock:
            self._placing = False
            free: dict[str, list[str]] = {}
            for node in fleet.nodes.values():
                if (
                    node.job is None
                    and node.phase is Phase.RUNNING
                    and node.kubelet_up
                    and node.schedulable
                    and node.written_allocatable == node.gpus
                ):
                    free.setdefault(node.pool, []).append(node.name)
            for job in self.jobs.values():
                if job.running:
                    continue
                if job.ready_at > now:
                    wake = job.ready_at if wake is None else min(wake, job.ready_at)
                    continue
                nodes = free.get(job.pool, [])
                if len(nodes) < self.config.job_nodes:
                    continue
                # The scheduler breaks ties between equal nodes at random.
                chosen = sorted(self._rng.sample(sorted(nodes), self.config.job_nodes))
                free[job.pool] = [n for n in nodes if n not in chosen]
                job.run += 1
                job.running = True
                job.nodes = chosen
                for name in chosen:
                    fleet.nodes[name].job = job.name
                starts.append((job, chosen))
        for job, nodes in starts:
            self._start(job, job.run, nodes)
        if wake is not None:
            fleet.scheduler.call_at(wake, self.request_placement)

    def _start(self, job: TrainingJob, run: int, nodes: list[str]) -> None:
        fleet = self._fleet
        for rank, name in enumerate(nodes):
            fleet.store.put_pod(
                self.config.namespace,
                f"{job.name}-r{run}-{rank}",
                node_name=name,
                labels={JOB_LABEL: job.name, RUN_LABEL: str(run)},
                gpus=fleet.pool(job.pool).gpus_per_node,
            )
        with fleet.lock:
            broken = any(not fleet.nodes[n].truly_healthy for n in nodes if n in fleet.nodes)
        if broken:
            self.fail(job.name, run, by_fault=True)
            return
        fleet.scheduler.call_later(
            self.config.job_duration.total_seconds(), lambda: self._complete(job.name, run)
        )

    # -------------------------------------------------------------- endings

    def _end(self, name: str, run: int) -> TrainingJob | None:
        """Mark the run over (None if it already was); free its nodes."""
        fleet = self._fleet
        with fleet.lock:
            job = self.jobs.get(name)
            if job is None or not job.running or job.run != run:
                return None
            job.running = False
            for node_name in job.nodes:
                node = fleet.nodes.get(node_name)
                if node is not None and node.job == name:
                    node.job = None
            return job

    def _delete_pods(self, job: TrainingJob, run: int) -> None:
        for rank in range(len(job.nodes)):
            try:
                self._fleet.store.delete_object(
                    PODS, f"{job.name}-r{run}-{rank}", self.config.namespace
                )
            except ApiError as err:
                if err.code != 404:
                    raise

    def _complete(self, name: str, run: int) -> None:
        job = self._end(name, run)
        if job is None:
            return
        with self._fleet.lock:
            self.stats.succeeded += 1
            job.ready_at = self._fleet.clock.now()
        self._delete_pods(job, run)
        self.request_placement()

    def fail(self, name: str, run: int, *, by_fault: bool) -> None:
        """The run ``run`` of job ``name`` failed (nothing if it already ended)."""
        job = self._end(name, run)
        if job is None:
            return
        fleet = self._fleet
        with fleet.lock:
            self.stats.failed += 1
            if by_fault:
                self.stats.failed_by_fault += 1
            else:
                self.stats.failed_by_eviction += 1
            job.ready_at = fleet.clock.now() + self.config.restart_delay.total_seconds()
        self._delete_pods(job, run)
        self.request_placement()

    def node_broken(self, node_name: str) -> None:
        """A node's hardware broke: the job running there fails."""
        fleet = self._fleet
        with fleet.lock:
            node = fleet.nodes.get(node_name)
            job = self.jobs.get(node.job) if node is not None and node.job else None
            run = job.run if job is not None else 0
        if job is not None:
            self.fail(job.name, run, by_fault=True)

    def on_change(self, change: Change) -> None:
        """Store hook (under the store lock): a job's pod that vanished fails its run."""
        if change.resource != PODS.key or change.type != "DELETED":
            return
        labels = change.obj["metadata"].get("labels") or {}
        name, run = labels.get(JOB_LABEL), labels.get(RUN_LABEL)
        if name is None or run is None or not run.isdigit():
            return
        self._fleet.scheduler.call_soon(lambda: self.fail(name, int(run), by_fault=False))

    def summary(self) -> dict[str, float | int]:
        """Job counts for the fleet snapshot (caller holds the fleet lock)."""
        running = sum(1 for j in self.jobs.values() if j.running)
        return {
            "jobs": len(self.jobs),
            "running": running,
            "waiting": len(self.jobs) - running,
            "runs_succeeded": self.stats.succeeded,
            "runs_failed": self.stats.failed,
            "runs_failed_by_fault": self.stats.failed_by_fault,
            "runs_failed_by_eviction": self.stats.failed_by_eviction,
            "success_rate": self.stats.success_rate,
        }
