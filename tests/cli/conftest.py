"""Fixtures for the operator CLI: the real dev server, a worker with the fake fleet, a runner."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from temporalio.testing import WorkflowEnvironment
from typer.testing import CliRunner, Result

from cli.main import app
from demo.server import free_port
from tests.doubles import FakeFleet
from tests.workflows.node_support import Cluster, cluster

# Wide enough that rich neither wraps names nor error messages.
runner = CliRunner(env={"COLUMNS": "250", "NO_COLOR": "1"})

APPROVAL_POLICY = """\
cooldown: 0s
rungs:
  replace: {requires_approval: true}
"""


def closed_port() -> int:
    """A local port nobody listens on (bound, then released)."""
    return free_port()


async def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    """Run ``remediate ARGS`` off the event loop (the CLI runs its own with asyncio.run)."""
    return await asyncio.to_thread(lambda: runner.invoke(app, list(args), env=env))


def parsed(result: Result) -> Any:
    """The command's stdout as JSON, after checking it succeeded."""
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
    return json.loads(result.stdout)


@dataclass
class Cli:
    """``remediate`` pointed at the dev server, one test's cluster, queue and semaphore."""

    env: WorkflowEnvironment
    cluster: Cluster
    policy_file: Path

    @property
    def temporal(self) -> list[str]:
        """Where the dev server is."""
        client = self.env.client
        return [
            "--address",
            client.service_client.config.target_host,
            "--namespace",
            client.namespace,
        ]

    async def node_command(self, *args: str) -> Result:
        """A command about incidents (takes --cluster)."""
        return await invoke(*args, *self.temporal, "--cluster", self.cluster.name)

    async def run(self, node: str, runbook: str, *extra: str) -> Result:
        """``remediate run NODE --runbook RUNBOOK`` on this test's queue and semaphore."""
        return await self.node_command(
            "run",
            node,
            "--runbook",
            runbook,
            "--task-queue",
            self.cluster.task_queue,
            "--semaphore-id",
            self.cluster.semaphore_id,
            *extra,
        )

    async def budget(self, *extra: str) -> Result:
        """``remediate budget`` on this test's semaphore."""
        return await invoke(
            "budget", "--semaphore-id", self.cluster.semaphore_id, *self.temporal, *extra
        )

    async def status_json(self, node: str) -> dict[str, Any]:
        """``remediate status NODE --json``, parsed."""
        data: dict[str, Any] = parsed(await self.node_command("status", node, "--json"))
        return data


@pytest_asyncio.fixture
async def cli(dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path) -> AsyncIterator[Cli]:
    """A worker running the node workflow with the fake fleet, and the CLI aimed at it.

    The policy (``--policy``) makes replacements wait for approval, so an
    incident started with the replace runbook stays open for the test.
    """
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(APPROVAL_POLICY)
    async with cluster(dev_env, task_queue, FakeFleet()) as running:
        yield Cli(dev_env, running, policy_file)


@pytest.fixture
def temporal_args(dev_env: WorkflowEnvironment) -> list[str]:
    """``--address`` and ``--namespace`` of the dev server (for tests without a worker)."""
    client = dev_env.client
    return ["--address", client.service_client.config.target_host, "--namespace", client.namespace]
