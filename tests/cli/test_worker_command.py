"""`remediate worker` runs worker.py's main: polls, stops cleanly, fails clearly."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client

from simulator.kube_api import KubeApiServer
from tests.cli.conftest import closed_port, invoke
from tests.conftest import assert_eventually

REPO = Path(__file__).resolve().parents[2]


async def test_worker_with_unreachable_temporal_exits_3() -> None:
    address = f"127.0.0.1:{closed_port()}"
    result = await invoke("worker", "--address", address)
    assert result.exit_code == 3
    assert f"Temporal unreachable at {address}" in result.stderr


async def test_worker_with_a_bad_setting_exits_2_naming_the_variable() -> None:
    result = await invoke("worker", env={"GPU_REMEDIATION_HOST_EXECUTOR": "telnet"})
    assert result.exit_code == 2
    assert "GPU_REMEDIATION_HOST_EXECUTOR" in result.stderr


async def pollers(client: Client, task_queue: str) -> int:
    response = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=task_queue),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        )
    )
    return len(response.pollers)


async def test_worker_polls_the_task_queue_and_stops_cleanly_on_sigint(
    dev_client: Client, task_queue: str, kube: KubeApiServer
) -> None:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("TEMPORAL_", "GPU_REMEDIATION_"))
    }
    env["GPU_REMEDIATION_KUBE_API_URL"] = kube.url
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "cli.main",
        "worker",
        "--address",
        dev_client.service_client.config.target_host,
        "--namespace",
        dev_client.namespace,
        "--task-queue",
        task_queue,
        cwd=REPO,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        await assert_eventually(
            lambda: pollers(dev_client, task_queue),
            lambda count: count > 0,
            timeout=30,
            interval=0.2,
            message="the worker polls its task queue",
        )
        process.send_signal(signal.SIGINT)
        _, stderr = await asyncio.wait_for(process.communicate(), timeout=30)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 0, stderr.decode()
    assert f"worker polling task queue {task_queue}" in stderr.decode()
