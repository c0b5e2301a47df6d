"""The demo's worker process is seen polling, on the dev server and on the test server."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from demo.worker_process import WorkerProcess

pytestmark = pytest.mark.integration


async def test_a_worker_on_the_time_skipping_server_is_seen_polling_by_its_log_line(
    own_time_skipping_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    # That server cannot describe a task queue (UNIMPLEMENTED): the worker's own
    # line says when it polls, and only this process's lines count.
    client = own_time_skipping_env.client
    queue = f"worker-process-{uuid.uuid4().hex[:6]}"
    log_path = tmp_path / "worker.log"
    log_path.write_text(f"an earlier worker polling task queue {queue} (tuning: defaults)\n")
    worker = WorkerProcess(
        address=client.service_client.config.target_host,
        namespace=client.namespace,
        task_queue=queue,
        env={
            # Never called: the worker only has to start and poll.
            "GPU_REMEDIATION_KUBE_API_URL": "http://127.0.0.1:9",
            "GPU_REMEDIATION_AWS_ENDPOINT_URL": "http://127.0.0.1:9",
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",
        },
        log_path=log_path,
    )
    worker.start()
    try:
        await worker.wait_polling(client, limit_s=60)
        assert worker.running
        assert log_path.read_text().count(f"worker polling task queue {queue} ") == 2
    finally:
        await worker.stop()
