"""Stop and restart the demo's Temporal dev server, keeping its file database.

The demo's server (``demo.server.dev_server``) is a ``temporal server
start-dev`` process with a SQLite file. A restart stops its process group
(SIGTERM, as an operator's restart or a node drain would), starts the same
command line again (same ports, same database, same search attributes) and
waits until it serves. The process started last is the caller's to stop:
:meth:`RestartableServer.close` does it (``dev_server`` only knows the first).
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path
from urllib.parse import urlsplit

from demo.server import DevServer, connect, server_args, stop_process_group

SERVE_TIMEOUT = 30.0


class RestartableServer:
    """Restarts one dev server in place (``server.process`` is replaced).

    Args:
        server: The running server (its address, database and UI address are kept).
    """

    def __init__(self, server: DevServer) -> None:
        self.server = server
        self.restarts = 0
        self._started: list[subprocess.Popen[bytes]] = []

    def _args(self) -> list[str]:
        port = int(self.server.address.rsplit(":", 1)[1])
        ui_port = urlsplit(self.server.ui_url).port if self.server.ui_url else None
        return server_args(port=port, db_path=self.server.db_path, ui_port=ui_port)

    async def restart(self, down_s: float = 0.0) -> None:
        """Stop the server, stay down ``down_s`` seconds, start it again and wait until it serves.

        Raises:
            RuntimeError: The new server exited while starting.
            TimeoutError: It did not serve within ``SERVE_TIMEOUT`` seconds.
        """
        await asyncio.to_thread(stop_process_group, self.server.process)
        await asyncio.sleep(down_s)
        process = await asyncio.to_thread(self._spawn)
        self._started.append(process)
        self.server.process = process
        self.restarts += 1
        await self._wait_serving(process)

    def _spawn(self) -> subprocess.Popen[bytes]:
        log = self.server.log_path or Path("/dev/null")
        with log.open("ab") as out:
            # Its own session, like the first: stopping it reaches its whole group.
            return subprocess.Popen(
                self._args(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    async def _wait_serving(self, process: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + SERVE_TIMEOUT
        while True:
            if process.poll() is not None:
                raise RuntimeError(
                    f"the restarted Temporal server exited with {process.returncode}"
                )
            try:
                client = await connect(self.server.address)
                await client.count_workflows()
                return
            except Exception as err:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"the restarted Temporal server did not serve within {SERVE_TIMEOUT:.0f}s"
                    ) from err
                await asyncio.sleep(0.1)

    def close(self) -> None:
        """Stop every server process this object started (the demo stops the first)."""
        for process in self._started:
            stop_process_group(process)
