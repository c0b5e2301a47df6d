"""Ladder benchmark: many incidents through a full ladder vs. a no-op baseline.

Ladder phase: ``--workflows`` NodeRemediation incidents (default 500), each
started by signal-with-start with one Xid 48 (GPU reset required), run with the
project's real worker wiring (``worker.build_worker``) and the instant
``FakeFleet`` activities. Default path (``--path reboot``): quarantine, stop
GPU work, GPU reset answers "not supported", climb to reboot, verification
passes, release. ``--path replace``: the same, but the verification after the
reboot fails and the incident climbs to replacement through the replacement
semaphore (capacity = number of workflows, so the cap never binds).

Baseline phase: a trivial workflow that runs, one after the other, as many
no-op activities as one ladder incident ran (counted from the calibration
incident's history and cross-checked against the FakeFleet call log), started
the same way (signal-with-start) for the same number of workflows.

Both phases keep ``--in-flight`` workflows (default 100) running: a new one
starts when one finishes. The phases run in four rounds of half their
workflows each, in the order ladder, baseline, baseline, ladder: this host's
speed drifts by tens of percent within minutes (one phase after the other,
the same code measured ratios from 1.17 to 1.53), and in this order a steady
drift falls on both phases alike. Every round gets a fresh dev server (so no
round runs on a database another filled, or pays for another's deferred
work) and a warm-up workflow before the clock starts. A phase's wall time is
the sum of its rounds, each from its first start to its last result.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from bench.baseline_workflow import GO_SIGNAL, BaselineWorkflow, noop_activity
from bench.common import CpuWindow, DevServer, bounded, connect, cpu_window, dev_server
from gpu_remediation.ids import Signals, node_workflow_id
from gpu_remediation.models import EvidenceReport, Outcome
from gpu_remediation.policy import Policy
from gpu_remediation.workflow_models import NodeRemediationInput, NodeRemediationResult
from tests.doubles import FakeFleet, failing_diag
from tests.workflows.node_support import policy, xid
from worker import build_worker
from workflows.node_remediation import NodeRemediationWorkflow

TARGET_RATIO = 1.5
CLUSTER = "bench"
WORKER_OPTIONS: dict[str, Any] = {
    "max_concurrent_workflow_tasks": 100,
    "max_concurrent_activities": 100,
}
EXPECTED = {"reboot": Outcome.REPAIRED, "replace": Outcome.REPLACED}


@dataclass
class PhaseResult:
    """One phase's measurement."""

    workflows: int
    in_flight: int
    seconds: float
    workflows_per_s: float
    activities_per_s: float
    server_cpu_s: float
    python_cpu_s: float
    other_cpu_s: float
    history_events_per_workflow: int
    workflow_tasks_per_workflow: int
    event_types: dict[str, int] = field(default_factory=dict)


def _policy(path: str, workflows: int) -> Policy:
    if path == "replace":
        replacement = policy().replacement.model_copy(
            update={"max_concurrent": min(max(workflows, 1), 1000)}
        )
        return policy(replacement=replacement)
    return policy()


def _fleet(path: str, workflows: int) -> FakeFleet:
    fleet = FakeFleet(reset_status="not_supported")
    if path == "replace":
        # One diagnostic per incident (after the reboot); all fail, so every
        # incident climbs to replacement.
        fleet.diagnostics = [failing_diag(error_id=4) for _ in range(workflows + 1)]
    return fleet


async def _history_profile(client: Client, workflow_id: str) -> tuple[int, Counter[str]]:
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    types: Counter[str] = Counter(
        EventType.Name(event.event_type).removeprefix("EVENT_TYPE_") for event in history.events
    )
    return len(history.events), types


async def _start_incident(
    client: Client, task_queue: str, pol: Policy, semaphore_id: str, node: str
) -> WorkflowHandle[NodeRemediationWorkflow, NodeRemediationResult]:
    return await client.start_workflow(
        NodeRemediationWorkflow.run,
        NodeRemediationInput(
            cluster=CLUSTER, node=node, policy=pol, semaphore_workflow_id=semaphore_id
        ),
        id=node_workflow_id(CLUSTER, node),
        task_queue=task_queue,
        start_signal=Signals.EVIDENCE,
        start_signal_args=[EvidenceReport(node=node, evidence=[xid(48, gpu=1)])],
    )


async def _measure(
    server: DevServer, items: list[str], in_flight: int, run_one: Any
) -> tuple[float, CpuWindow, list[Any]]:
    with cpu_window(server) as cpu:
        started = time.perf_counter()
        results = await bounded(items, in_flight, run_one)
        seconds = time.perf_counter() - started
    return seconds, cpu, results


