"""The demo's summary: what the incidents did and what it meant for the fleet.

Computed from two sources only: the incidents' own records (each run's state
query: outcome, fault class, rung attempts, decision log) and the simulated
fleet's true accounting (availability, replacements in flight, faults
injected). Nothing is counted by the demo itself.

Definitions:

- **incidents**: runs of the nodes' ``NodeRemediation`` workflows started
  during the demo (a node whose fault comes back after the cooldown has two).
- **outcome**: the run's outcome; a run that escalated and waits for an
  operator counts as ``escalated``; one still working as ``open``.
- **MTTR** (p50/p95) over incidents that ended ``repaired``, ``recovered`` or
  ``replaced``: from the run's start (the watcher's report) to its last
  decision (the node released or replaced), excluding the cooldown the run
  then stays open for. ``mttr_*_s`` is in simulated seconds: the real
  duration times the time factor (so Temporal's and the APIs' real latency
  is scaled up with it); ``mttr_real_*_s`` is the real duration;
  ``mttr_clock_*_s`` (when the simulator's clock is given, as the what-if
  comparison does) is the same span on the simulator's own clock: with a paced
  clock (simulator/fleet/clock.py) that holds simulated time while the
  simulator catches up, the factor achieved is below the one requested and
  ``mttr_*_s`` overstates by their ratio; the clock's figure does not.
- **breaker_trips**: decisions in which a pool's breaker was found open and a
  reboot or replacement was not run.
- **max_concurrent_replacements**: the most replacements in progress at once,
  against the policy's ``replacement.max_concurrent``. A replacement is in
  progress from its incident's "deleted NodeClaim" decision until its
  "replaced" (or "failed") decision, i.e. until the old node is gone and the
  new capacity is Ready. ``max_nodes_terminating`` is the fleet's own count:
  the most nodes the simulated Karpenter had terminating at once (NodeClaim
  deleted, Node not gone yet), a shorter window of the same replacements.
- **availability**: the fleet's node-seconds healthy and schedulable over its
  capacity (a slot being replaced counts as unavailable), simulated time.
- **jobs** (the simulated training jobs; ``None`` without workloads): from the
  fleet, ``runs_succeeded`` / ``runs_failed`` (a run fails for good when its
  retry budget is spent), ``success_rate`` = succeeded / finished runs (None
  before any finished), ``ettr`` = productive GPU time (work kept: in a
  checkpoint or a completed run) / allocated GPU time (None before any), the GPU-hours of work
  thrown away by faults and by the remediation's drains and reboots, and
  ``remediation_caused_failures``: job pods the project itself ended (drain,
  delete, reboot) at a cost to the job, i.e. losing its work because no
  checkpoint was saved for the drain, or spending its retry budget (the goal:
  none for jobs that speak the handshake, ``..._handshake``). From the
  incidents' decision logs, what the system did: ``checkpoint_requests``
  (incidents that asked their node's jobs to checkpoint),
  ``checkpoints_answered`` (incidents that accepted an answer), ``deferred``
  (incidents that kept a quarantined node running its job, urgency when_idle).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from demo.admission_summary import AdmissionSummary, admission_text
from demo.incidents import Incident
from gpu_remediation import decision_log as log_words
from gpu_remediation.models import Outcome, Rung
from simulator.fleet import FleetSnapshot
from simulator.fleet.workloads import CAUSED_BY_FAULT, FAILED_BY_GANG, SUCCEEDED_BY_GANG

RESOLVED = (Outcome.REPAIRED.value, Outcome.RECOVERED.value, Outcome.REPLACED.value)


class JobsSummary(BaseModel):
    """What the remediation meant for the training jobs (see the module's definitions)."""

    model_config = ConfigDict(frozen=True)

    jobs: int
    handshake_jobs: int
    runs_succeeded: int
    runs_failed: int
    runs_failed_by_remediation: int
    success_rate: float | None
    ettr: float | None
    gpu_hours_allocated: float
    gpu_hours_lost_to_faults: float
    gpu_hours_lost_to_remediation: float
    gpu_hours_lost_to_slowness: float = 0.0
    """Training time a slow node (issue 37) turned into no work, all ranks of its gang."""
    restarts_from_checkpoint: int
    """Attempts ended by a drain (DisruptionTarget) and placed again: no budget spent."""
    checkpoint_requests: int
    checkpoints_answered: int
    deferred: int
    remediation_caused_failures: int
    remediation_caused_failures_handshake: int
    remediation_caused_failures_by_fault: dict[str, int]
    """By the faults the node had when the project acted (``+``-joined; ``none``)."""
    hangs: int = 0
    """Attempts that hung at a collective (issue 36)."""
    hang_timeouts: int = 0
    """Of those, attempts the collective's timeout failed: nothing ended them before."""
    hangs_ended_by_remediation: int = 0
    """Of those, attempts the remediation ended (drain, reboot, delete) while hung."""
    gpu_hours_hung: float = 0.0
    """GPU time hung jobs held without training (a part of the time lost)."""
    runs_by_gang: dict[str, dict[str, int]] = {}
    """Gang size (nodes) -> ``succeeded`` and ``failed`` runs of jobs of that size."""


class DemoSummary(BaseModel):
    """The summary ``remediate demo`` prints (and ``--json`` prints as one object)."""

    model_config = ConfigDict(frozen=True)

    incidents: int
    outcomes: dict[str, int]
    by_fault_class: dict[str, dict[str, int]]
    """Fault class -> outcome -> incidents."""
    rungs_used: dict[str, int]
    """Rung -> incidents that ran it."""
    started_by: dict[str, int] = {}
    """Kind of an incident's first evidence (``condition``, ``xid``, ``straggler``, ...) ->
    incidents; incidents whose state was not read are not counted."""
    rung_attempts: dict[str, int]
    mttr_p50_s: float | None
    mttr_p95_s: float | None
    mttr_real_p50_s: float | None
    mttr_real_p95_s: float | None
    mttr_incidents: int
    replacements: int
    max_concurrent_replacements: int
    replacement_cap: int
    max_nodes_terminating: int
    breaker_trips: int
    availability: float
    availability_healthy: float
    availability_schedulable: float
    availability_working: float | None = None
    """Capacity doing work (issue 36): node-seconds available *or* running a training
    job's pod, over capacity. A quarantined node that finishes its job first, or a slow
    one, is not available but works. None from runs before it was counted."""
    faults_injected: dict[str, int]
    reboots: int
    jobs: JobsSummary | None
    nodes: int
    time_factor: float
    sim_seconds: float
    wall_seconds: float
    temporal_address: str
    temporal_ui: str | None
    admission: AdmissionSummary | None = None
    """Node admission (burn-in) figures; None when the demo ran without the gate."""
    nvsentinel: dict[str, int] | None = None
    """NVSentinel's requests (``--nvsentinel``): ``requests`` and how many are answered
    ``true``, ``false`` or still ``open``; None when the demo ran without it."""
    mttr_clock_p50_s: float | None = None
    """MTTR p50 on the simulator's clock (None: no clock given, or no resolved incident)."""
    mttr_clock_p95_s: float | None = None
    """MTTR p95 on the simulator's clock."""

    @property
    def job_runs(self) -> dict[str, int] | None:
        """Finished job runs by outcome, as the what-if table and charts count them."""
        if self.jobs is None:
            return None
        by_remediation = self.jobs.runs_failed_by_remediation
        return {
            "succeeded": self.jobs.runs_succeeded,
            "failed": self.jobs.runs_failed,
            "failed_by_fault": self.jobs.runs_failed - by_remediation,
            "failed_by_eviction": by_remediation,
        }


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) with linear interpolation; None without values."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _resolution_span(incident: Incident) -> tuple[datetime, datetime] | None:
    state = incident.state
    if state is None or incident.result not in RESOLVED or not state.decisions:
        return None
    return state.started_at, state.decisions[-1].at


