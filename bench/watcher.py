"""Watcher benchmark: the node-condition watcher over a large cluster, idle and under churn.

Three processes besides the dev server, so each one's CPU and memory are its own:

* the **emulator** (``python -m bench.watcher serve N``): the Kubernetes API
  emulator with N GPU nodes (``nvidia.com/gpu.present=true``, Ready). On
  command it churns the nodes' ``GpuHealthProblem`` condition at a fixed rate
  (:func:`churn_plan`: each change either turns a fresh node's condition True,
  with an Xid 79 message as the node agent writes it, or turns back False the
  node that went True ``--hold`` seconds earlier) and records when each True
  was committed;
* the **watcher** (``python -m bench.watcher watch ...``): the production
  :class:`~triggers.watcher.NodeConditionWatcher`, wired as ``demo/stack.py``
  wires it (``worker.kube_api_client``, ``IncidentStarter`` with the default
  policy, tick 0.25 s), reporting to a task queue no worker polls: the
  benchmark measures the trigger path, not remediation;
* this process: starts them, samples the watcher's CPU and RSS from /proc.

Measured: the watcher's first list of N nodes; its CPU per node and RSS in a
steady state with no change (``--idle`` seconds); its CPU and RSS while the
condition churns at ``--rate`` changes/s for ``--churn`` seconds; and, for
every node that went True, the time from the commit of the condition to the
evidence reaching its incident (the server's event time of the start that
carried it in its input, or of the first ``add_evidence`` signal):
p50 and p99. A node whose incident has no evidence once the watcher has
drained is counted as lost. The default policy's ``GpuHealthProblem`` rule
has no grace, so the latency is the watcher's own.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from bench.common import (
    bounded,
    connect,
    cpu_window,
    dev_server,
    poll_until,
    proc_cpu_seconds,
    rss_mb,
)
from gpu_remediation.evidence_history import received_reports
from gpu_remediation.ids import node_workflow_id

ROOT = Path(__file__).resolve().parent.parent
GPU_LABELS = {"nvidia.com/gpu.present": "true"}
CONDITION = "GpuHealthProblem"
XID_MESSAGE = "Xid 79 on GPU 3 (0000:3b:00.0): GPU has fallen off the bus"
CHURN_RATE = 100.0
HOLD_S = 2.0
IDLE_S = 30.0
CHURN_S = 60.0
SETTLE_S = 5.0
PROBE_REPORTS = 200
TICK_S = 0.25
"""The watcher's tick in ``demo/stack.py`` (``StackOptions.watcher_tick``)."""


def node_name(index: int) -> str:
    """The emulator's ``index``-th node."""
    return f"gpu-{index:05d}"


# ------------------------------------------------------------------ the churn


@dataclass(frozen=True)
class ChurnOp:
    """One condition change: at ``at`` seconds from the start, node ``index`` to ``status``."""

    at: float
    index: int
    status: str


def churn_plan(rate: float, seconds: float, hold_s: float, nodes: int) -> list[ChurnOp]:
    """``rate`` changes per second for ``seconds``: Trues on fresh nodes, each back False later.

    Changes alternate between a fresh node turning True and the node that
    turned True ``hold_s`` earlier turning False (the first nodes, which turn
    True before any turns back, hold about half as long).

    Raises:
        ValueError: The plan needs more than ``nodes`` nodes.
    """
    total = int(rate * seconds)
    hold = max(1, round(hold_s * rate / 2))  # Trues are half of the changes
    kinds: list[tuple[int, str]] = []
    fresh = 0
    while len(kinds) < total:
        kinds.append((fresh, "True"))
        if fresh >= hold and len(kinds) < total:
            kinds.append((fresh - hold, "False"))
        fresh += 1
    if fresh > nodes:
        raise ValueError(f"{rate}/s for {seconds} s needs {fresh} nodes; the cluster has {nodes}")
    return [ChurnOp(i / rate, index, status) for i, (index, status) in enumerate(kinds)]


