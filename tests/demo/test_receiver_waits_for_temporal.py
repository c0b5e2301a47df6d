"""A receiver (re)started while the Temporal server is down waits for it instead of exiting."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from demo.receiver_process import ReceiverProcess, ReceiverSettings
from demo.server import free_port
from gpu_remediation.policy_loader import parse_policy

pytestmark = pytest.mark.timeout(90)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()


async def test_a_receiver_started_while_the_server_is_down_serves_once_it_is_back(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    target = dev_env.client.service_client.config.target_host
    host, port = target.rsplit(":", 1)
    front = free_port()  # nothing listens here yet: the server is "down"
    tag = uuid.uuid4().hex[:8]
    settings = ReceiverSettings(
        address=f"127.0.0.1:{front}",
        namespace=dev_env.client.namespace,
        cluster=f"wait-{tag}",
        task_queue=f"tq-wait-{tag}",
        semaphore_workflow_id=f"semaphore-wait-{tag}",
        policy=parse_policy("{}"),
        port=free_port(),
    )
    process = ReceiverProcess(settings, "receiver-token-0123456789abcdef", tmp_path)
    process.start()

    async def forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(host, int(port))
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    try:
        await asyncio.sleep(2.0)
        assert process.running  # still waiting, not exited
        server = await asyncio.start_server(forward, "127.0.0.1", front)  # the server is back
        async with server:
            await process.wait_serving(limit_s=60)
            assert "not answering" in process.log_tail()
    finally:
        with contextlib.suppress(Exception):
            process.kill()
