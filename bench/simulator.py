"""Simulator benchmark: RSS of a 2,000-node fleet while clients list and watch it.

The fleet runs in its own process (``python -m bench.simulator serve N``: two
pools, training jobs on 90% of the nodes, the Llama 3 fault mix x100 so the
hardware keeps changing, time factor 600), so its RSS is the simulator's
alone: the Kubernetes API emulator, moto with N EC2 instances, the model.
Once it is up, this process lists every node and pod over HTTP with the
official client (timed) while three watches follow nodes and pods, for
``LOAD_S`` seconds; the child's VmRSS is sampled all along and the highest
sample is compared with the target (1 GiB).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import rss_mb

TARGET_MB = 1024.0
LOAD_S = 20.0
READY_TIMEOUT_S = 180.0
ROOT = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------ the child


def serve(nodes: int) -> None:
    """Run the fleet until SIGTERM; print ``READY <kube url>`` once it is up."""
    import logging

    from simulator.fleet import FaultMix, Fleet, FleetConfig, PoolSpec, WorkloadConfig

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    half = nodes // 2
    config = FleetConfig(
        pools=[
            PoolSpec(name="h100", nodes=nodes - half),
            PoolSpec(name="p5", nodes=half, reset_supported=False),
        ],
        time_factor=600,
        seed=1,
        fault_mix=FaultMix.llama3(multiplier=100),
        workloads=WorkloadConfig(),
        job_executor=False,
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with Fleet(config) as fleet:
        print(f"READY {fleet.kube_url}", flush=True)
        stop.wait()
        snapshot = fleet.snapshot()
    faults = sum(v for k, v in snapshot.counters.items() if k.startswith("faults.from_"))
    print(f"FAULTS {faults}", flush=True)


# ----------------------------------------------------------------- the parent


def _load(url: str, seconds: float) -> dict[str, Any]:
    from kubernetes import client, watch

    api = client.ApiClient(client.Configuration(host=url))
    core = client.CoreV1Api(api)
    deadline = time.monotonic() + seconds
    events = [0]
    lock = threading.Lock()

    def follow(list_fn: Any) -> None:
        while time.monotonic() < deadline:
            remaining = max(1, int(deadline - time.monotonic()))
            for _ in watch.Watch().stream(list_fn, timeout_seconds=remaining):
                with lock:
                    events[0] += 1
                if time.monotonic() >= deadline:
                    break

    watchers = [
        threading.Thread(target=follow, args=(fn,), daemon=True)
        for fn in (core.list_node, core.list_node, core.list_pod_for_all_namespaces)
    ]
    for thread in watchers:
        thread.start()
    node_lists: list[float] = []
    pod_lists: list[float] = []
    counts = (0, 0)
    while time.monotonic() < deadline:
        started = time.perf_counter()
        listed = core.list_node()
        node_lists.append(time.perf_counter() - started)
        started = time.perf_counter()
        pods = core.list_pod_for_all_namespaces()
        pod_lists.append(time.perf_counter() - started)
        counts = (len(listed.items), len(pods.items))
    for thread in watchers:
        thread.join(timeout=seconds)
    api.close()
    return {
        "nodes_listed": counts[0],
        "pods_listed": counts[1],
        "list_nodes_median_s": round(statistics.median(node_lists), 3),
        "list_pods_median_s": round(statistics.median(pod_lists), 3),
        "lists": len(node_lists),
        "watch_events": events[0],
    }


async def _sample(pid: int, stop: threading.Event) -> tuple[float, float]:
    highest = hwm = 0.0
    while not stop.is_set():
        rss, hwm = rss_mb(pid)
        highest = max(highest, rss)
        await asyncio.sleep(0.2)
    return highest, hwm


def _spawn(count: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "bench.simulator", "serve", str(count)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )


async def run(*, quick: bool = False, nodes: int | None = None) -> dict[str, Any]:
    """Run the benchmark; return the numbers (also printed)."""
    count = nodes or (500 if quick else 2000)
    load_s = LOAD_S / 4 if quick else LOAD_S
    print(f"[simulator] {count}-node fleet, listed and watched for {load_s:g} s ...", flush=True)
    started = time.perf_counter()
    child = _spawn(count)
    assert child.stdout is not None
    try:
        line = await asyncio.wait_for(asyncio.to_thread(child.stdout.readline), READY_TIMEOUT_S)
        if not line.startswith("READY "):
            raise RuntimeError(f"simulator did not start (said {line!r}, rc {child.poll()})")
        start_s = time.perf_counter() - started
        url = line.split()[1]
        idle_mb, _ = rss_mb(child.pid)
        stop = threading.Event()
        sampler = asyncio.create_task(_sample(child.pid, stop))
        load = await asyncio.to_thread(_load, url, load_s)
        stop.set()
        peak_mb, hwm_mb = await sampler
        child.send_signal(signal.SIGTERM)
        out, _ = await asyncio.to_thread(child.communicate, timeout=60)
        faults = int(out.split("FAULTS ")[1].split()[0]) if "FAULTS " in out else -1
    finally:
        if child.poll() is None:
            child.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=10)
    ok = peak_mb < TARGET_MB and load["nodes_listed"] == count
    print(
        f"[simulator] RSS {peak_mb:.0f} MiB under load (target < {TARGET_MB:g}), {idle_mb:.0f} "
        f"MiB idle, peak {hwm_mb:.0f} MiB; up in {start_s:.1f} s; list {count} nodes "
        f"{load['list_nodes_median_s'] * 1000:.0f} ms, {load['pods_listed']} pods "
        f"{load['list_pods_median_s'] * 1000:.0f} ms; {load['watch_events']} watch events; "
        f"{faults} faults injected meanwhile",
        flush=True,
    )
    return {
        "name": "simulator",
        "quick": quick,
        "nodes": count,
        "seconds_to_start": round(start_s, 1),
        "rss_idle_mb": round(idle_mb, 1),
        "rss_loaded_mb": round(peak_mb, 1),
        "rss_peak_mb": round(hwm_mb, 1),
        "faults_injected": faults,
        **load,
        "target_mb": TARGET_MB,
        "ok": ok,
    }


def summary_rows(r: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """Rows for ``bench.run_all``'s summary table."""
    return [
        (
            "simulator",
            f"RSS, {r['nodes']} nodes listed and watched",
            f"{r['rss_loaded_mb']:.0f} MiB",
            f"< {r['target_mb']:.0f} MiB",
        ),
        (
            "simulator",
            f"list {r['nodes']} nodes / {r['pods_listed']} pods (median)",
            f"{r['list_nodes_median_s']:.2f} s / {r['list_pods_median_s']:.2f} s",
            "",
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode")
    serve_parser = sub.add_parser("serve", help="(internal) run the fleet in this process")
    serve_parser.add_argument("nodes", type=int)
    parser.add_argument("--quick", action="store_true", help="500 nodes (smoke run)")
    parser.add_argument("--nodes", type=int, default=None)
    args = parser.parse_args()
    if args.mode == "serve":
        serve(args.nodes)
        return
    asyncio.run(run(quick=args.quick, nodes=args.nodes))


if __name__ == "__main__":
    main()