def run_churn(store: Any, plan: list[ChurnOp]) -> dict[str, Any]:
    """Apply ``plan`` to ``store`` on the wall clock; when each True was committed (epoch s)."""
    trues: dict[str, float] = {}
    behind = 0.0
    started = time.monotonic()
    for op in plan:
        delay = started + op.at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        else:
            behind = max(behind, -delay)
        name = node_name(op.index)
        message = XID_MESSAGE if op.status == "True" else ""
        reason = "GpuHealthCheckFailed" if op.status == "True" else "GpuHealthy"
        store.set_node_condition(name, CONDITION, op.status, reason=reason, message=message)
        if op.status == "True":
            trues[name] = time.time()
    seconds = time.monotonic() - started
    return {
        "changes": len(plan),
        "seconds": round(seconds, 2),
        "rate": round(len(plan) / seconds, 1) if seconds else 0.0,
        "most_behind_s": round(behind, 3),
        "trues": trues,
    }


def serve(nodes: int) -> None:
    """The emulator with ``nodes`` GPU nodes; commands on stdin: ``CHURN rate s hold``, ``STOP``."""
    from simulator.kube_api import KubeApiServer, KubeStore

    store = KubeStore()
    for index in range(nodes):
        store.put_node(node_name(index), labels=GPU_LABELS)
    with KubeApiServer(store) as server:
        print(f"READY {server.url}", flush=True)
        for line in sys.stdin:
            words = line.split()
            if not words or words[0] == "STOP":
                break
            if words[0] == "CHURN":
                rate, seconds, hold = map(float, words[1:4])
                done = run_churn(store, churn_plan(rate, seconds, hold, nodes))
                print(f"CHURNED {json.dumps(done, separators=(',', ':'))}", flush=True)
    store.close()


# ------------------------------------------------------------------ the watcher


async def watch(url: str, address: str, cluster: str, task_queue: str, tick: float) -> None:
    """Run the production watcher against ``url`` until SIGTERM; print ``LISTED`` after its list."""
    from gpu_remediation.policy_loader import load_policy
    from gpu_remediation.settings import Settings
    from triggers.starter import IncidentStarter
    from triggers.watcher import NodeConditionWatcher
    from worker import kube_api_client

    client = await connect(address)
    starter = IncidentStarter(
        client,
        cluster=cluster,
        policy=load_policy(),
        task_queue=task_queue,
        semaphore_workflow_id="bench-watcher/semaphore",
    )
    api = kube_api_client(Settings(kube_api_url=url))
    watcher = NodeConditionWatcher(api, starter, client, tick_interval=tick)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    started = time.perf_counter()
    task = asyncio.create_task(watcher.run(stop))

    async def listed() -> bool:
        if task.done():
            task.result()  # the watcher failed: raise its error
        return watcher.source.lists >= 1

    await poll_until(listed, limit_s=600, interval=0.05)
    print(f"LISTED {time.perf_counter() - started:.3f}", flush=True)
    await task
    print(f"UNDELIVERED {watcher.pending}", flush=True)
    api.close()


# ------------------------------------------------------------------ the parent


@dataclass
class Child:
    """A child process with line-based stdout and a stderr log file."""

    process: subprocess.Popen[str]
    log: IO[bytes]

    async def expect(self, prefix: str, limit_s: float) -> str:
        """The next stdout line, which must start with ``prefix``; the rest of it."""
        assert self.process.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(self.process.stdout.readline), limit_s)
        if not line.startswith(prefix):
            self.log.seek(0)
            err = self.log.read().decode(errors="replace")[-2000:]
            raise RuntimeError(
                f"expected {prefix!r}, got {line!r} (rc {self.process.poll()}) {err}"
            )
        return line.removeprefix(prefix).strip()

    def send(self, line: str) -> None:
        """Write one command line to the child's stdin."""
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()


