"""The remediation worker as a child process: ``remediate worker``, unchanged.

The demo and the end-to-end tests run the production worker exactly as an
operator would (``python -m cli.main worker``), pointed at the simulated fleet
by the ``GPU_REMEDIATION_*`` and AWS variables the fleet gives. A process of its
own also gives the worker its own interpreter lock, so the activities' API
decoding does not compete with the simulator's servers in one process, and it
can be killed outright (the crash-safety test).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from demo.child_process import kill_group, log_tail, stop_group
from gpu_remediation.ids import WORKER_POLLING

STOP_TIMEOUT = 45.0
"""Longer than the worker's own graceful shutdown (30 s for running activities)."""


class WorkerProcess:
    """Starts, stops and kills ``remediate worker`` processes, one at a time.

    Args:
        address: Temporal frontend ``host:port``.
        namespace: Temporal namespace.
        task_queue: The queue to poll.
        env: Extra environment (the fleet's ``GPU_REMEDIATION_*`` and AWS settings);
            read at each start.
        log_path: The worker's output goes here (appended, so restarts keep the earlier log).
    """

    def __init__(
        self,
        *,
        address: str,
        namespace: str,
        task_queue: str,
        env: Mapping[str, str],
        log_path: Path,
    ) -> None:
        self._address = address
        self._namespace = namespace
        self._task_queue = task_queue
        self.env = dict(env)
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self._log_start = 0

    @property
    def running(self) -> bool:
        """Whether the current worker process is alive."""
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        """Start a worker process (it connects and polls on its own).

        Raises:
            RuntimeError: One is already running.
        """
        if self.running:
            raise RuntimeError("a worker process is already running")
        env = {
            key: value
            for key, value in os.environ.items()
            # Only what this demo says: no stray settings from the caller's shell.
            if not key.startswith(("TEMPORAL_", "GPU_REMEDIATION_"))
        }
        env.update(self.env)
        env.setdefault("LOG_LEVEL", "INFO")
        args = [
            sys.executable,
            "-m",
            "cli.main",
            "worker",
            "--address",
            self._address,
            "--namespace",
            self._namespace,
            "--task-queue",
            self._task_queue,
        ]
        with self.log_path.open("ab") as log:
            self._log_start = log.tell()  # this process's lines come after
            # Its own session: a Ctrl-C at the terminal reaches the demo, which
            # then stops the worker itself, in order.
            self.process = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        self.starts += 1

    async def wait_polling(self, client: Client, limit_s: float = 60.0) -> None:
        """Wait until the worker polls its task queue.

        Raises:
            RuntimeError: The worker exited (its log's tail is in the message).
            TimeoutError: It did not poll within ``limit_s`` seconds.
        """
        deadline = time.monotonic() + limit_s
        # The SDK's default identity is "<pid>@<host>": a killed predecessor
        # stays in the server's poller list for a while, so match this process.
        prefix = f"{self.process.pid}@" if self.process is not None else "?"
        while not await self._polling(client, prefix):
            if not self.running:
                code = self.process.returncode if self.process else None
                raise RuntimeError(f"the worker exited with {code}: {self.log_tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the worker did not poll within {limit_s:.0f}s")
            await asyncio.sleep(0.1)

    async def _polling(self, client: Client, prefix: str) -> bool:
        try:
            return any(p.startswith(prefix) for p in await pollers(client, self._task_queue))
        except RPCError as err:
            if err.status != RPCStatusCode.UNIMPLEMENTED:
                raise
        # The time-skipping test server (clock-free what-if) cannot describe a task
        # queue: take the worker's own word, the line it logs once its pollers run.
        return f"{WORKER_POLLING} {self._task_queue} " in self._log_since_start()

    def _log_since_start(self) -> str:
        try:
            with self.log_path.open("rb") as log:
                log.seek(self._log_start)
                return log.read().decode(errors="replace")
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL the worker (no graceful shutdown: a crash) and reap it."""
        kill_group(self.process, STOP_TIMEOUT)

    async def stop(self, grace_s: float = STOP_TIMEOUT) -> int | None:
        """SIGTERM the worker (graceful: running activities may finish), SIGKILL after ``grace_s``.

        Returns:
            Its exit code (None if none was running).
        """
        return await stop_group(self.process, grace_s, STOP_TIMEOUT)

    def log_tail(self, chars: int = 2000) -> str:
        """The end of the worker's log."""
        return log_tail(self.log_path, chars)


async def pollers(client: Client, task_queue: str) -> list[str]:
    """Identities of the workers polling ``task_queue`` for workflow tasks lately."""
    response = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=task_queue),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        )
    )
    return [poller.identity for poller in response.pollers]
