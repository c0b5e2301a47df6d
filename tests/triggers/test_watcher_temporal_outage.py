"""Reports made while Temporal is down wait in the watcher's outbox and arrive once it is back."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from temporalio.client import Client, RetryConfig
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from demo.server import free_port
from gpu_remediation.search_attributes import ALL_SEARCH_ATTRIBUTES
from gpu_remediation.temporal_setup import dev_server_path
from tests.conftest import assert_eventually
from tests.triggers.watcher_support import (
    GPU_LABELS,
    emulator,
    evidence_reports,
    make_watcher,
    new_cluster,
    running,
    watcher_policy,
)


async def start_server(port: int, database: Path) -> WorkflowEnvironment:
    return await WorkflowEnvironment.start_local(
        data_converter=pydantic_data_converter,
        dev_server_existing_path=str(dev_server_path()),
        search_attributes=ALL_SEARCH_ATTRIBUTES,
        ip="127.0.0.1",
        port=port,
        dev_server_database_filename=str(database),
    )


async def test_reports_wait_while_temporal_is_down_and_arrive_when_it_is_back(
    task_queue: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="gpu_remediation.watcher")
    port, database = free_port(), tmp_path / "temporal.db"
    cluster = new_cluster()
    server = await start_server(port, database)
    # Few client retries, so an outage surfaces at once instead of after ~10 s.
    client = await Client.connect(
        f"127.0.0.1:{port}",
        data_converter=pydantic_data_converter,
        retry_config=RetryConfig(max_retries=1, initial_interval_millis=50),
    )
    try:
        with emulator() as emu:
            emu.store.put_node("gpu-d", labels=GPU_LABELS)
            emu.store.put_node("gpu-e", labels=GPU_LABELS)
            emu.store.set_node_condition("gpu-d", "GpuHealthProblem", "True", message="Xid 79")
            with emu.api_client() as api:
                watcher = make_watcher(
                    api, client, watcher_policy(), cluster=cluster, task_queue=task_queue
                )
                async with running(watcher):
                    await assert_eventually(
                        lambda: evidence_reports(client, cluster, "gpu-d"), lambda r: len(r) == 1
                    )
                    await server.shutdown()
                    emu.store.set_node_condition(
                        "gpu-e", "GpuHealthProblem", "True", message="Xid 48"
                    )

                    async def pending() -> int:
                        return watcher.pending

                    await assert_eventually(pending, lambda n: n == 1)
                    server = await start_server(port, database)
                    await assert_eventually(
                        lambda: evidence_reports(client, cluster, "gpu-e"),
                        lambda r: len(r) == 1,
                        timeout=20,
                    )
                    await assert_eventually(pending, lambda n: n == 0)
        # The incident started before the outage survived it and got nothing twice.
        assert len(await evidence_reports(client, cluster, "gpu-d")) == 1
    finally:
        await server.shutdown()
    assert any("Temporal unavailable" in r.getMessage() for r in caplog.records)
