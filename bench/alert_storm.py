"""Alert storm benchmark: the Alertmanager receiver vs. bare ``start_workflow`` calls.

One dev server, one receiver process (``remediate receiver``, as deployed: its
own process, one uvicorn worker, one Temporal client) and this process as the
load. Each round measures three sides, each on fresh node names:

* **bare**: ``--nodes`` (default 1,000) plain ``client.start_workflow`` calls of
  the node workflow with the input the receiver sends (cluster, node, the
  default policy), at most ``--in-flight`` (default 64) at a time. The target
  is measured against this side;
* **direct**: the calls the receiver makes, made from here: the same number of
  ``IncidentStarter.report`` calls (for a node with no incident, a plain
  ``start_workflow`` carrying the alert's evidence in its input), same
  concurrency. It separates what the starter costs Temporal from what the
  receiver adds;
* **receiver**: an alert storm for as many distinct nodes: each node's alert
  is posted ``1 + --duplicates`` times (default 10, so 10,000 alerts), shuffled,
  in Alertmanager webhook payloads of ``--batch`` alerts (default 100) over
  ``--connections`` concurrent HTTP connections (default 8). The receiver
  keeps at most ``--in-flight`` Temporal calls in flight, the same
  concurrency towards Temporal as the other sides.

No worker runs: the benchmark measures ingestion, not remediation. The full
run does three rounds, the order of the sides reversed every other round (so
a drift of the machine or the database weighs on all sides alike);
``--quick`` does one round of 200 nodes. Other engineers' processes share the
machine: ``other_cpu_s`` shows how much a phase was disturbed, and the ratio
is the median of the rounds' ratios.

Issue 23's size is ``--nodes 10000`` (``run_10k``, ``--only alert_storm_10k``
in ``bench.run_all``): 10,000 nodes x 10 alerts per round, target 0.9x the
bare start rate of the same run.

Measured: workflows started per second on each side (the receiver's rate
counts the 1,000 workflows over the wall time of posting all 10,000 alerts),
the ratio receiver / bare (target >= 0.7) and receiver / direct, alerts per
second, and CPU seconds of the server, the receiver, this process and the rest
of the machine. Checked: every node's workflow exists with exactly one run
(visibility, per workflow id), every response was 200, and the receiver
delivered each distinct alert once (the rest were answered as duplicates). A
post answered 503 (Temporal did not answer the receiver in time) is sent again
after a backoff, as Alertmanager does, at most ``POST_ATTEMPTS`` times; such
retries are counted (``receiver_outcomes.retried_posts``) and timed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import IO, Any

import httpx
from temporalio.client import Client

from bench.common import (
    CpuWindow,
    DevServer,
    bounded,
    connect,
    cpu_window,
    dev_server,
    free_port,
    poll_until,
    proc_cpu_seconds,
)
from gpu_remediation.ids import NODE_WORKFLOW_TYPE, node_workflow_id
from gpu_remediation.models import AlertEvidence
from gpu_remediation.policy_loader import load_policy
from gpu_remediation.workflow_models import NodeRemediationInput
from triggers.starter import IncidentStarter

TARGET_RATIO = 0.7
TARGET_RATIO_10K = 0.9
"""Issue 23: 10,000 nodes x 10 alerts at 0.9x the bare start rate of the same run."""
RECEIVER_CLUSTER = "storm"
BARE_CLUSTER = "bare"
DIRECT_CLUSTER = "direct"
SIDES = ("bare", "direct", "receiver")
POST_ATTEMPTS = 5
RETRY_DELAY_S = 1.0
TOKEN = "bench-" + uuid.uuid4().hex


@dataclass
class PhaseResult:
    """One side of one round."""

    side: str
    round: int
    workflows: int
    alerts: int
    seconds: float
    workflows_per_s: float
    alerts_per_s: float
    server_cpu_s: float
    python_cpu_s: float
    """This process, plus the receiver's in the receiver phases."""
    other_cpu_s: float
    receiver_cpu_s: float | None = None