def replacement_windows(
    incidents: Iterable[Incident], now: datetime
) -> list[tuple[datetime, datetime]]:
    """When each replacement was in progress: NodeClaim deleted until replaced or failed."""
    windows = []
    for incident in incidents:
        if incident.state is None:
            continue
        started: datetime | None = None
        for decision in incident.state.decisions:
            if decision.stage != log_words.REPLACE_STAGE:
                continue
            if log_words.is_deleted_node_claim(decision.action):
                started = decision.at
            elif started is not None and decision.action in (log_words.REPLACED, log_words.FAILED):
                windows.append((started, decision.at))
                started = None
        if started is not None:
            windows.append((started, now))  # still in progress
    return windows


def max_overlap(windows: Iterable[tuple[datetime, datetime]]) -> int:
    """The most windows open at one moment (one that ends as another starts does not overlap)."""
    # Ends sort before starts at the same instant.
    edges = sorted(
        [(start, 1) for start, _ in windows] + [(end, -1) for _, end in windows],
        key=lambda edge: (edge[0], edge[1]),
    )
    most = current = 0
    for _, step in edges:
        current += step
        most = max(most, current)
    return most


def _breaker_trips(incident: Incident) -> int:
    if incident.state is None:
        return 0
    return sum(
        1
        for d in incident.state.decisions
        if d.stage == log_words.BREAKER_STAGE and d.action == log_words.BREAKER_OPEN
    )