@dataclass
class Side:
    """One round's server and worker: run workflows, add up their time and CPU."""

    server: DevServer
    run_one: Callable[[str], Awaitable[Any]]
    id_prefix: str
    activities: int
    events: int
    types: Counter[str]
    names: list[str] = field(default_factory=list)
    workflows: int = 0
    seconds: float = 0.0
    cpu: CpuWindow = field(default_factory=CpuWindow)
    results: list[Any] = field(default_factory=list)

    async def round(self, numbers: range, in_flight: int) -> None:
        """Run one workflow per number, ``in_flight`` at a time; add up wall time and CPU."""
        ids = [f"{self.id_prefix}{n:04d}" for n in numbers]
        seconds, cpu, results = await _measure(self.server, ids, in_flight, self.run_one)
        self.workflows += len(ids)
        self.seconds += seconds
        self.cpu.server_s += cpu.server_s
        self.cpu.python_s += cpu.python_s
        self.cpu.other_s += cpu.other_s
        self.results += results


@contextlib.asynccontextmanager
async def ladder_side(workflows: int, path: str, **worker_options: Any) -> AsyncIterator[Side]:
    """Serve incidents on a fresh server; check every outcome and fleet call on exit."""
    async with dev_server("ladder") as server:
        client = await connect(server.address)
        task_queue = f"bench-ladder-{uuid.uuid4().hex[:8]}"
        fleet = _fleet(path, workflows)
        pol = _policy(path, workflows)
        semaphore_id = f"bench-semaphore/{uuid.uuid4()}"
        worker = build_worker(
            client,
            fleet.activities(),
            task_queue,
            production=True,
            **{**WORKER_OPTIONS, **worker_options},
        )
        async with worker:
            # Calibration (and warm-up): one incident, counted on its own.
            handle = await _start_incident(client, task_queue, pol, semaphore_id, "warmup-0")
            result = await handle.result()
            if result.outcome != EXPECTED[path]:
                raise RuntimeError(f"calibration incident ended {result.outcome}: {result}")
            names = fleet.names()
            events, types = await _history_profile(client, handle.id)
            fleet.calls.clear()

            async def one(node: str) -> Outcome:
                h = await _start_incident(client, task_queue, pol, semaphore_id, node)
                return (await h.result()).outcome

            side = Side(
                server, one, "node-", types["ACTIVITY_TASK_SCHEDULED"], events, types, names
            )
            yield side
            wrong = Counter(o for o in side.results if o != EXPECTED[path])
            if wrong:
                raise RuntimeError(f"unexpected outcomes: {dict(wrong)}")
            if len(fleet.calls) != len(names) * side.workflows:
                raise RuntimeError(
                    f"fleet saw {len(fleet.calls)} calls, expected {len(names)} x {side.workflows}"
                )


@contextlib.asynccontextmanager
async def baseline_side(steps: int) -> AsyncIterator[Side]:
    """Serve the trivial workflow with ``steps`` sequential no-op activities on a fresh server."""
    async with dev_server("baseline") as server:
        client = await connect(server.address)
        task_queue = f"bench-baseline-{uuid.uuid4().hex[:8]}"
        worker = Worker(
            client,
            task_queue=task_queue,
            workflows=[BaselineWorkflow],
            activities=[noop_activity],
            **WORKER_OPTIONS,
        )

        async def one(workflow_id: str) -> int:
            handle = await client.start_workflow(
                BaselineWorkflow.run,
                steps,
                id=workflow_id,
                task_queue=task_queue,
                start_signal=GO_SIGNAL,
                start_signal_args=["evidence"],
            )
            return await handle.result()

        async with worker:
            await one("baseline/warmup")
            events, types = await _history_profile(client, "baseline/warmup")
            side = Side(server, one, "baseline/", steps, events, types)
            yield side
            if any(r != steps for r in side.results):
                raise RuntimeError("a baseline workflow did not run all its activities")


async def ladder_phase(
    workflows: int, in_flight: int, path: str, **worker_options: Any
) -> tuple[PhaseResult, int, list[str]]:
    """Run the incidents alone; return the result, activities per incident and their names."""
    async with ladder_side(workflows, path, **worker_options) as side:
        await side.round(range(workflows), in_flight)
    return _combined([side], in_flight), side.activities, side.names