def _phase(
    side: str,
    round_: int,
    workflows: int,
    alerts: int,
    seconds: float,
    cpu: CpuWindow,
    receiver_cpu: float | None = None,
) -> PhaseResult:
    return PhaseResult(
        side=side,
        round=round_,
        workflows=workflows,
        alerts=alerts,
        seconds=round(seconds, 2),
        workflows_per_s=round(workflows / seconds, 1),
        alerts_per_s=round(alerts / seconds, 1),
        server_cpu_s=round(cpu.server_s, 1),
        python_cpu_s=round(cpu.python_s, 1),
        other_cpu_s=round(cpu.other_s, 1),
        receiver_cpu_s=None if receiver_cpu is None else round(receiver_cpu, 1),
    )


@dataclass
class ReceiverProcess:
    """``remediate receiver`` in its own process, as deployed."""

    url: str
    process: subprocess.Popen[bytes]
    log: IO[bytes]

    async def wait_ready(self, http: httpx.AsyncClient) -> None:
        async def ready() -> bool:
            if self.process.poll() is not None:
                self.log.seek(0)
                err = self.log.read().decode(errors="replace")[-2000:]
                raise RuntimeError(f"receiver exited with {self.process.returncode}: {err}")
            try:
                return (await http.get(f"{self.url}/readyz")).status_code == 200
            except httpx.TransportError:
                return False

        await poll_until(ready, limit_s=60, interval=0.1)


@contextlib.contextmanager
def receiver_process(
    server: DevServer, task_queue: str, in_flight: int
) -> Iterator[ReceiverProcess]:
    """Run the receiver against ``server``; stop it on exit."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_")}
    env["GPU_REMEDIATION_RECEIVER_TOKEN"] = TOKEN
    args = [
        sys.executable, "-m", "cli.main", "receiver",
        "--port", str(port),
        "--address", server.address,
        "--cluster", RECEIVER_CLUSTER,
        "--task-queue", task_queue,
        "--max-in-flight", str(in_flight),
        "--log-level", "warning",
        "--no-access-log",
    ]  # fmt: skip
    # A file, not a pipe: a full pipe would block the receiver mid-storm.
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=log)
        try:
            yield ReceiverProcess(f"http://127.0.0.1:{port}", process, log)
        finally:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _alert(node: str, fingerprint: str, starts_at: str) -> dict[str, Any]:
    return {
        "status": "firing",
        "labels": {
            "alertname": "GpuXidError",
            "hostname": node,
            "xid": "79",
            "gpu": "3",
            "severity": "critical",
            "job": "dcgm-exporter",
        },
        "annotations": {"summary": f"Xid 79 on {node}: GPU fell off the bus"},
        "startsAt": starts_at,
        "endsAt": "0001-01-01T00:00:00Z",
        "generatorURL": "http://prometheus:9090/graph?g0.expr=DCGM_FI_DEV_XID_ERRORS",
        "fingerprint": fingerprint,
    }


def storm_payloads(nodes: list[str], copies: int, batch: int, seed: int) -> list[dict[str, Any]]:
    """Webhook bodies holding ``copies`` of each node's alert, shuffled, ``batch`` per body."""
    starts_at = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    alerts = [_alert(node, f"{i:016x}", starts_at) for i, node in enumerate(nodes)] * copies
    random.Random(seed).shuffle(alerts)
    return [
        {
            "version": "4",
            "groupKey": '{}:{alertname="GpuXidError"}',
            "truncatedAlerts": 0,
            "status": "firing",
            "receiver": "gpu-remediation",
            "groupLabels": {"alertname": "GpuXidError"},
            "commonLabels": {"alertname": "GpuXidError", "severity": "critical"},
            "commonAnnotations": {},
            "externalURL": "http://alertmanager:9093",
            "alerts": alerts[i : i + batch],
        }
        for i in range(0, len(alerts), batch)
    ]


