"""The Alertmanager webhook receiver as a child process: it can be SIGKILLed like a crashed pod.

``python -m demo.receiver_process SETTINGS`` serves the production app
(``triggers.receiver.create_app`` under uvicorn, one worker, as ``remediate
receiver`` does) with the demo stack's settings: the same policy, cluster, task
queue and replacement semaphore as the watcher's ``IncidentStarter``, so alerts
and node conditions feed the same incidents. ``remediate receiver`` takes no
semaphore id (a deployment has one), hence this entry point; the bearer token
travels in ``GPU_REMEDIATION_RECEIVER_TOKEN``, never on the command line.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from demo.child_process import kill_group, log_tail, stop_group
from gpu_remediation.policy import Policy

if TYPE_CHECKING:
    from temporalio.client import Client

TOKEN_ENV = "GPU_REMEDIATION_RECEIVER_TOKEN"
STOP_TIMEOUT = 15.0
CONNECT_PATIENCE_S = 45.0
"""How long a starting receiver waits for Temporal (within ``wait_serving``'s 60 s)."""


class ReceiverSettings(BaseModel):
    """What the receiver process serves, and for whom."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    address: str
    namespace: str
    cluster: str
    task_queue: str
    semaphore_workflow_id: str
    policy: Policy
    host: str = "127.0.0.1"
    port: int


class ReceiverProcess:
    """Starts, stops and kills receiver processes, one at a time, always on the same port.

    Args:
        settings: What to serve (the port is kept across restarts, so the
            Alertmanager's URL stays valid).
        token: The bearer token.
        run_dir: Where the settings file and the log (``receiver.log``, appended) go.
    """

    def __init__(self, settings: ReceiverSettings, token: str, run_dir: Path) -> None:
        self.settings = settings
        self._token = token
        self._settings_path = run_dir / "receiver.json"
        self.log_path = run_dir / "receiver.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        """The webhook endpoint."""
        return f"http://{self.settings.host}:{self.settings.port}/v1/alerts"

    @property
    def running(self) -> bool:
        """Whether the current process is alive."""
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        """Start a receiver process (it connects to Temporal and serves on its own).

        Raises:
            RuntimeError: One is already running.
        """
        if self.running:
            raise RuntimeError("a receiver process is already running")
        self._settings_path.write_text(self.settings.model_dump_json())
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("TEMPORAL_", "GPU_REMEDIATION_"))
        }
        env[TOKEN_ENV] = self._token
        args = [sys.executable, "-m", "demo.receiver_process", str(self._settings_path)]
        with self.log_path.open("ab") as out:
            self.process = subprocess.Popen(
                args, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        self.starts += 1

    async def wait_serving(self, limit_s: float = 60.0) -> None:
        """Wait until it answers ``/healthz``.

        Raises:
            RuntimeError: The process exited (its log's tail is in the message).
            TimeoutError: It did not serve within ``limit_s`` seconds.
        """
        deadline = time.monotonic() + limit_s
        health = f"http://{self.settings.host}:{self.settings.port}/healthz"
        while not await asyncio.to_thread(_answers, health):
            if not self.running:
                code = self.process.returncode if self.process else None
                raise RuntimeError(f"the receiver exited with {code}: {self.log_tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the receiver did not serve within {limit_s:.0f}s")
            await asyncio.sleep(0.1)

    def kill(self) -> None:
        """SIGKILL the receiver (a crash: requests in flight get no answer) and reap it."""
        kill_group(self.process, STOP_TIMEOUT)

    async def stop(self) -> int | None:
        """SIGTERM (uvicorn finishes the requests in flight), SIGKILL after a grace period."""
        return await stop_group(self.process, STOP_TIMEOUT, STOP_TIMEOUT)

    def log_tail(self, chars: int = 2000) -> str:
        """The end of the receiver's log."""
        return log_tail(self.log_path, chars)


def _answers(url: str) -> bool:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=1.0) as response:
            return int(response.status) == 200
    except (urllib.error.URLError, OSError):
        return False


async def _connect_patiently(settings: ReceiverSettings) -> Client:
    """Connect to Temporal, retrying while it is down for up to ``CONNECT_PATIENCE_S``.

    A receiver restarted while the server restarts too (``--chaos`` draws both
    at once now and then) found nothing listening and exited, which failed the
    whole run: as a supervisor restarting a crashed receiver would, it waits.
    """
    from demo.server import connect

    deadline = time.monotonic() + CONNECT_PATIENCE_S
    delay = 0.2
    while True:
        try:
            return await connect(settings.address, settings.namespace)
        except RuntimeError as err:  # the SDK's "Failed client connect: ..."
            if time.monotonic() > deadline:
                raise
            print(f"Temporal at {settings.address} not answering ({err}); retrying", flush=True)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)


async def _serve(settings: ReceiverSettings, token: str) -> None:
    # Imported here: the parent (the demo stack) needs none of the web stack.
    import uvicorn

    from triggers.receiver import create_app
    from triggers.starter import IncidentStarter

    client = await _connect_patiently(settings)
    starter = IncidentStarter(
        client,
        cluster=settings.cluster,
        policy=settings.policy,
        task_queue=settings.task_queue,
        semaphore_workflow_id=settings.semaphore_workflow_id,
    )
    app = create_app(starter, token, client=client)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level="warning",
        access_log=False,
        workers=1,
    )
    await uvicorn.Server(config).serve()


def main(argv: list[str] | None = None) -> None:
    """Serve the receiver with the settings file named by the only argument."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        raise SystemExit("usage: python -m demo.receiver_process SETTINGS.json")
    settings = ReceiverSettings.model_validate_json(Path(args[0]).read_text())
    token = os.environ.get(TOKEN_ENV, "")
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    asyncio.run(_serve(settings, token))


if __name__ == "__main__":
    main()