def _phase_result(
    workflows: int,
    in_flight: int,
    activities: int,
    seconds: float,
    cpu: CpuWindow,
    events: int,
    types: Counter[str],
) -> PhaseResult:
    """One phase's measurements, the same way for the ladder and the baseline."""
    return PhaseResult(
        workflows=workflows,
        in_flight=in_flight,
        seconds=round(seconds, 2),
        workflows_per_s=round(workflows / seconds, 1),
        activities_per_s=round(workflows * activities / seconds, 1),
        server_cpu_s=round(cpu.server_s, 1),
        python_cpu_s=round(cpu.python_s, 1),
        other_cpu_s=round(cpu.other_s, 1),
        history_events_per_workflow=events,
        workflow_tasks_per_workflow=types["WORKFLOW_TASK_COMPLETED"],
        event_types=dict(sorted(types.items())),
    )


def _combined(sides: list[Side], in_flight: int) -> PhaseResult:
    """Rounds of one phase as one phase: wall time and CPU added up."""
    first = sides[0]
    cpu = CpuWindow(
        server_s=sum(side.cpu.server_s for side in sides),
        python_s=sum(side.cpu.python_s for side in sides),
        other_s=sum(side.cpu.other_s for side in sides),
    )
    return _phase_result(
        sum(side.workflows for side in sides),
        in_flight,
        first.activities,
        sum(side.seconds for side in sides),
        cpu,
        first.events,
        first.types,
    )


def _cpu(phase: PhaseResult) -> str:
    text = f"CPU: server {phase.server_cpu_s} s, python {phase.python_cpu_s} s"
    if phase.other_cpu_s > 0.1 * phase.seconds:
        text += f", other processes {phase.other_cpu_s} s (disturbed)"
    return text


async def run(
    *, quick: bool = False, workflows: int | None = None, in_flight: int = 100, path: str = "reboot"
) -> dict[str, Any]:
    """Run both phases; return the numbers (also printed)."""
    count = workflows or (50 if quick else 500)
    print(f"[ladder] {count} incidents, path {path}, {in_flight} in flight ...", flush=True)
    halves = (range(count // 2), range(count // 2, count))
    rounds: dict[str, list[Side]] = {"ladder": [], "baseline": []}
    activities = 0
    # Ladder, baseline, baseline, ladder: this host's speed drifts by tens of
    # percent within minutes, and in this order a steady drift falls on both.
    # Every round gets a fresh server, so no round pays for another's deferred
    # work (timeout timers firing, visibility writes).
    for kind, half in (
        ("ladder", halves[0]),
        ("baseline", halves[0]),
        ("baseline", halves[1]),
        ("ladder", halves[1]),
    ):
        side_cm = ladder_side(count, path) if kind == "ladder" else baseline_side(activities)
        async with side_cm as side:
            activities = side.activities
            await side.round(half, in_flight)
        rounds[kind].append(side)
    ladder = _combined(rounds["ladder"], in_flight)
    baseline = _combined(rounds["baseline"], in_flight)
    names = rounds["ladder"][0].names
    print(
        f"[ladder] ladder: {ladder.seconds:.2f} s ({ladder.workflows_per_s}/s), "
        f"{activities} activities and {ladder.history_events_per_workflow} history events "
        f"per incident; {_cpu(ladder)}",
        flush=True,
    )
    ratio = ladder.seconds / baseline.seconds
    cpu_ratio = (ladder.server_cpu_s + ladder.python_cpu_s) / (
        baseline.server_cpu_s + baseline.python_cpu_s
    )
    print(
        f"[ladder] baseline: {count} x {activities} no-op activities: "
        f"{baseline.seconds:.2f} s ({baseline.workflows_per_s}/s), "
        f"{baseline.history_events_per_workflow} history events per workflow; "
        f"{_cpu(baseline)}",
        flush=True,
    )
    print(
        f"[ladder] ratio ladder/baseline = {ratio:.2f} (target <= {TARGET_RATIO}); "
        f"CPU ratio (server + python) = {cpu_ratio:.2f}",
        flush=True,
    )
    return {
        "name": "ladder",
        "quick": quick,
        "path": path,
        "start": "signal-with-start; a new workflow starts when one finishes",
        "activities_per_incident": activities,
        "activity_sequence": names,
        "ladder": asdict(ladder),
        "baseline": asdict(baseline),
        "ratio": round(ratio, 2),
        "cpu_ratio": round(cpu_ratio, 2),
        "target_ratio": TARGET_RATIO,
        "ok": ratio <= TARGET_RATIO,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="50 workflows (smoke run)")
    parser.add_argument("--workflows", type=int, default=None)
    parser.add_argument("--in-flight", type=int, default=100)
    parser.add_argument("--path", choices=sorted(EXPECTED), default="reboot")
    args = parser.parse_args()
    asyncio.run(
        run(quick=args.quick, workflows=args.workflows, in_flight=args.in_flight, path=args.path)
    )


if __name__ == "__main__":
    main()
