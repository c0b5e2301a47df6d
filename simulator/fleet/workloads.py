"""Gang-scheduled training jobs that checkpoint: what faults and drains interrupt.

Each job runs one pod per node (all of the node's GPUs) on ``job_nodes`` nodes
(or a size of the ``gangs`` mix) of one pool, all at once or not at all, like a
JobSet: its pods carry ``jobset.sigs.k8s.io/jobset-name: <job>`` and
``jobset.sigs.k8s.io/restart-attempt``.
A *run* of a job does ``job_duration`` of work, saving a checkpoint every
``checkpoint_interval`` of work (each save stops training for ``checkpoint_cost``).
An *attempt* is one placement of the run's pods. An attempt ends:

- completed, when the run's work is done: the run succeeded, a new run starts;
- by a fault that breaks work (``fault``): a fault on one of its nodes that is
  not in ``survivable_faults`` (those leave the job running until its node is
  drained), or a placement on a node already broken (the scheduler only sees
  cordons, taints, readiness and allocatable GPUs). The work since the last
  checkpoint is lost and the retry budget is spent. A fault in ``hanging_faults``
  does this only ``collective_timeout`` later: meanwhile the job is *hung*, every
  rank waiting at a collective that will not complete, training and saving nothing;
- by the remediation: an eviction (the pod gets ``DisruptionTarget``, which a
  ``podFailurePolicy`` rule ``Ignore``s: work since the checkpoint is lost, the
  budget is not spent), a plain delete or a reboot under the job (the budget is
  spent: the project caused a job failure).

An interrupted run is placed again after ``restart_delay`` on free nodes (Ready,
not cordoned, not tainted, all GPUs allocatable, no job) and resumes from its
checkpoint once ``restart_cost`` has passed on them; it fails for good once more
than ``backoff_limit`` failures spent its budget. A hung job that the remediation
evicts first restarts without spending it. A failed run is resubmitted as the job's
next run, which resumes from the failed one's checkpoint (it is on shared storage),
as a user or a pipeline resubmits a training job. The first placement fills each pool in
node-name order (job 000 on the pool's first nodes, and so on: the largest gangs
first), later ones pick free nodes at random as the scheduler's tie-break would.

Step times (``step_times``, docs/checkpoint-contract.md): while a node of a job
is slow, every pod of the job writes its own time per step on itself, over
HTTP with checkpoint_client's patch, every ``step_times`` of simulated time, and
once more when the job is back at full pace; each report covers the steps since
the last one or since the pace changed, whichever is later. A rank's own time is
``STEP_SECONDS`` times its node's slowdown (a healthy rank computes at full
speed and waits for the slow one at the collectives). A job writes nothing
while every node of it runs at full pace: such a gang's times are all equal to
their median, so they could never report a straggler; skipping them saves the
relay decoding thousands of writes (a real job writes them all the time).

The checkpoint handshake (docs/checkpoint-contract.md): a share
(``handshake_share``) of each pool's jobs opt in (``gpu-remediation.io/checkpoint:
supported``; job 000 of a pool always does when the share is above 0). When a
request appears on a pod of such a job (seen through the store's hook), a
``checkpoint_first`` request starts a save at once, a ``when_idle`` one waits for
the next periodic save; when the save is durable the job writes the answer on
its rank-0 pod with checkpoint_client's merge PATCH over the emulator's HTTP
API, as training code does (watchers see MODIFIED), unless the request was
withdrawn meanwhile.
"""

from __future__ import annotations

import logging
import math
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import Enum
from typing import TYPE_CHECKING

from checkpoint_client.kube import KubeConfig, KubeError, patch_pod_annotations
from checkpoint_client.protocol import (
    ANSWER_ANNOTATION,
    OPT_IN_ANNOTATION,
    REQUEST_ANNOTATION,
    STEP_TIME_ANNOTATION,
    SUPPORTED,
    Answer,
    ProtocolError,
    Request,
    StepTime,
    parse_request,
)
from simulator.fleet.model import NodeState, Phase
from simulator.fleet.training import Attempt, Ending, JobStats, Usage, Why
from simulator.kube_api import PODS, ApiError
from simulator.kube_api.disruption import DISRUPTION_TARGET
from simulator.kube_api.watch import Change