def _job_stage(incident: Incident) -> tuple[bool, bool, bool]:
    """Whether the incident asked jobs to checkpoint, accepted an answer, deferred for a job."""
    if incident.state is None:
        return False, False, False
    asked = answered = deferred = False
    for decision in incident.state.decisions:
        if decision.stage != log_words.JOBS_STAGE:
            continue
        waiting = decision.action == log_words.WAITING_FOR_JOBS
        if log_words.is_asked_to_checkpoint(decision.action):
            asked = True
            waiting = True
        if waiting and log_words.is_deferred(decision.reason):
            deferred = True
        if decision.action == log_words.CHECKPOINT_ANSWERED:
            answered = True
    return asked, answered, deferred


def jobs_summary(
    fleet_jobs: Mapping[str, float | int | None] | None, incidents: Iterable[Incident]
) -> JobsSummary | None:
    """The ``jobs`` part of the summary: the fleet's job accounting and the job stage's work."""
    if fleet_jobs is None:
        return None
    ettr = fleet_jobs.get("ettr")  # None before any GPU time was allocated
    # Every other figure is a count or a sum, never None.
    jobs = {key: value for key, value in fleet_jobs.items() if value is not None}
    stages = [_job_stage(i) for i in incidents]
    succeeded, failed = int(jobs["runs_succeeded"]), int(jobs["runs_failed"])
    finished = succeeded + failed
    return JobsSummary(
        jobs=int(jobs["jobs"]),
        handshake_jobs=int(jobs["handshake_jobs"]),
        runs_succeeded=succeeded,
        runs_failed=failed,
        runs_failed_by_remediation=int(jobs["runs_failed_by_remediation"]),
        success_rate=round(succeeded / finished, 6) if finished else None,
        ettr=None if ettr is None else round(float(ettr), 6),
        gpu_hours_allocated=_hours(jobs["gpu_seconds_allocated"]),
        gpu_hours_lost_to_faults=_hours(jobs["gpu_seconds_lost_to_faults"]),
        gpu_hours_lost_to_remediation=_hours(jobs["gpu_seconds_lost_to_remediation"]),
        gpu_hours_lost_to_slowness=_hours(jobs.get("gpu_seconds_lost_to_slowness", 0.0)),
        restarts_from_checkpoint=int(jobs["disruptions"]),
        checkpoint_requests=sum(asked for asked, _, _ in stages),
        checkpoints_answered=sum(answered for _, answered, _ in stages),
        deferred=sum(deferred for _, _, deferred in stages),
        remediation_caused_failures=int(jobs["failures_caused_by_remediation"]),
        remediation_caused_failures_handshake=int(jobs["handshake_failures_caused_by_remediation"]),
        remediation_caused_failures_by_fault={
            key.removeprefix(CAUSED_BY_FAULT): int(value)
            for key, value in jobs.items()
            if key.startswith(CAUSED_BY_FAULT)
        },
        hangs=int(jobs.get("hangs", 0)),
        hang_timeouts=int(jobs.get("hang_timeouts", 0)),
        hangs_ended_by_remediation=int(jobs.get("hangs_ended_by_remediation", 0)),
        gpu_hours_hung=_hours(jobs.get("gpu_seconds_hung", 0.0)),
        runs_by_gang=_runs_by_gang(jobs),
    )


def _runs_by_gang(jobs: Mapping[str, float | int]) -> dict[str, dict[str, int]]:
    """The runs_succeeded.gang.N and runs_failed.gang.N counts, by N (smallest first)."""
    out: dict[str, dict[str, int]] = {}
    for prefix, outcome in ((SUCCEEDED_BY_GANG, "succeeded"), (FAILED_BY_GANG, "failed")):
        for key, value in jobs.items():
            if key.startswith(prefix):
                size = key.removeprefix(prefix)
                out.setdefault(size, {"succeeded": 0, "failed": 0})[outcome] = int(value)
    return dict(sorted(out.items(), key=lambda item: int(item[0])))


def _hours(gpu_seconds: float) -> float:
    return round(gpu_seconds / 3600, 2)


