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
starts when one finishes. Each phase gets a fresh dev server (so the second
phase does not run on a database the first one filled) and a warm-up workflow
before the clock starts. Wall time is from the first start to the last result.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from collections import Counter
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


async def ladder_phase(
    workflows: int, in_flight: int, path: str, **worker_options: Any
) -> tuple[PhaseResult, int, list[str]]:
    """Run the incidents; return the result, activities per incident and their names."""
    async with dev_server("ladder") as server:
        client = await connect(server.address)
        task_queue = f"bench-ladder-{uuid.uuid4().hex[:8]}"
        fleet = _fleet(path, workflows)
        pol = _policy(path, workflows)
        semaphore_id = f"bench-semaphore/{uuid.uuid4()}"
        worker = build_worker(
            client, fleet.activities(), task_queue, **{**WORKER_OPTIONS, **worker_options}
        )
        async with worker:
            # Calibration (and warm-up): one incident, counted on its own.
            handle = await _start_incident(client, task_queue, pol, semaphore_id, "warmup-0")
            result = await handle.result()
            if result.outcome != EXPECTED[path]:
                raise RuntimeError(f"calibration incident ended {result.outcome}: {result}")
            names = fleet.names()
            events, types = await _history_profile(client, handle.id)
            activities = types["ACTIVITY_TASK_SCHEDULED"]
            fleet.calls.clear()

            async def one(node: str) -> Outcome:
                h = await _start_incident(client, task_queue, pol, semaphore_id, node)
                return (await h.result()).outcome

            nodes = [f"node-{i:04d}" for i in range(workflows)]
            seconds, cpu, outcomes = await _measure(server, nodes, in_flight, one)
            wrong = Counter(o for o in outcomes if o != EXPECTED[path])
            if wrong:
                raise RuntimeError(f"unexpected outcomes: {dict(wrong)}")
            if len(fleet.calls) != len(names) * workflows:
                raise RuntimeError(
                    f"fleet saw {len(fleet.calls)} calls, expected {len(names)} x {workflows}"
                )
    phase = _phase_result(workflows, in_flight, activities, seconds, cpu, events, types)
    return phase, activities, names


async def baseline_phase(workflows: int, in_flight: int, steps: int) -> PhaseResult:
    """Run the trivial workflow with ``steps`` sequential no-op activities."""
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
            ids = [f"baseline/{i:04d}" for i in range(workflows)]
            seconds, cpu, results = await _measure(server, ids, in_flight, one)
            if any(r != steps for r in results):
                raise RuntimeError("a baseline workflow did not run all its activities")
    return _phase_result(workflows, in_flight, steps, seconds, cpu, events, types)


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
    ladder, activities, names = await ladder_phase(count, in_flight, path)
    print(
        f"[ladder] ladder: {ladder.seconds:.2f} s ({ladder.workflows_per_s}/s), "
        f"{activities} activities and {ladder.history_events_per_workflow} history events "
        f"per incident; {_cpu(ladder)}",
        flush=True,
    )
    print(f"[ladder] baseline: {count} x {activities} no-op activities ...", flush=True)
    baseline = await baseline_phase(count, in_flight, activities)
    ratio = ladder.seconds / baseline.seconds
    cpu_ratio = (ladder.server_cpu_s + ladder.python_cpu_s) / (
        baseline.server_cpu_s + baseline.python_cpu_s
    )
    print(
        f"[ladder] baseline: {baseline.seconds:.2f} s ({baseline.workflows_per_s}/s), "
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