if TYPE_CHECKING:
    from simulator.fleet.config import WorkloadConfig
    from simulator.fleet.ports import WorkloadsFleet

log = logging.getLogger(__name__)

JOB_LABEL = "training.gpu-remediation.io/job"
RUN_LABEL = "training.gpu-remediation.io/run"
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"
RESTART_LABEL = "jobset.sigs.k8s.io/restart-attempt"
CAUSED_BY_FAULT = "failures_caused_by_remediation.on."
"""Summary key prefix: project-caused failures by the faults their node had (``+``-joined)."""
SUCCEEDED_BY_GANG = "runs_succeeded.gang."
"""Summary key prefix: runs that succeeded, by their job's gang size (nodes)."""
FAILED_BY_GANG = "runs_failed.gang."
"""Summary key prefix: runs that spent their budget, by their job's gang size (nodes)."""
STEP_SECONDS = 1.0
"""Simulated seconds of work per training step (the answer's ``step``)."""


class Effect(Enum):
    """What a node's state does to the job on it."""

    RUNS = "runs"
    HANGS = "hangs"
    CRASHES = "crashes"


def speaks_handshake(index: int, share: float) -> bool:
    """Whether job ``index`` of its pool opts in: spread evenly, job 0 first."""
    return math.ceil(round((index + 1) * share, 9)) > math.ceil(round(index * share, 9))


@dataclass(slots=True)
class TrainingJob:
    """One gang-scheduled job, its current run and attempt."""

    name: str
    pool: str
    handshake: bool
    size: int
    """Nodes of its gang."""
    run: int = 0
    restarts: int = 0
    """Restarts of the current run (the JobSet's restart-attempt)."""
    failures: int = 0
    """Budget the current run has spent."""
    saved: float = 0.0
    """Work of the run's latest checkpoint."""
    fresh: bool = True
    """The next placement starts a new run."""
    resubmitted: bool = False
    """The new run resubmits a failed one: it resumes from that run's checkpoint."""
    running: bool = False
    nodes: list[str] = field(default_factory=list)
    gpus: int = 0
    ready_at: float = 0.0
    attempt: Attempt | None = None
    token: int = 0
    """Bumped whenever the attempt's schedule changes: older timers do nothing."""
    pending: dict[str, Request] = field(default_factory=dict)
    """Requests seen and not answered yet, by incident."""
    seen: set[str] = field(default_factory=set)
    """Incidents whose request this job has seen (each counted once)."""
    reported_step: int | None = None
    """The step of the attempt's last step-time report (None: none yet)."""
    step_token: int = 0
    """Bumped when a step-time report is scheduled: older report timers do nothing."""

    def pod_name(self, rank: int) -> str:
        """The name of the current attempt's pod of ``rank``."""
        return f"{self.name}-r{self.run}a{self.restarts}-{rank}"