async def bare_phase(
    client: Client,
    server: DevServer,
    nodes: list[str],
    task_queue: str,
    in_flight: int,
    round_: int,
    extra: list[int],
) -> PhaseResult:
    policy = load_policy()

    async def start(node: str) -> None:
        await client.start_workflow(
            NODE_WORKFLOW_TYPE,
            NodeRemediationInput(
                cluster=BARE_CLUSTER,
                node=node,
                policy=policy,
                semaphore_workflow_id="bench-storm/semaphore",
            ),
            id=node_workflow_id(BARE_CLUSTER, node),
            task_queue=task_queue,
        )

    with cpu_window(server, extra) as cpu:
        began = time.perf_counter()
        await bounded(nodes, in_flight, start)
        seconds = time.perf_counter() - began
    return _phase("bare", round_, len(nodes), len(nodes), seconds, cpu)


async def direct_phase(
    client: Client,
    server: DevServer,
    nodes: list[str],
    task_queue: str,
    in_flight: int,
    round_: int,
    extra: list[int],
) -> PhaseResult:
    starter = IncidentStarter(
        client, cluster=DIRECT_CLUSTER, policy=load_policy(), task_queue=task_queue
    )
    starts_at = datetime.now(UTC)

    async def report(node: str) -> None:
        evidence = AlertEvidence(
            observed_at=starts_at,
            source="alertmanager/gpu-remediation",
            labels=_alert(node, node, "")["labels"],
            fingerprint=node,
        )
        await starter.report(node, [evidence], report_id=f"alertmanager/{node}")

    with cpu_window(server, extra) as cpu:
        began = time.perf_counter()
        await bounded(nodes, in_flight, report)
        seconds = time.perf_counter() - began
    return _phase("direct", round_, len(nodes), len(nodes), seconds, cpu)


async def receiver_phase(
    http: httpx.AsyncClient,
    server: DevServer,
    receiver: ReceiverProcess,
    nodes: list[str],
    copies: int,
    batch: int,
    connections: int,
    round_: int,
) -> tuple[PhaseResult, Counter[str]]:
    payloads = storm_payloads(nodes, copies, batch, seed=round_)
    outcomes: Counter[str] = Counter()
    headers = {"Authorization": f"Bearer {TOKEN}"}

    async def post(body: dict[str, Any]) -> None:
        for attempt in range(1, POST_ATTEMPTS + 1):
            response = await http.post(f"{receiver.url}/v1/alerts", json=body, headers=headers)
            if response.status_code != 503 or attempt == POST_ATTEMPTS:
                break
            # 503: Temporal did not answer in time. Alertmanager sends the notification
            # again after a backoff; so does the storm (counted, and inside the timing).
            outcomes.update(retried_posts=1)
            await asyncio.sleep(RETRY_DELAY_S * 2 ** (attempt - 1))
        if response.status_code != 200:
            raise RuntimeError(f"receiver answered {response.status_code}: {response.text[:500]}")
        answer = response.json()
        outcomes.update(delivered=answer["delivered"], duplicate=answer["duplicates"])
        outcomes.update(unmapped=answer["unmapped"], unknown_node=answer["unknown_node"])

    receiver_cpu = proc_cpu_seconds(receiver.process.pid)
    with cpu_window(server, [receiver.process.pid]) as cpu:
        began = time.perf_counter()
        await bounded(payloads, connections, post)
        seconds = time.perf_counter() - began
    receiver_cpu = proc_cpu_seconds(receiver.process.pid) - receiver_cpu
    alerts = len(nodes) * copies
    phase = _phase("receiver", round_, len(nodes), alerts, seconds, cpu, receiver_cpu)
    return phase, outcomes


async def runs_per_workflow(client: Client, cluster: str, expected: int) -> Counter[str]:
    """Runs per node workflow id of ``cluster`` (waits until visibility shows them all)."""
    prefix = node_workflow_id(cluster, "n").removesuffix("n")
    counts: Counter[str] = Counter()

    async def all_visible() -> bool:
        counts.clear()
        async for execution in client.list_workflows(f"WorkflowType = '{NODE_WORKFLOW_TYPE}'"):
            if execution.id.startswith(prefix):
                counts[execution.id] += 1
        return len(counts) >= expected

    # Each poll lists every node workflow of the server (all sides, all rounds).
    await poll_until(all_visible, limit_s=max(60.0, expected / 50), interval=1.0)
    return counts


