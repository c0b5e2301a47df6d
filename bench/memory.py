"""Memory benchmark: worker RSS with many open, cached node workflows.

A worker runs in its own process (``bench.memory_worker``: the real
``build_worker`` wiring, FakeFleet activities, ``max_cached_workflows`` 2000 so
no incident is evicted). ``--workflows`` incidents (default 1,000) are started
with Xid 48 and a policy whose ``gpu_reset`` rung requires approval: each
quarantines its node, then waits for an operator's approval (24 h timeout), so
it stays open and in the worker's cache. Once every incident's ``state`` query
reports that it waits for approval, the worker's VmRSS is sampled from
/proc/<pid>/status for a few seconds (the highest sample is reported) and
compared with the RSS of the same worker before any workflow ran.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.client import WorkflowQueryFailedError
from temporalio.service import RPCError

from bench.common import bounded, connect, dev_server, rss_mb
from gpu_remediation.ids import Queries, Signals, node_workflow_id
from gpu_remediation.models import EvidenceReport, Rung
from gpu_remediation.workflow_models import NodeRemediationInput, NodeRemediationState
from tests.workflows.node_support import policy, with_rung, xid
from workflows.node_remediation import NodeRemediationWorkflow

TARGET_MB = 500.0
CLUSTER = "bench"
MAX_CACHED = 2000
READY_TIMEOUT_S = 60.0
OPEN_TIMEOUT_S = 300.0
SETTLE_S = 3.0
ROOT = Path(__file__).resolve().parent.parent


def _spawn_worker(address: str, task_queue: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "bench.memory_worker", address, task_queue, str(MAX_CACHED)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )


async def _start_worker(address: str, task_queue: str) -> subprocess.Popen[str]:
    process = _spawn_worker(address, task_queue)
    assert process.stdout is not None
    line = await asyncio.wait_for(asyncio.to_thread(process.stdout.readline), READY_TIMEOUT_S)
    if line.strip() != "READY":
        process.kill()
        raise RuntimeError(f"worker did not start (said {line!r}, rc {process.poll()})")
    return process


def _stop_worker(process: subprocess.Popen[str]) -> None:
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=40)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


async def _sample_rss(pid: int, seconds: float) -> tuple[float, float]:
    """Highest VmRSS over ``seconds`` and the final VmHWM, in MiB."""
    highest = hwm = 0.0
    deadline = time.monotonic() + seconds
    while True:
        rss, hwm = rss_mb(pid)
        highest = max(highest, rss)
        if time.monotonic() >= deadline:
            return highest, hwm
        await asyncio.sleep(0.2)


async def run(*, quick: bool = False, workflows: int | None = None) -> dict[str, Any]:
    """Run the benchmark; return the numbers (also printed)."""
    count = workflows or (100 if quick else 1000)
    print(f"[memory] {count} open incidents waiting for approval ...", flush=True)
    pol = with_rung(policy(), Rung.GPU_RESET, requires_approval=True)
    async with dev_server("memory") as server:
        client = await connect(server.address)
        task_queue = f"bench-memory-{uuid.uuid4().hex[:8]}"
        worker = await _start_worker(server.address, task_queue)
        try:
            idle_mb, _ = await _sample_rss(worker.pid, SETTLE_S)

            async def start(node: str) -> None:
                await client.start_workflow(
                    NodeRemediationWorkflow.run,
                    NodeRemediationInput(cluster=CLUSTER, node=node, policy=pol),
                    id=node_workflow_id(CLUSTER, node),
                    task_queue=task_queue,
                    start_signal=Signals.EVIDENCE,
                    start_signal_args=[EvidenceReport(node=node, evidence=[xid(48, gpu=1)])],
                )

            async def waiting(node: str) -> bool:
                handle = client.get_workflow_handle(node_workflow_id(CLUSTER, node))
                try:
                    state = await handle.query(
                        Queries.STATE,
                        result_type=NodeRemediationState,
                        rpc_timeout=timedelta(seconds=30),
                    )
                except (RPCError, WorkflowQueryFailedError):
                    # A query waits behind the backlog of workflow tasks and may
                    # time out while 1,000 incidents are starting: ask again later.
                    return False
                return (state.waiting_for or "").startswith("approval")

            nodes = [f"node-{i:04d}" for i in range(count)]
            started = time.perf_counter()
            await bounded(nodes, 100, start)
            pending = nodes
            while pending:
                if time.perf_counter() - started > OPEN_TIMEOUT_S:
                    raise RuntimeError(f"{len(pending)} incidents never reached approval")
                flags = await bounded(pending, 20, waiting)
                pending = [n for n, ok in zip(pending, flags, strict=True) if not ok]
                if pending:
                    await asyncio.sleep(1.0)
            open_s = time.perf_counter() - started
            loaded_mb, hwm_mb = await _sample_rss(worker.pid, SETTLE_S)
        finally:
            with contextlib.suppress(Exception):
                _stop_worker(worker)
    per_workflow_kb = (loaded_mb - idle_mb) * 1024 / count
    ok = loaded_mb < TARGET_MB
    print(
        f"[memory] worker RSS {loaded_mb:.0f} MiB with {count} open incidents "
        f"(target < {TARGET_MB:g}), {idle_mb:.0f} MiB idle, peak {hwm_mb:.0f} MiB; "
        f"{per_workflow_kb:.0f} KiB per incident; all open after {open_s:.1f} s",
        flush=True,
    )
    return {
        "name": "memory",
        "quick": quick,
        "workflows": count,
        "max_cached_workflows": MAX_CACHED,
        "rss_idle_mb": round(idle_mb, 1),
        "rss_loaded_mb": round(loaded_mb, 1),
        "rss_peak_mb": round(hwm_mb, 1),
        "per_workflow_kb": round(per_workflow_kb, 1),
        "seconds_to_open_all": round(open_s, 1),
        "target_mb": TARGET_MB,
        "ok": ok,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100 workflows (smoke run)")
    parser.add_argument("--workflows", type=int, default=None)
    args = parser.parse_args()
    asyncio.run(run(quick=args.quick, workflows=args.workflows))


if __name__ == "__main__":
    main()