def summarize(
    incidents: Iterable[Incident],
    snapshot: FleetSnapshot,
    *,
    replacement_cap: int,
    time_factor: float,
    wall_seconds: float,
    temporal_address: str,
    temporal_ui: str | None,
    admission: AdmissionSummary | None = None,
    sim_time: Callable[[datetime], float] | None = None,
) -> DemoSummary:
    """Build the summary from the incidents' states and the fleet's snapshot.

    ``sim_time`` maps a real moment to the simulator's clock (``SimClock.sim_at``);
    given, MTTR is also measured on it (``mttr_clock_*_s``).
    """
    items = list(incidents)
    now = datetime.now(UTC)
    outcomes: Counter[str] = Counter()
    by_class: dict[str, Counter[str]] = {}
    rungs: Counter[str] = Counter()
    attempts: Counter[str] = Counter()
    started_by: Counter[str] = Counter()
    real_mttr: list[float] = []
    clock_mttr: list[float] = []
    trips = 0
    for incident in items:
        result = incident.result
        outcomes[result] += 1
        by_class.setdefault(incident.fault_class or "unclassified", Counter())[result] += 1
        trips += _breaker_trips(incident)
        if incident.state is not None:
            ran = {a.rung.value for a in incident.state.attempts}
            if incident.state.rung == Rung.ESCALATE:
                ran.add(Rung.ESCALATE.value)
            rungs.update(ran)
            attempts.update(a.rung.value for a in incident.state.attempts)
            if incident.state.evidence:
                started_by[incident.state.evidence[0].kind] += 1
        span = _resolution_span(incident)
        if span is not None:
            real_mttr.append((span[1] - span[0]).total_seconds())
            if sim_time is not None:
                clock_mttr.append(max(0.0, sim_time(span[1]) - sim_time(span[0])))
    sim_mttr = [s * time_factor for s in real_mttr]
    counters = snapshot.counters
    faults = {
        key.removeprefix("faults."): value
        for key, value in sorted(counters.items())
        if key.startswith("faults.") and not key.startswith(("faults.from_", "faults.cleared"))
    }
    return DemoSummary(
        incidents=len(items),
        outcomes=dict(outcomes.most_common()),
        by_fault_class={fc: dict(c.most_common()) for fc, c in sorted(by_class.items())},
        rungs_used={r.value: rungs[r.value] for r in Rung if rungs[r.value]},
        rung_attempts={r.value: attempts[r.value] for r in Rung if attempts[r.value]},
        started_by=dict(started_by.most_common()),
        mttr_p50_s=_round(percentile(sim_mttr, 50)),
        mttr_p95_s=_round(percentile(sim_mttr, 95)),
        mttr_real_p50_s=_round(percentile(real_mttr, 50), 2),
        mttr_real_p95_s=_round(percentile(real_mttr, 95), 2),
        mttr_incidents=len(real_mttr),
        mttr_clock_p50_s=_round(percentile(clock_mttr, 50)),
        mttr_clock_p95_s=_round(percentile(clock_mttr, 95)),
        replacements=counters.get("karpenter.terminations", 0),
        max_concurrent_replacements=max_overlap(replacement_windows(items, now)),
        replacement_cap=replacement_cap,
        max_nodes_terminating=snapshot.max_replacements_in_flight,
        breaker_trips=trips,
        availability=round(snapshot.availability["available"], 6),
        availability_healthy=round(snapshot.availability["healthy"], 6),
        availability_schedulable=round(snapshot.availability["schedulable"], 6),
        availability_working=(
            round(snapshot.availability["working"], 6)
            if "working" in snapshot.availability
            else None
        ),
        faults_injected=faults,
        reboots=counters.get("reboots", 0),
        jobs=jobs_summary(snapshot.jobs, items),
        nodes=snapshot.capacity,
        time_factor=time_factor,
        sim_seconds=round(snapshot.sim_seconds, 1),
        wall_seconds=round(wall_seconds, 1),
        temporal_address=temporal_address,
        temporal_ui=temporal_ui,
        admission=admission,
    )


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def duration_text(seconds: float | None) -> str:
    """``4m 30s``, ``1h 05m``, ``12s`` (``-`` for None)."""
    if seconds is None:
        return "-"
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    minutes, secs = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


