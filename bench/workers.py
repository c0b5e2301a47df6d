"""Several workers on one task queue: how incidents spread, a SIGKILLed worker loses nothing.

For each worker count (``--workers``, default 1, 2 and 4; a fresh dev server
each) the benchmark starts that many worker processes on one task queue.
Each is ``python -m bench.workers serve``: the real worker wiring
(``worker.build_worker``) with the instant ``FakeFleet`` activities, an
identity of its own (``bench-worker-<n>``), and the tuning read the way the
production worker reads it (``GPU_REMEDIATION_*`` variables through
``Settings`` and ``worker.worker_tuning``; ``--workflow-task-pollers``,
``--activity-task-pollers``, ``--max-concurrent-workflow-tasks``,
``--max-concurrent-activities`` set them).

Each incident is the ladder benchmark's: Xid 48 by signal-with-start, GPU
reset not supported, reboot, verification passes, released. Two phases:

* **throughput**: ``--incidents`` (default 300) with ``--in-flight`` (default
  100) open at a time; incidents per second, CPU of the server, the workers
  and this process;
* **kill** (two workers or more): as many incidents again; once
  ``--kill-at`` of them (default 30%) have completed, worker 0 is SIGKILLed.
  Every incident must still complete, repaired. A workflow task the dead
  worker held is retried after its timeout (10 s; 5 s for a task waiting
  on its sticky queue), an activity after its start-to-close timeout: 60 s
  for reads and bookkeeping, the rung's timeout for a rung (shortened here to
  ``LOST_ACTIVITY_TIMEOUT``; the shipped ones are minutes, and a rung
  activity that stops heartbeating is presumed dead after 2 minutes).

Counted from every incident's history (``bench.workers_history``): which
worker identity started each workflow task and activity and which one closed
the incident (so the spread is what the server recorded, not what the
workers say), how many incidents ran on more than one worker, workflow task
timeouts, and activities that needed another attempt. CPU of the server, of
the workers with this process, and of other processes on the machine (when
that is large, the wall times were disturbed) in the throughput phase.

Checked: every incident repaired, in both phases; in each phase every live
worker closed at least one incident; the killed worker had closed incidents
before it died (so the kill landed mid-run).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.client import Client

from bench.common import DevServer, bounded, connect, cpu_window, dev_server
from bench.workers_history import IncidentTrace, WorkerShare, moved, shares, trace
from gpu_remediation.ids import Signals, node_workflow_id
from gpu_remediation.models import EvidenceReport, Outcome
from gpu_remediation.policy import Policy
from gpu_remediation.settings import PREFIX, Settings
from gpu_remediation.workflow_models import NodeRemediationInput
from tests.doubles import FakeFleet
from tests.workflows.node_support import policy, xid
from worker import build_worker, worker_tuning
from workflows.node_remediation import NodeRemediationWorkflow

CLUSTER = "bench"
WORKER_COUNTS = (1, 2, 4)
QUICK_WORKER_COUNTS = (2,)
INCIDENTS = 300
QUICK_INCIDENTS = 40
IN_FLIGHT = 100
QUICK_IN_FLIGHT = 20
KILL_AT = 0.3
LOST_ACTIVITY_TIMEOUT = timedelta(seconds=30)
RESULT_LIMIT_S = 300.0
"""Longest wait for one incident's result (a lost activity waits for its timeout)."""
READY_TIMEOUT_S = 60.0
HISTORIES_IN_FLIGHT = 20
ROOT = Path(__file__).resolve().parent.parent
TUNING_FIELDS = (
    "workflow_task_pollers",
    "activity_task_pollers",
    "max_concurrent_workflow_tasks",
    "max_concurrent_activities",
)


def tuning_env(tuning: Mapping[str, int | None]) -> dict[str, str]:
    """The ``GPU_REMEDIATION_*`` variables that carry the given tuning to a worker."""
    unknown = set(tuning) - set(Settings.model_fields)
    if unknown:
        raise ValueError(f"not worker settings: {sorted(unknown)}")
    return {
        PREFIX + name.upper(): str(value) for name, value in tuning.items() if value is not None
    }


def bench_policy() -> Policy:
    """The ladder benchmark's policy with every rung's (and verification's) timeout short."""
    base = policy()
    rungs = {
        rung: settings.model_copy(update={"timeout": LOST_ACTIVITY_TIMEOUT})
        for rung, settings in base.rungs.items()
    }
    verification = base.verification.model_copy(update={"timeout": LOST_ACTIVITY_TIMEOUT})
    return base.model_copy(update={"rungs": rungs, "verification": verification})


# --- the worker processes -------------------------------------------------------------