async def run(
    *,
    quick: bool = False,
    nodes: int | None = None,
    duplicates: int = 9,
    batch: int = 100,
    connections: int = 8,
    in_flight: int = 64,
    rounds: int | None = None,
    target_ratio: float = TARGET_RATIO,
    name: str = "alert_storm",
) -> dict[str, Any]:
    """Run the benchmark; return the numbers (also printed)."""
    label = name  # ``name`` is reused below for the sides
    count = nodes or (200 if quick else 1000)
    rounds = rounds or (1 if quick else 3)
    copies = 1 + duplicates
    print(
        f"[{label}] {count} nodes x {copies} alerts, batches of {batch}, "
        f"{connections} connections, {in_flight} Temporal calls in flight, {rounds} round(s) ...",
        flush=True,
    )
    phases: list[PhaseResult] = []
    outcomes: Counter[str] = Counter()
    async with dev_server("alert-storm") as server:
        client = await connect(server.address)
        task_queue = f"bench-storm-{uuid.uuid4().hex[:8]}"  # no worker polls it
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        with receiver_process(server, task_queue, in_flight) as receiver:
            async with httpx.AsyncClient(timeout=120, limits=limits) as http:
                await receiver.wait_ready(http)
                extra = [receiver.process.pid]

                async def side(name: str, round_: int, names: list[str]) -> PhaseResult:
                    if name == "bare":
                        return await bare_phase(
                            client, server, names, task_queue, in_flight, round_, extra
                        )
                    if name == "direct":
                        return await direct_phase(
                            client, server, names, task_queue, in_flight, round_, extra
                        )
                    phase, seen = await receiver_phase(
                        http, server, receiver, names, copies, batch, connections, round_
                    )
                    if round_:
                        outcomes.update(seen)
                    return phase

                # Warm-up: every side once (connections, imports, the first workflows).
                for name in SIDES:
                    await side(name, 0, [f"warm-{i}" for i in range(50)])
                for round_ in range(1, rounds + 1):
                    names = [f"r{round_}-gpu-{i:04d}" for i in range(count)]
                    for name in SIDES if round_ % 2 else tuple(reversed(SIDES)):
                        phases.append(await side(name, round_, names))
                        print(
                            f"[{label}] round {round_} {name}: "
                            f"{phases[-1].workflows_per_s} workflows/s "
                            f"(other processes: {phases[-1].other_cpu_s} CPU s)",
                            flush=True,
                        )
        runs = await runs_per_workflow(client, RECEIVER_CLUSTER, count * rounds)
        storm_runs = Counter({key: n for key, n in runs.items() if "/warm-" not in key})
    return _result(
        phases,
        outcomes,
        storm_runs,
        quick=quick,
        count=count,
        copies=copies,
        batch=batch,
        connections=connections,
        in_flight=in_flight,
        rounds=rounds,
        target_ratio=target_ratio,
        name=label,
    )


async def run_10k(*, quick: bool = False) -> dict[str, Any]:
    """Issue 23's size: 10,000 nodes x 10 alerts, target 0.9 (1,000 nodes, one round, quick)."""
    return await run(
        quick=quick,
        nodes=1000 if quick else 10_000,
        rounds=1 if quick else 3,
        target_ratio=TARGET_RATIO_10K,
        name="alert_storm_10k",
    )


def _rate(phases: list[PhaseResult], side: str) -> float:
    chosen = [p for p in phases if p.side == side]
    return sum(p.workflows for p in chosen) / sum(p.seconds for p in chosen)