def render(summary: DemoSummary) -> RenderableType:
    """The summary for the terminal."""
    outcomes = Table(title="Incidents by fault class and outcome", title_justify="left")
    columns = list(summary.outcomes)
    outcomes.add_column("fault class")
    for column in columns:
        outcomes.add_column(column, justify="right")
    for fault_class, counts in summary.by_fault_class.items():
        outcomes.add_row(fault_class, *(str(counts.get(c, "")) for c in columns))
    outcomes.add_row(
        Text("all", style="bold"),
        *(Text(str(summary.outcomes[c]), style="bold") for c in columns),
    )
    cap_ok = (
        max(summary.max_concurrent_replacements, summary.max_nodes_terminating)
        <= summary.replacement_cap
    )
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold")
    facts.add_column()
    rungs = ", ".join(f"{rung} {count}" for rung, count in summary.rungs_used.items()) or "none"
    facts.add_row("Incidents", str(summary.incidents))
    facts.add_row("Rungs used (incidents)", rungs)
    if summary.started_by:
        started = ", ".join(f"{kind} {count}" for kind, count in summary.started_by.items())
        facts.add_row("Started by (first evidence)", started)
    facts.add_row(
        "MTTR p50 / p95",
        f"{duration_text(summary.mttr_p50_s)} / {duration_text(summary.mttr_p95_s)} simulated "
        f"({summary.mttr_incidents} repaired or replaced; real "
        f"{summary.mttr_real_p50_s or 0:.1f}s / {summary.mttr_real_p95_s or 0:.1f}s)",
    )
    facts.add_row(
        "Replacements",
        f"{summary.replacements}; at most {summary.max_concurrent_replacements} at once "
        f"(cap {summary.replacement_cap}; at most {summary.max_nodes_terminating} nodes "
        "terminating at once) "
        + ("[green]within the cap[/]" if cap_ok else "[red]ABOVE THE CAP[/]"),
    )
    facts.add_row("Breaker trips", str(summary.breaker_trips))
    facts.add_row(
        "GPU-node availability",
        f"{summary.availability:.3%} (healthy {summary.availability_healthy:.3%}, "
        f"schedulable {summary.availability_schedulable:.3%})"
        + (
            f"; doing work {summary.availability_working:.3%}"
            if summary.availability_working is not None
            else ""
        ),
    )
    if summary.jobs is not None:
        for label, text in job_lines(summary.jobs):
            facts.add_row(label, text)
    if summary.admission is not None:
        facts.add_row("Node admission", admission_text(summary.admission, duration_text))
    if summary.nvsentinel is not None:
        n = summary.nvsentinel
        facts.add_row(
            "NVSentinel requests",
            f"{n['requests']}: {n['true']} answered remediated, {n['false']} answered not, "
            f"{n['open']} open",
        )
    injected = ", ".join(f"{k} {v}" for k, v in summary.faults_injected.items()) or "none"
    facts.add_row("Faults injected", injected)
    facts.add_row(
        "Fleet",
        f"{summary.nodes} nodes, {duration_text(summary.sim_seconds)} simulated in "
        f"{summary.wall_seconds:.0f}s (time factor {summary.time_factor:g})",
    )
    facts.add_row("Temporal UI", summary.temporal_ui or f"(headless) {summary.temporal_address}")
    return Group(outcomes, Text(""), facts)


def job_lines(jobs: JobsSummary) -> list[tuple[str, str]]:
    """The summary's lines about the training jobs."""
    rate = "-" if jobs.success_rate is None else f"{jobs.success_rate:.1%}"
    caused = jobs.remediation_caused_failures
    by_fault = ", ".join(
        f"{why} {count}" for why, count in jobs.remediation_caused_failures_by_fault.items()
    )
    own = (
        f"{caused} ({jobs.remediation_caused_failures_handshake} of jobs that speak the "
        f"handshake; {jobs.runs_failed_by_remediation} runs failed by it)"
        + (f"; on nodes with {by_fault}" if by_fault else "")
    )
    return [
        (
            "Training job runs",
            f"{jobs.runs_succeeded} succeeded, {jobs.runs_failed} failed (success {rate}); "
            f"{jobs.jobs} jobs, {jobs.handshake_jobs} speak the checkpoint handshake",
        ),
        (
            "ETTR",
            f"{'-' if jobs.ettr is None else f'{jobs.ettr:.1%}'} of "
            f"{jobs.gpu_hours_allocated:g} GPU-hours; lost "
            f"{jobs.gpu_hours_lost_to_faults:g} to faults, "
            f"{jobs.gpu_hours_lost_to_remediation:g} to remediation, "
            f"{jobs.gpu_hours_lost_to_slowness:g} to slow nodes",
        ),
        (
            "Checkpoint handshakes",
            f"{jobs.checkpoint_requests} asked, {jobs.checkpoints_answered} answered, "
            f"{jobs.deferred} deferred until idle; {jobs.restarts_from_checkpoint} restarts "
            "from a checkpoint after a drain",
        ),
        ("Job failures caused by remediation", own),
    ]