@contextlib.contextmanager
def child(*args: str) -> Iterator[Child]:
    """``python -m bench.watcher ARGS``; terminated (then killed) on exit."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_")}
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "bench.watcher", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,  # a file: a full pipe would block the child
            text=True,
            cwd=ROOT,
            env=env,
        )
        try:
            yield Child(process, log)
        finally:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


@dataclass
class Usage:
    """CPU seconds and highest RSS of a process over a window."""

    cpu_s: float = 0.0
    rss_peak_mb: float = 0.0
    rss_end_mb: float = 0.0


@contextlib.asynccontextmanager
async def sampled(pid: int) -> Any:
    """Measure ``pid``'s CPU over the block and sample its RSS every 0.2 s."""
    usage = Usage()
    stop = threading.Event()

    async def loop() -> None:
        while not stop.is_set():
            usage.rss_end_mb = rss_mb(pid)[0]
            usage.rss_peak_mb = max(usage.rss_peak_mb, usage.rss_end_mb)
            await asyncio.sleep(0.2)

    cpu0 = proc_cpu_seconds(pid)
    task = asyncio.create_task(loop())
    try:
        yield usage
    finally:
        stop.set()
        await task
        usage.cpu_s = proc_cpu_seconds(pid) - cpu0


async def first_evidence_at(client: Client, cluster: str, node: str) -> datetime | None:
    """When the node's incident took its first evidence (None: not yet).

    That is its start, when the start carried the report in its input
    (``IncidentStarter`` does so for a node with no open incident), else its
    first ``add_evidence`` signal.
    """
    handle = client.get_workflow_handle(node_workflow_id(cluster, node))
    try:
        history = await handle.fetch_history()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    reports = received_reports(history.events)
    return reports[0][1] if reports else None


def by_tenth(values: list[float]) -> list[float]:
    """Median of each tenth of ``values`` (in their order): a backlog shows as a rising line."""
    if len(values) < 10:
        return []
    size = len(values) / 10
    return [
        round(statistics.median(values[round(i * size) : round((i + 1) * size)]), 3)
        for i in range(10)
    ]


def percentiles(values: list[float]) -> dict[str, float]:
    """p50, p99 and max of ``values`` (seconds, rounded to ms); empty -> empty."""
    if not values:
        return {}
    ordered = sorted(values)
    if len(ordered) == 1:
        p50 = p99 = ordered[0]
    else:
        cuts = statistics.quantiles(ordered, n=100, method="inclusive")
        p50, p99 = cuts[49], cuts[98]
    return {"p50_s": round(p50, 3), "p99_s": round(p99, 3), "max_s": round(ordered[-1], 3)}


async def latencies(
    client: Client, cluster: str, trues: dict[str, float], drain_s: float
) -> tuple[list[float], list[str]]:
    """Per True node, evidence time minus commit time; and the nodes with no evidence."""
    # Reports are delivered in order: once the last True's evidence is in, all are.
    last = max(trues, key=trues.__getitem__)

    async def drained() -> bool:
        return await first_evidence_at(client, cluster, last) is not None

    with contextlib.suppress(TimeoutError):
        await poll_until(drained, limit_s=drain_s, interval=0.5)
    names = sorted(trues, key=trues.__getitem__)  # in commit order
    seen = await bounded(names, 16, lambda n: first_evidence_at(client, cluster, n))
    out: list[float] = []
    lost: list[str] = []
    for name, at in zip(names, seen, strict=True):
        if at is None:
            lost.append(name)
        else:
            out.append(at.timestamp() - trues[name])
    return out, lost


async def sequential_reports(client: Client, task_queue: str, count: int) -> list[float]:
    """Seconds each of ``count`` reports took, one after the other, as the watcher sends them.

    The watcher delivers its outbox one report at a time, so 1 / this round
    trip bounds how many condition changes per second it can pass on.
    """
    from gpu_remediation.models import ConditionEvidence
    from gpu_remediation.policy_loader import load_policy
    from triggers.starter import IncidentStarter

    starter = IncidentStarter(
        client, cluster=f"probe{uuid.uuid4().hex[:6]}", policy=load_policy(), task_queue=task_queue
    )
    took: list[float] = []
    for index in range(count):
        evidence = ConditionEvidence(
            observed_at=datetime.now(UTC),
            source="bench-watcher-probe",
            type=CONDITION,
            status="True",
            reason="GpuHealthCheckFailed",
            message=XID_MESSAGE,
        )
        started = time.perf_counter()
        await starter.report(node_name(index), [evidence], report_id=f"probe/{index}")
        took.append(time.perf_counter() - started)
    return took


