"""worker.py finds Temporal through a TOML profile (temporalio.envconfig), as a Cloud setup does."""

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
from tests.conftest import assert_eventually

REPO = Path(__file__).resolve().parents[1]


async def worker_identities(client: Client, task_queue: str) -> list[str]:
    response = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=task_queue),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        )
    )
    return [poller.identity for poller in response.pollers]


async def test_the_worker_connects_through_the_profile_named_by_temporal_profile(
    dev_client: Client, task_queue: str, kube: KubeApiServer, tmp_path: Path
) -> None:
    config = tmp_path / "temporal.toml"
    # The default profile points nowhere: only the named one reaches the server.
    config.write_text(
        '[profile.default]\naddress = "127.0.0.1:1"\n\n'
        "[profile.remediation]\n"
        f'address = "{dev_client.service_client.config.target_host}"\n'
        f'namespace = "{dev_client.namespace}"\n'
    )
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("TEMPORAL_", "GPU_REMEDIATION_"))
    }
    env |= {
        "TEMPORAL_CONFIG_FILE": str(config),
        "TEMPORAL_PROFILE": "remediation",
        "GPU_REMEDIATION_KUBE_API_URL": kube.url,
        "GPU_REMEDIATION_TASK_QUEUE": task_queue,
        "GPU_REMEDIATION_WORKFLOW_TASK_POLLERS": "2",
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "worker.py",
        cwd=REPO,
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        identities = await assert_eventually(
            lambda: worker_identities(dev_client, task_queue),
            lambda found: len(found) > 0,
            timeout=30,
            interval=0.2,
            message="the worker polls the profile's server",
        )
        assert identities[0].startswith(f"{process.pid}@")
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, stderr.decode(errors="replace")[-2000:]