def _result(
    phases: list[PhaseResult],
    outcomes: Counter[str],
    storm_runs: Counter[str],
    **settings: Any,
) -> dict[str, Any]:
    count, rounds = settings["count"], settings["rounds"]
    by_round = {
        round_: {p.side: p for p in phases if p.round == round_} for round_ in range(1, rounds + 1)
    }
    ratios = [r["receiver"].workflows_per_s / r["bare"].workflows_per_s for r in by_round.values()]
    direct_ratios = [
        r["receiver"].workflows_per_s / r["direct"].workflows_per_s for r in by_round.values()
    ]
    ratio = statistics.median(ratios)
    storm = [p for p in phases if p.side == "receiver"]
    alert_rate = sum(p.alerts for p in storm) / sum(p.seconds for p in storm)
    all_started = len(storm_runs) == count * rounds
    extra_runs = sum(1 for runs in storm_runs.values() if runs != 1)
    # A retried post's alerts may have been delivered by the attempt answered 503 (its
    # counts are lost) and be answered as duplicates on the retry.
    delivered_once = (
        outcomes["delivered"] == count * rounds
        if not outcomes["retried_posts"]
        else outcomes["delivered"] <= count * rounds
    )
    target = settings["target_ratio"]
    result = {
        "name": settings["name"],
        "quick": settings["quick"],
        "nodes": count,
        "alerts_per_node": settings["copies"],
        "alerts": count * settings["copies"],
        "batch": settings["batch"],
        "connections": settings["connections"],
        "in_flight": settings["in_flight"],
        "rounds": rounds,
        "phases": [asdict(p) for p in phases],
        "bare_workflows_per_s": round(_rate(phases, "bare"), 1),
        "direct_workflows_per_s": round(_rate(phases, "direct"), 1),
        "receiver_workflows_per_s": round(_rate(phases, "receiver"), 1),
        "receiver_alerts_per_s": round(alert_rate, 1),
        "round_ratios": [round(r, 2) for r in ratios],
        "ratio": round(ratio, 2),
        "ratio_to_direct": round(statistics.median(direct_ratios), 2),
        "target_ratio": target,
        "receiver_outcomes": dict(outcomes),
        "workflows_started": len(storm_runs),
        "workflows_with_more_than_one_run": extra_runs,
        "ok": ratio >= target and all_started and extra_runs == 0 and delivered_once,
    }
    print(
        f"[{result['name']}] bare {result['bare_workflows_per_s']} starts/s, direct "
        f"{result['direct_workflows_per_s']} starter reports/s, receiver "
        f"{result['receiver_workflows_per_s']} workflows/s ({alert_rate:.0f} alerts/s): "
        f"ratio {ratio:.2f} (rounds {result['round_ratios']}, target >= {target}); "
        f"{len(storm_runs)} workflows, {extra_runs} with more than one run; "
        f"outcomes {dict(outcomes)}",
        flush=True,
    )
    return result


def summary_rows(r: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """Rows of ``bench.run_all``'s summary table."""
    rounds = ", ".join(f"{x:.2f}" for x in r["round_ratios"])
    name = r["name"]
    return [
        (
            name,
            "workflows/s: bare start / direct starter / receiver",
            f"{r['bare_workflows_per_s']:.0f} / {r['direct_workflows_per_s']:.0f} / "
            f"{r['receiver_workflows_per_s']:.0f}",
            "",
        ),
        (
            name,
            f"receiver / bare, {r['nodes']} nodes x {r['alerts_per_node']} alerts (median)",
            f"{r['ratio']:.2f} ({rounds})",
            f">= {r['target_ratio']}",
        ),
        (name, "receiver alerts/s", f"{r['receiver_alerts_per_s']:.0f}", ""),
        (
            name,
            "workflows started / with more than one run",
            f"{r['workflows_started']} / {r['workflows_with_more_than_one_run']}",
            f"{r['nodes'] * r['rounds']} / 0",
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--nodes", type=int)
    parser.add_argument("--duplicates", type=int, default=9)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--rounds", type=int)
    parser.add_argument(
        "--target-ratio",
        type=float,
        default=None,
        help=f"receiver / bare (default {TARGET_RATIO}; {TARGET_RATIO_10K} from 10,000 nodes)",
    )
    args = parser.parse_args()
    target = args.target_ratio
    if target is None:
        target = TARGET_RATIO_10K if (args.nodes or 0) >= 10_000 else TARGET_RATIO
    asyncio.run(
        run(
            quick=args.quick,
            nodes=args.nodes,
            duplicates=args.duplicates,
            batch=args.batch,
            connections=args.connections,
            in_flight=args.in_flight,
            rounds=args.rounds,
            target_ratio=target,
            name="alert_storm_10k" if (args.nodes or 0) >= 10_000 else "alert_storm",
        )
    )


if __name__ == "__main__":
    main()