async def serve(address: str, task_queue: str, identity: str) -> None:
    """Poll ``task_queue`` as ``identity`` until SIGTERM/SIGINT (the child process's body)."""
    settings = Settings.from_env()
    client = await connect(address)
    worker = build_worker(
        client,
        FakeFleet(reset_status="not_supported").activities(),
        task_queue,
        production=True,
        identity=identity,
        **worker_tuning(settings),
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with worker:
        print("READY", flush=True)
        await stop.wait()


@dataclass
class WorkerProcess:
    """One ``bench.workers serve`` child."""

    identity: str
    process: subprocess.Popen[str]
    killed_at: float | None = None


def _spawn(
    address: str, task_queue: str, identity: str, env: Mapping[str, str]
) -> subprocess.Popen[str]:
    child_env = {k: v for k, v in os.environ.items() if not k.startswith(PREFIX)}
    child_env.update(env)
    return subprocess.Popen(
        [sys.executable, "-m", "bench.workers", "serve", address, task_queue, identity],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=child_env,
    )


async def start_worker(
    address: str, task_queue: str, identity: str, env: Mapping[str, str]
) -> WorkerProcess:
    """Start a worker process and wait until it polls."""
    process = _spawn(address, task_queue, identity, env)
    assert process.stdout is not None
    line = await asyncio.wait_for(asyncio.to_thread(process.stdout.readline), READY_TIMEOUT_S)
    if line.strip() != "READY":
        process.kill()
        process.wait()
        raise RuntimeError(f"worker {identity} did not start (said {line!r})")
    return WorkerProcess(identity, process)


def stop_worker(worker: WorkerProcess) -> None:
    """SIGTERM a worker (graceful), SIGKILL it if it lingers; reap it."""
    if worker.process.poll() is not None:
        return
    worker.process.terminate()
    try:
        worker.process.wait(timeout=40)
    except subprocess.TimeoutExpired:
        worker.process.kill()
        worker.process.wait(timeout=10)


def kill_worker(worker: WorkerProcess) -> None:
    """SIGKILL a worker: no graceful shutdown, as when its node dies."""
    worker.killed_at = time.perf_counter()
    worker.process.send_signal(signal.SIGKILL)
    worker.process.wait(timeout=10)


# --- the phases -----------------------------------------------------------------------


@dataclass
class Phase:
    """One phase's measurement."""

    kind: str
    identities: list[str]
    """Every worker of the phase (one that ran nothing appears in no history)."""
    incidents: int
    repaired: int
    seconds: float
    incidents_per_s: float
    shares: dict[str, WorkerShare]
    moved: int
    workflow_task_timeouts: int
    activities_retried: int
    failures: list[str] = field(default_factory=list)
    killed: str | None = None
    killed_had_closed: int = 0
    seconds_after_kill: float | None = None
    cpu_s: dict[str, float] = field(default_factory=dict)

    @property
    def spread_ok(self) -> bool:
        """Every worker alive to the end closed at least one incident."""
        return all(
            identity in self.shares and self.shares[identity].incidents_closed > 0
            for identity in self.identities
            if identity != self.killed
        )

    @property
    def ok(self) -> bool:
        """Nothing lost, the work spread, and a kill (if any) landed mid-run."""
        landed = self.killed is None or self.killed_had_closed > 0
        return self.repaired == self.incidents and self.spread_ok and landed


async def _run_incidents(
    client: Client,
    task_queue: str,
    pol: Policy,
    nodes: Sequence[str],
    in_flight: int,
    on_done: Callable[[int], Awaitable[None]] | None = None,
) -> list[str]:
    """Run one incident per node, ``in_flight`` open at a time; return each one's outcome."""
    done = 0

    async def one(node: str) -> str:
        nonlocal done
        handle = await client.start_workflow(
            NodeRemediationWorkflow.run,
            NodeRemediationInput(cluster=CLUSTER, node=node, policy=pol),
            id=node_workflow_id(CLUSTER, node),
            task_queue=task_queue,
            start_signal=Signals.EVIDENCE,
            start_signal_args=[EvidenceReport(node=node, evidence=[xid(48, gpu=1)])],
        )
        try:
            outcome = (await asyncio.wait_for(handle.result(), RESULT_LIMIT_S)).outcome.value
        except Exception as err:  # reported with the outcomes: the phase misses its target
            outcome = f"{type(err).__name__}: {err}"
        done += 1
        if on_done is not None:
            await on_done(done)
        return outcome

    return list(await bounded(list(nodes), in_flight, one))


async def _traces(client: Client, nodes: Sequence[str]) -> list[IncidentTrace]:
    async def one(node: str) -> IncidentTrace:
        workflow_id = node_workflow_id(CLUSTER, node)
        history = await client.get_workflow_handle(workflow_id).fetch_history()
        return trace(workflow_id, history)

    return list(await bounded(list(nodes), HISTORIES_IN_FLIGHT, one))


async def _phase(
    kind: str,
    server: DevServer,
    client: Client,
    task_queue: str,
    workers: list[WorkerProcess],
    nodes: Sequence[str],
    in_flight: int,
    kill_at: float | None,
) -> Phase:
    pol = bench_policy()
    victim = workers[0] if kill_at is not None else None
    kill_after = (kill_at or 0.0) * len(nodes)

    async def maybe_kill(done: int) -> None:
        if victim is not None and victim.killed_at is None and done >= kill_after:
            kill_worker(victim)

    pids = [w.process.pid for w in workers] if victim is None else []
    with cpu_window(server, pids) as cpu:
        started = time.perf_counter()
        outcomes = await _run_incidents(client, task_queue, pol, nodes, in_flight, maybe_kill)
        ended = time.perf_counter()
    traces = await _traces(client, nodes)
    repaired = sum(outcome == Outcome.REPAIRED.value for outcome in outcomes)
    by_worker = shares(traces)
    killed_had_closed = 0
    if victim is not None:
        killed_had_closed = by_worker.get(victim.identity, WorkerShare()).incidents_closed
    return Phase(
        kind=kind,
        identities=[w.identity for w in workers],
        incidents=len(nodes),
        repaired=repaired,
        seconds=round(ended - started, 2),
        incidents_per_s=round(len(nodes) / (ended - started), 1),
        shares=by_worker,
        moved=moved(traces),
        workflow_task_timeouts=sum(t.workflow_task_timeouts for t in traces),
        activities_retried=sum(t.activities_retried for t in traces),
        failures=sorted({o for o in outcomes if o != Outcome.REPAIRED.value})[:5],
        killed=victim.identity if victim is not None else None,
        killed_had_closed=killed_had_closed,
        seconds_after_kill=(
            round(ended - victim.killed_at, 2)
            if victim is not None and victim.killed_at is not None
            else None
        ),
        cpu_s=(
            {
                "server": round(cpu.server_s, 1),
                "workers_and_bench": round(cpu.python_s, 1),
                "other_processes": round(cpu.other_s, 1),
            }
            if victim is None
            else {}
        ),
    )


async def run_count(
    count: int,
    *,
    incidents: int,
    in_flight: int,
    kill_at: float,
    tuning: Mapping[str, int | None],
) -> list[Phase]:
    """Both phases with ``count`` workers on a fresh server (no kill phase for one worker)."""
    async with dev_server(f"workers-{count}") as server:
        client = await connect(server.address)
        task_queue = f"bench-workers-{uuid.uuid4().hex[:8]}"
        env = tuning_env(tuning)
        workers = list(
            await asyncio.gather(
                *(
                    start_worker(server.address, task_queue, f"bench-worker-{n}", env)
                    for n in range(count)
                )
            )
        )
        try:
            # Warm-up: every worker has imported and run the node workflow once
            # (a task lands on whichever polls first, so some may stay cold).
            warm = [f"w{count}-warmup-{n}" for n in range(count)]
            await _run_incidents(client, task_queue, bench_policy(), warm, count)
            phases = [
                await _phase(
                    "throughput",
                    server,
                    client,
                    task_queue,
                    workers,
                    [f"w{count}-t-{n:04d}" for n in range(incidents)],
                    in_flight,
                    None,
                )
            ]
            if count > 1:
                phases.append(
                    await _phase(
                        "kill",
                        server,
                        client,
                        task_queue,
                        workers,
                        [f"w{count}-k-{n:04d}" for n in range(incidents)],
                        in_flight,
                        kill_at,
                    )
                )
        finally:
            for worker in workers:
                with contextlib.suppress(Exception):
                    stop_worker(worker)
    for phase in phases:
        _print_phase(phase)
    return phases


def _print_phase(phase: Phase) -> None:
    spread = ", ".join(
        f"{identity} {share.incidents_closed}" for identity, share in phase.shares.items()
    )
    line = (
        f"[workers] {len(phase.identities)} worker(s), {phase.kind}: "
        f"{phase.repaired}/{phase.incidents} repaired in {phase.seconds:.1f} s "
        f"({phase.incidents_per_s:.1f}/s); closed by: "
        f"{spread}; {phase.moved} moved between workers, {phase.workflow_task_timeouts} "
        f"workflow task timeouts, {phase.activities_retried} activities retried"
    )
    if phase.killed is not None:
        line += (
            f"; {phase.killed} SIGKILLed after closing {phase.killed_had_closed}, "
            f"last incident {phase.seconds_after_kill} s after the kill"
        )
    if phase.cpu_s:
        line += f"; CPU s {phase.cpu_s}"
    if phase.failures:
        line += f"; FAILURES {phase.failures}"
    print(line, flush=True)


async def run(
    *,
    quick: bool = False,
    counts: Sequence[int] | None = None,
    incidents: int | None = None,
    in_flight: int | None = None,
    kill_at: float = KILL_AT,
    tuning: Mapping[str, int | None] | None = None,
) -> dict[str, Any]:
    """Run the benchmark for each worker count; return the numbers (also printed)."""
    counts = list(counts or (QUICK_WORKER_COUNTS if quick else WORKER_COUNTS))
    incidents = incidents or (QUICK_INCIDENTS if quick else INCIDENTS)
    in_flight = in_flight or (QUICK_IN_FLIGHT if quick else IN_FLIGHT)
    tuning = dict(tuning or {})
    print(
        f"[workers] {incidents} incidents per phase, {in_flight} in flight, worker counts "
        f"{counts}, tuning {tuning_env(tuning) or 'SDK defaults'} ...",
        flush=True,
    )
    phases: list[Phase] = []
    for count in counts:
        phases += await run_count(
            count, incidents=incidents, in_flight=in_flight, kill_at=kill_at, tuning=tuning
        )
    return {
        "name": "workers",
        "quick": quick,
        "incidents_per_phase": incidents,
        "in_flight": in_flight,
        "kill_at": kill_at,
        "lost_activity_timeout_s": LOST_ACTIVITY_TIMEOUT.total_seconds(),
        "tuning": tuning_env(tuning),
        "phases": [asdict(phase) | {"ok": phase.ok} for phase in phases],
        "ok": all(phase.ok for phase in phases),
    }


def summary_rows(result: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """``bench.run_all``'s rows: each phase's throughput, spread and losses, with targets."""
    rows: list[tuple[str, str, str, str]] = []
    for phase in result["phases"]:
        n, kind = len(phase["identities"]), phase["kind"]
        closed = [share["incidents_closed"] for share in phase["shares"].values()]
        label = f"{n} worker{'s' if n > 1 else ''}, {kind}"
        rows.append(
            (
                "workers",
                f"{label}: incidents repaired",
                f"{phase['repaired']}/{phase['incidents']}",
                f"{phase['incidents']}/{phase['incidents']}",
            )
        )
        rows.append(("workers", f"{label}: incidents/s", f"{phase['incidents_per_s']:.1f}", ""))
        rows.append(
            (
                "workers",
                f"{label}: closed per worker",
                " / ".join(str(c) for c in closed),
                "each live worker >= 1",
            )
        )
        if phase["killed"] is not None:
            rows.append(
                (
                    "workers",
                    f"{label}: killed worker had closed; last incident after kill",
                    f"{phase['killed_had_closed']}; {phase['seconds_after_kill']} s",
                    ">= 1; all complete",
                )
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    if len(sys.argv) > 1 and sys.argv[1] == "serve":
        # The worker process: python -m bench.workers serve ADDRESS TASK_QUEUE IDENTITY
        _, _, address, task_queue, identity = sys.argv
        asyncio.run(serve(address, task_queue, identity))
        sys.stdout.flush()
        # The SDK's native threads can abort interpreter finalisation: skip it.
        os._exit(0)
    parser.add_argument("--quick", action="store_true", help="2 workers, 40 incidents (smoke run)")
    parser.add_argument("--workers", type=int, nargs="+", default=None, help="worker counts")
    parser.add_argument("--incidents", type=int, default=None, help="incidents per phase")
    parser.add_argument("--in-flight", type=int, default=None)
    parser.add_argument("--kill-at", type=float, default=KILL_AT, help="fraction done at the kill")
    for name in TUNING_FIELDS:
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=None)
    args = parser.parse_args()
    if not 0 < args.kill_at < 1:
        parser.error(f"--kill-at must be between 0 and 1, got {args.kill_at}")
    if any(n < 1 for n in args.workers or ()):
        parser.error("worker counts must be 1 or more")
    asyncio.run(
        run(
            quick=args.quick,
            counts=args.workers,
            incidents=args.incidents,
            in_flight=args.in_flight,
            kill_at=args.kill_at,
            tuning={name: getattr(args, name) for name in TUNING_FIELDS},
        )
    )


if __name__ == "__main__":
    main()