async def run(
    *,
    quick: bool = False,
    nodes: int | None = None,
    rate: float = CHURN_RATE,
    churn_s: float | None = None,
    idle_s: float | None = None,
    hold_s: float = HOLD_S,
    tick: float = TICK_S,
    name: str = "watcher",
) -> dict[str, Any]:
    """Run the benchmark; return the numbers (also printed)."""
    count = nodes or (1000 if quick else 10_000)
    churn_s = churn_s or (10.0 if quick else CHURN_S)
    idle_s = idle_s or (10.0 if quick else IDLE_S)
    churn_plan(rate, churn_s, hold_s, count)  # fails early when the cluster is too small
    cluster = f"wb{uuid.uuid4().hex[:8]}"
    task_queue = f"bench-watcher-{uuid.uuid4().hex[:8]}"  # no worker polls it
    print(
        f"[{name}] {count} nodes; {idle_s:g} s idle, then {rate:g} condition changes/s for "
        f"{churn_s:g} s ...",
        flush=True,
    )
    async with dev_server("watcher") as server:
        client = await connect(server.address)
        with child("serve", str(count)) as emu:
            url = await emu.expect("READY ", limit_s=120 + count / 20)
            emulator_idle_mb = rss_mb(emu.process.pid)[0]
            args = ["watch", url, server.address, cluster, task_queue, "--tick", str(tick)]
            with child(*args) as watcher:
                pid = watcher.process.pid
                list_s = float(await watcher.expect("LISTED ", limit_s=120 + count / 50))
                await asyncio.sleep(SETTLE_S)
                async with sampled(pid) as idle:
                    await asyncio.sleep(idle_s)
                emu.send(f"CHURN {rate} {churn_s} {hold_s}")
                emu_cpu0 = proc_cpu_seconds(emu.process.pid)
                with cpu_window(server, [pid, emu.process.pid]) as window:
                    async with sampled(pid) as busy:
                        churned = json.loads(await emu.expect("CHURNED ", limit_s=churn_s * 3 + 60))
                emulator_cpu_s = proc_cpu_seconds(emu.process.pid) - emu_cpu0
                trues: dict[str, float] = churned.pop("trues")
                lags, lost = await latencies(client, cluster, trues, drain_s=120 + churn_s)
                watcher.process.send_signal(signal.SIGTERM)
                undelivered = int(await watcher.expect("UNDELIVERED ", limit_s=60))
            emu.send("STOP")
        # After the churn, on the same server: what one report costs when sent alone.
        probe = await sequential_reports(client, task_queue, PROBE_REPORTS)
    idle_cpu_per_node_us = idle.cpu_s / idle_s / count * 1e6
    result = {
        "name": name,
        "quick": quick,
        "nodes": count,
        "tick_s": tick,
        "first_list_s": round(list_s, 2),
        "idle_s": idle_s,
        "idle_cpu_s": round(idle.cpu_s, 2),
        "idle_cpu_cores": round(idle.cpu_s / idle_s, 4),
        "idle_cpu_us_per_node_s": round(idle_cpu_per_node_us, 3),
        "idle_rss_mb": round(idle.rss_peak_mb, 1),
        "churn": churned,
        "churn_target_rate": rate,
        "churn_cpu_cores": round(busy.cpu_s / churned["seconds"], 3),
        "churn_rss_mb": round(busy.rss_peak_mb, 1),
        "emulator_idle_rss_mb": round(emulator_idle_mb, 1),
        "emulator_churn_cpu_cores": round(emulator_cpu_s / churned["seconds"], 3),
        "server_churn_cpu_cores": round(window.server_s / churned["seconds"], 3),
        # CPU of unrelated processes meanwhile: when large, the figures are disturbed.
        "other_churn_cpu_s": round(window.other_s, 1),
        "trues": len(trues),
        "latency": percentiles(lags),
        "latency_median_by_tenth_s": by_tenth(lags),
        "lost": len(lost),
        "lost_nodes": lost[:20],
        "undelivered_at_stop": undelivered,
        "sequential_report_ms": round(statistics.median(probe) * 1000, 1),
        "sequential_reports_per_s": round(len(probe) / sum(probe), 1),
        "ok": not lost and len(lags) == len(trues),
    }
    lat = result["latency"]
    print(
        f"[{name}] first list {list_s:.2f} s; idle: {result['idle_cpu_cores'] * 100:.2f}% of a "
        f"core ({idle_cpu_per_node_us:.2f} CPU-us per node per s), RSS {idle.rss_peak_mb:.0f} MiB; "
        f"churn {churned['rate']}/s (asked {rate:g}): {result['churn_cpu_cores'] * 100:.0f}% of a "
        f"core, RSS {busy.rss_peak_mb:.0f} MiB "
        f"(server {result['server_churn_cpu_cores'] * 100:.0f}%, other processes "
        f"{window.other_s:.0f} CPU-s); condition True -> evidence p50 "
        f"{lat.get('p50_s')} s, p99 {lat.get('p99_s')} s, max {lat.get('max_s')} s over "
        f"{len(lags)} nodes (median by tenth of the churn: {result['latency_median_by_tenth_s']}); "
        f"lost {len(lost)}; one report at a time: {result['sequential_report_ms']} ms "
        f"(median), {result['sequential_reports_per_s']}/s",
        flush=True,
    )
    return result