class Workloads:
    """Places, checkpoints, interrupts and completes the training jobs of the fleet."""

    def __init__(self, fleet: WorkloadsFleet, config: WorkloadConfig) -> None:
        self._fleet = fleet
        self.config = config
        self.jobs: dict[str, TrainingJob] = {}
        self.stats = JobStats()
        self._placing = False
        self._packed = True
        self._rng = random.Random(fleet.config.seed + 2)
        for pool in fleet.config.pools:
            for index, size in enumerate(config.jobs_in(pool.nodes)):
                name = f"{pool.name}-job-{index:03d}"
                handshake = speaks_handshake(index, config.handshake_share)
                self.jobs[name] = TrainingJob(
                    name=name, pool=pool.name, handshake=handshake, size=size
                )

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
        starts: list[TrainingJob] = []
        wake: float | None = None
        with fleet.lock:
            self._placing = False
            packed, self._packed = self._packed, False
            free: dict[str, list[str]] = {}
            for node in sorted(fleet.nodes.values(), key=lambda n: n.name):
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
                if len(nodes) < job.size:
                    continue
                # Later, the scheduler breaks ties between equal nodes at random.
                chosen = nodes[: job.size] if packed else sorted(self._rng.sample(nodes, job.size))
                free[job.pool] = [n for n in nodes if n not in chosen]
                self._begin(job, chosen, now)
                starts.append(job)
        for job in starts:
            self._start(job)
        if wake is not None:
            fleet.scheduler.call_at(wake, self.request_placement)

    def _begin(self, job: TrainingJob, nodes: list[str], now: float) -> None:
        # Caller holds the lock.
        fleet = self._fleet
        startup = 0.0
        if job.fresh:
            job.fresh = False
            job.run += 1
            job.restarts = job.failures = 0
            if job.resubmitted:
                startup = self.config.restart_cost.total_seconds()
            else:
                job.saved = 0.0
            job.resubmitted = False
        else:
            job.restarts += 1
            startup = self.config.restart_cost.total_seconds()
        job.running = True
        job.reported_step = None
        job.nodes = nodes
        job.gpus = sum(fleet.nodes[n].gpus for n in nodes)
        job.pending.clear()
        job.attempt = Attempt(
            started_at=now,
            resumed_from=job.saved,
            total=self.config.job_duration.total_seconds(),
            interval=self.config.checkpoint_interval.total_seconds(),
            cost=self.config.checkpoint_cost.total_seconds(),
            startup=startup,
        )
        for name in nodes:
            fleet.nodes[name].job = job.name
            fleet.accounting.track(fleet.nodes[name], now)  # doing work from now on
        job.attempt.rate = self._rate(job)  # placed on a slow node: slow from the start

    def _start(self, job: TrainingJob) -> None:
        fleet = self._fleet
        with fleet.lock:
            run, restarts, nodes = job.run, job.restarts, list(job.nodes)
            names = [job.pod_name(rank) for rank in range(len(nodes))]
        annotations = {OPT_IN_ANNOTATION: SUPPORTED} if job.handshake else {}
        labels = {
            JOB_LABEL: job.name,
            RUN_LABEL: str(run),
            JOBSET_LABEL: job.name,
            RESTART_LABEL: str(restarts),
        }
        for pod_name, node_name in zip(names, nodes, strict=True):
            fleet.store.put_pod(
                self.config.namespace,
                pod_name,
                node_name=node_name,
                labels=labels,
                annotations=annotations,
                gpus=fleet.pool(job.pool).gpus_per_node,
            )
        with fleet.lock:
            effects = {self._effect(fleet.nodes[n]) for n in nodes if n in fleet.nodes}
            slow = job.attempt is not None and job.attempt.rate < 1.0
        if Effect.CRASHES in effects:
            self._end(job.name, run, restarts, Ending.FAULT)
            return
        if Effect.HANGS in effects:
            self._hang(job.name, run, restarts)  # placed on a node that hangs its collectives
            return
        self._schedule(job.name)
        if slow and self.config.step_times is not None:
            self._new_step_window(job.name, run, restarts)  # placed on a slow node

    def _effect(self, node: NodeState) -> Effect:
        """What the node does to a job on it: runs it, hangs it or fails it (caller locks).

        A fault it cannot survive hangs the job when every such fault is one of
        ``hanging_faults`` (a host that stops, with its kubelet, hangs the others too);
        a node down or rebooting, or a stopped kubelet without such a fault, fails it.
        """
        if node.phase is not Phase.RUNNING:
            return Effect.CRASHES
        survivable, hanging = self.config.survivable_faults, self.config.hanging_faults
        kinds = {f.kind for f in node.faults if f.info.interrupts_jobs and f.kind not in survivable}
        if kinds - hanging:
            return Effect.CRASHES
        if kinds:
            return Effect.HANGS
        return Effect.RUNS if node.kubelet_up else Effect.CRASHES

    # ------------------------------------------------------------- progress

    def _schedule(self, name: str) -> None:
        fleet = self._fleet
        with fleet.lock:
            job = self.jobs[name]
            if not job.running or job.attempt is None or job.attempt.hung:
                return
            job.token += 1
            token = job.token
            at, _ = job.attempt.next_event()
        fleet.scheduler.call_at(at, lambda: self._advance(name, token, at))

    def _advance(self, name: str, token: int, at: float) -> None:
        fleet = self._fleet
        answers: list[tuple[str, Answer]] = []
        with fleet.lock:
            job = self.jobs[name]
            attempt = job.attempt
            if not job.running or attempt is None or job.token != token:
                return
            _, kind = attempt.next_event()
            run, restarts = job.run, job.restarts
            if kind == "checkpoint":
                attempt.begin_save(at, Why.PERIODIC)
            elif kind == "saved":
                job.saved = attempt.finish_save(at)
                answers = self._answers(job)
        if kind == "done":
            self._end(name, run, restarts, Ending.COMPLETED, at=at)
            return
        for incident, answer in answers:
            self._write_answer(name, run, restarts, incident, answer)
        self._schedule(name)

    def _hang(self, name: str, run: int, restarts: int) -> None:
        """The attempt hangs: it fails ``collective_timeout`` on, unless it ends first."""
        fleet = self._fleet
        with fleet.lock:
            job = self._attempt_of(name, run, restarts)
            if job is None or job.attempt is None:
                return
            now = fleet.clock.now()
            if not job.attempt.hang(now):
                return
            job.token += 1  # its checkpoint and completion timers are void
            self.stats.hangs += 1
        timeout = self.config.collective_timeout.total_seconds()
        fleet.scheduler.call_at(now + timeout, lambda: self._timed_out(name, run, restarts))

    def _timed_out(self, name: str, run: int, restarts: int) -> None:
        """The hung collective's timeout: the watchdog fails the job (the budget is spent)."""
        with self._fleet.lock:
            job = self._attempt_of(name, run, restarts)
            if job is None or job.attempt is None or not job.attempt.hung:
                return
            self.stats.hang_timeouts += 1
        self._end(name, run, restarts, Ending.FAULT)

    def _answers(self, job: TrainingJob) -> list[tuple[str, Answer]]:
        # Caller holds the lock. Every waiting request is answered by a fresh checkpoint.
        if not job.pending:
            return []
        step = int(job.saved / STEP_SECONDS)
        saved_at = datetime.now(UTC)  # Kubernetes-facing times are wall-clock (README)
        out = [(i, Answer(i, step, saved_at)) for i in sorted(job.pending)]
        job.pending.clear()
        if job.attempt is not None:
            job.attempt.answered = True  # the drain waits for this save
        return out

    # ------------------------------------------------------------ handshake

    def _request_seen(self, name: str, run: int, restarts: int, raw: str) -> None:
        fleet = self._fleet
        try:
            request: Request | None = parse_request(raw)
        except ProtocolError:
            request = None
        with fleet.lock:
            job = self.jobs.get(name)
            if job is None or not job.running or (job.run, job.restarts) != (run, restarts):
                return
            if request is None:
                self.stats.malformed_requests += 1
                return
            if request.incident in job.seen:
                return
            job.seen.add(request.incident)
            self.stats.checkpoint_requests += 1
            if not request.urgent:
                self.stats.deferred += 1
            if not job.handshake or job.attempt is None:
                return  # a job that did not opt in never answers
            job.pending[request.incident] = request
            if not request.urgent or job.attempt.saving:
                return  # the next save (or the one under way) answers it
            job.attempt.begin_save(fleet.clock.now(), Why.REQUESTED)
        self._schedule(name)

    def _write_answer(
        self, name: str, run: int, restarts: int, incident: str, answer: Answer
    ) -> None:
        """PATCH the answer on the attempt's rank-0 pod if its request still stands."""
        fleet = self._fleet
        with fleet.lock:
            job = self.jobs[name]
            if not job.running or (job.run, job.restarts) != (run, restarts):
                return
            pods = [job.pod_name(rank) for rank in range(len(job.nodes))]
        ns = self.config.namespace
        standing = False
        for pod in pods:
            try:
                value = (fleet.store.get(PODS, pod, ns)["metadata"].get("annotations") or {}).get(
                    REQUEST_ANNOTATION
                )
            except ApiError as err:
                if err.code != 404:
                    raise
                continue
            try:
                standing = value is not None and parse_request(value).incident == incident
            except ProtocolError:
                standing = False
            if standing:
                break
        if not standing:
            return  # withdrawn (the incident was aborted or no longer needs the node)
        if not self._patch_pod(pods[0], {ANSWER_ANNOTATION: answer.to_json()}):
            return  # the pod was deleted meanwhile (drained): nothing left to answer on
        with fleet.lock:
            self.stats.checkpoints_answered += 1

    # -------------------------------------------------------------- endings

    def _end(
        self,
        name: str,
        run: int,
        restarts: int,
        ending: Ending,
        *,
        at: float | None = None,
        node: str | None = None,
    ) -> None:
        """End the attempt ``(run, restarts)`` of job ``name`` (nothing if it already ended)."""
        fleet = self._fleet
        with fleet.lock:
            job = self.jobs.get(name)
            attempt = job.attempt if job is not None else None
            if job is None or attempt is None or not job.running:
                return
            if (job.run, job.restarts) != (run, restarts):
                return
            now = fleet.clock.now() if at is None else at
            pods = [job.pod_name(rank) for rank in range(len(job.nodes))]
            # A hung job had lost its work to the fault already: ending the hang (a drain, a
            # reboot) only cuts the loss short, so the fault is charged, not the remediation.
            blamed = ending.by_remediation and not attempt.hung
            self.stats.record(attempt.usage(now, job.gpus, ending), ending, blamed=blamed)
            self._account(job, attempt, ending, now, node, blamed=blamed)
            job.running = False
            job.attempt = None
            job.token += 1
            for node_name in job.nodes:
                state = fleet.nodes.get(node_name)
                if state is not None and state.job == name:
                    state.job = None
                    fleet.accounting.track(state, fleet.clock.now())
        for pod in pods:
            try:
                fleet.store.delete_object(PODS, pod, self.config.namespace)
            except ApiError as err:
                if err.code != 404:
                    raise
        self.request_placement()

    def _account(
        self,
        job: TrainingJob,
        attempt: Attempt,
        ending: Ending,
        now: float,
        node: str | None,
        *,
        blamed: bool,
    ) -> None:
        # Caller holds the lock. ``blamed``: the remediation ended it, and not a hang.
        stats = self.stats
        job.ready_at = now
        if ending is Ending.COMPLETED:
            stats.runs_succeeded += 1
            stats.run_ended(job.size, succeeded=True)
            job.fresh, job.resubmitted = True, False
            return
        job.ready_at = now + self.config.restart_delay.total_seconds()
        if blamed:
            stats.interrupted_by_remediation += 1
        else:
            stats.interrupted_by_fault += 1
        if attempt.hung and ending.by_remediation:
            stats.hangs_ended_by_remediation += 1
        if not ending.spends_budget:
            stats.disruptions += 1
            if blamed and attempt.lost_work(now) > 0 and not attempt.saved_for_remediation:
                stats.drains_without_checkpoint += 1
                self._caused_by_remediation(job, ending, node)
            return
        stats.restarts_spending_budget += 1
        if blamed:
            stats.evictions_spending_budget += 1
            self._caused_by_remediation(job, ending, node)
        job.failures += 1
        if job.failures > self.config.backoff_limit:
            stats.runs_failed += 1
            stats.run_ended(job.size, succeeded=False)
            if blamed:
                stats.runs_failed_by_remediation += 1
            job.fresh = job.resubmitted = True

    def _caused_by_remediation(self, job: TrainingJob, ending: Ending, node: str | None) -> None:
        # Caller holds the lock. Which faults the node had says why the project did it.
        state = self._fleet.nodes.get(node) if node is not None else None
        kinds = sorted({f.kind.value for f in state.faults}) if state is not None else []
        why = "+".join(kinds) or "none"
        self.stats.handshake_failures_caused_by_remediation += job.handshake
        self.stats.failures_caused_by_remediation_by_fault[why] += 1
        log.info(
            "job %s %s on node %s (faults: %s) lost work or budget: caused by the remediation",
            job.name,
            ending.value,
            node,
            why,
        )

    def pace(self, node_name: str) -> None:
        """The node's hardware changed: its job trains at the pace of its slowest rank."""
        fleet = self._fleet
        with fleet.lock:
            node = fleet.nodes.get(node_name)
            job = self.jobs.get(node.job) if node is not None and node.job else None
            if job is None or not job.running or job.attempt is None:
                return
            changed = job.attempt.set_rate(fleet.clock.now(), self._rate(job))
            run, restarts = job.run, job.restarts
        if changed:
            self._schedule(job.name)
            if self.config.step_times is not None:
                self._new_step_window(job.name, run, restarts)

    # ------------------------------------------------------------ step times

    def _new_step_window(self, name: str, run: int, restarts: int) -> None:
        """The pace changed: the next report, one interval on, covers only the new pace.

        A window begun before the change would give the earlier steps the new times.
        """
        fleet = self._fleet
        now = fleet.clock.now()
        with fleet.lock:
            job = self._attempt_of(name, run, restarts)
            if job is None or job.attempt is None:
                return
            job.reported_step = int(job.attempt.work_at(now) / STEP_SECONDS)
        self._report_later(name, run, restarts, now)

    def _report_steps(self, name: str, run: int, restarts: int, token: int) -> None:
        """Write each pod's step time; again one interval on while the job is slow."""
        fleet = self._fleet
        now = fleet.clock.now()
        with fleet.lock:
            job = self._attempt_of(name, run, restarts)
            if job is None or job.attempt is None or token != job.step_token:
                return
            attempt = job.attempt
            step = int(attempt.work_at(now) / STEP_SECONDS)
            last = job.reported_step if job.reported_step is not None else -1
            if step <= last:
                return  # no step since the last report (saving, or the same moment)
            steps = step - max(last, int(attempt.resumed_from / STEP_SECONDS) - 1)
            job.reported_step = step
            times = [
                (job.pod_name(rank), STEP_SECONDS * fleet.nodes[n].slowdown())
                for rank, n in enumerate(job.nodes)
                if n in fleet.nodes
            ]
            slow = attempt.rate < 1.0
        for pod, seconds in times:
            value = StepTime(step=step, seconds=seconds, steps=min(steps, step + 1)).to_json()
            self._patch_pod(pod, {STEP_TIME_ANNOTATION: value})  # a drained pod reports nothing
        if slow:
            self._report_later(name, run, restarts, now)

    def _attempt_of(self, name: str, run: int, restarts: int) -> TrainingJob | None:
        """The job while it still runs attempt (``run``, ``restarts``); caller holds the lock."""
        job = self.jobs[name]
        if not job.running or (job.run, job.restarts) != (run, restarts):
            return None
        return job

    def _report_later(self, name: str, run: int, restarts: int, now: float) -> None:
        """Schedule the attempt's next step-time report (it replaces any one pending)."""
        interval = self.config.step_times
        assert interval is not None
        with self._fleet.lock:
            job = self.jobs[name]
            job.step_token += 1
            token = job.step_token
        self._fleet.scheduler.call_at(
            now + interval.total_seconds(), lambda: self._report_steps(name, run, restarts, token)
        )

    def _patch_pod(self, pod: str, annotations: dict[str, str]) -> bool:
        """PATCH the pod's annotations over HTTP with checkpoint_client, as training code does.

        Returns:
            False when the pod is gone (deleted meanwhile, e.g. drained).
        """
        kube = KubeConfig(base_url=self._fleet.kube_url, token_path=None, ca_path=None)
        try:
            patch_pod_annotations(kube, self.config.namespace, pod, annotations)
        except KubeError as err:
            if err.status != 404:
                raise
            return False
        return True

    def _rate(self, job: TrainingJob) -> float:
        # Caller holds the lock. Every rank of a gang waits for the slowest one.
        nodes = [self._fleet.nodes[n] for n in job.nodes if n in self._fleet.nodes]
        return 1.0 / max((n.slowdown() for n in nodes), default=1.0)

    def node_broken(self, node_name: str) -> None:
        """A node's hardware broke or it reboots: the job there ends unless it survives."""
        fleet = self._fleet
        with fleet.lock:
            node = fleet.nodes.get(node_name)
            job = self.jobs.get(node.job) if node is not None and node.job else None
            if node is None or job is None or not job.running:
                return
            run, restarts = job.run, job.restarts
            # A reboot under the job is the remediation's doing, whatever the faults.
            rebooting = node.phase is Phase.REBOOTING
            effect = Effect.CRASHES if rebooting else self._effect(node)
        if effect is Effect.RUNS:
            return  # a fault the job runs through until the node is drained
        if effect is Effect.HANGS:
            self._hang(job.name, run, restarts)
            return
        ending = Ending.REBOOTED if rebooting else Ending.FAULT
        self._end(job.name, run, restarts, ending, node=node_name)

    def on_change(self, change: Change) -> None:
        """Store hook (under the store lock): a job's pod gone, or a checkpoint request on it."""
        if change.resource != PODS.key:
            return
        meta = change.obj["metadata"]
        labels = meta.get("labels") or {}
        name, run, restarts = (
            labels.get(JOB_LABEL),
            labels.get(RUN_LABEL),
            labels.get(RESTART_LABEL),
        )
        if name is None or run is None or restarts is None:
            return
        if not run.isdigit() or not restarts.isdigit():
            return
        r, a = int(run), int(restarts)
        scheduler = self._fleet.scheduler
        if change.type == "DELETED":
            evicted = any(
                c.get("type") == DISRUPTION_TARGET and c.get("status") == "True"
                for c in (change.obj.get("status") or {}).get("conditions") or []
            )
            ending = Ending.EVICTED if evicted else Ending.DELETED
            node = (change.obj.get("spec") or {}).get("nodeName")
            scheduler.call_soon(lambda: self._end(name, r, a, ending, node=node))
            return
        raw = (meta.get("annotations") or {}).get(REQUEST_ANNOTATION)
        old = None
        if change.old is not None:
            old = (change.old["metadata"].get("annotations") or {}).get(REQUEST_ANNOTATION)
        if raw is not None and raw != old:
            scheduler.call_soon(lambda: self._request_seen(name, r, a, raw))

    # -------------------------------------------------------------- summary

    def summary(self) -> dict[str, float | int | None]:
        """Job counts and GPU time for the fleet snapshot (caller holds the fleet lock)."""
        stats = self.stats
        now = self._fleet.clock.now()
        usage = Usage()
        usage.add(stats.finished)
        running = 0
        for job in self.jobs.values():
            if job.running and job.attempt is not None:
                running += 1
                usage.add(job.attempt.usage(now, job.gpus, None))
        finished = stats.runs_succeeded + stats.runs_failed
        return (
            {
                "jobs": len(self.jobs),
                "handshake_jobs": sum(1 for j in self.jobs.values() if j.handshake),
                "running": running,
                "waiting": len(self.jobs) - running,
                "runs_succeeded": stats.runs_succeeded,
                "runs_failed": stats.runs_failed,
                "runs_failed_by_remediation": stats.runs_failed_by_remediation,
                "success_rate": stats.runs_succeeded / finished if finished else None,
                "interrupted_by_fault": stats.interrupted_by_fault,
                "interrupted_by_remediation": stats.interrupted_by_remediation,
                "restarts_spending_budget": stats.restarts_spending_budget,
                "disruptions": stats.disruptions,
                "evictions_spending_budget": stats.evictions_spending_budget,
                "drains_without_checkpoint": stats.drains_without_checkpoint,
                "failures_caused_by_remediation": stats.failures_caused_by_remediation,
                "handshake_failures_caused_by_remediation": (
                    stats.handshake_failures_caused_by_remediation
                ),
                "checkpoint_requests": stats.checkpoint_requests,
                "checkpoints_answered": stats.checkpoints_answered,
                "deferred": stats.deferred,
                "malformed_requests": stats.malformed_requests,
                "gpu_seconds_allocated": usage.allocated,
                "gpu_seconds_productive": usage.productive,
                "gpu_seconds_checkpointing": usage.checkpointing,
                "gpu_seconds_requested_checkpoints": usage.requested,
                "gpu_seconds_lost_to_faults": stats.lost_to_faults,
                "gpu_seconds_lost_to_remediation": stats.lost_to_remediation,
                "gpu_seconds_lost_to_slowness": usage.slowed,
                "gpu_seconds_hung": usage.hung,
                "hangs": stats.hangs,
                "hang_timeouts": stats.hang_timeouts,
                "hangs_ended_by_remediation": stats.hangs_ended_by_remediation,
                "ettr": usage.productive / usage.allocated if usage.allocated else None,
            }
            | {
                f"{key}{size}": counts[index]
                for size, counts in sorted(stats.runs_by_gang.items())
                for index, key in enumerate((SUCCEEDED_BY_GANG, FAILED_BY_GANG))
            }
            | {
                f"{CAUSED_BY_FAULT}{why}": count
                for why, count in sorted(stats.failures_caused_by_remediation_by_fault.items())
            }
        )