async def run_10k(*, quick: bool = False) -> dict[str, Any]:
    """Issue 23's size: 10,000 nodes, 100 changes/s (1,000 nodes and 10 s with ``quick``)."""
    return await run(quick=quick, name="watcher_10k")


def summary_rows(r: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """Rows of ``bench.run_all``'s summary table."""
    name, n, lat = r["name"], r["nodes"], r["latency"]
    return [
        (name, f"first list of {n} nodes", f"{r['first_list_s']:.1f} s", ""),
        (
            name,
            f"idle CPU, {n} nodes (per node)",
            f"{r['idle_cpu_cores'] * 100:.2f}% core ({r['idle_cpu_us_per_node_s']:.2f} us/s)",
            "",
        ),
        (
            name,
            f"RSS idle / under churn, {n} nodes",
            f"{r['idle_rss_mb']:.0f} / {r['churn_rss_mb']:.0f} MiB",
            "",
        ),
        (
            name,
            f"churn {r['churn']['rate']:.0f} changes/s: CPU",
            f"{r['churn_cpu_cores'] * 100:.0f}% core",
            f"{r['churn_target_rate']:g}/s",
        ),
        (
            name,
            f"condition True -> evidence p50 / p99 ({r['trues']} nodes)",
            f"{lat.get('p50_s', float('nan')):.2f} / {lat.get('p99_s', float('nan')):.2f} s",
            "measured",
        ),
        (name, "True conditions with no evidence", str(r["lost"]), "0"),
        (
            name,
            "one report at a time (signal-with-start, median; rate)",
            f"{r['sequential_report_ms']:.0f} ms; {r['sequential_reports_per_s']:.0f}/s",
            "",
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode")
    serve_parser = sub.add_parser("serve", help="(internal) the emulator")
    serve_parser.add_argument("nodes", type=int)
    watch_parser = sub.add_parser("watch", help="(internal) the watcher")
    for arg in ("url", "address", "cluster", "task_queue"):
        watch_parser.add_argument(arg)
    watch_parser.add_argument("--tick", type=float, default=TICK_S)
    parser.add_argument("--quick", action="store_true", help="1,000 nodes, 10 s (smoke run)")
    parser.add_argument("--nodes", type=int, help="cluster size (default 10,000)")
    parser.add_argument("--rate", type=float, default=CHURN_RATE, help="condition changes/s")
    parser.add_argument("--churn", type=float, help=f"seconds of churn (default {CHURN_S:g})")
    parser.add_argument("--idle", type=float, help=f"seconds idle (default {IDLE_S:g})")
    parser.add_argument("--hold", type=float, default=HOLD_S, help="seconds a node stays True")
    parser.add_argument("--tick", type=float, default=TICK_S, help="the watcher's tick")
    args = parser.parse_args()
    if args.mode == "serve":
        serve(args.nodes)
        return
    if args.mode == "watch":
        asyncio.run(watch(args.url, args.address, args.cluster, args.task_queue, args.tick))
        return
    asyncio.run(
        run(
            quick=args.quick,
            nodes=args.nodes,
            rate=args.rate,
            churn_s=args.churn,
            idle_s=args.idle,
            hold_s=args.hold,
            tick=args.tick,
        )
    )


if __name__ == "__main__":
    main()
