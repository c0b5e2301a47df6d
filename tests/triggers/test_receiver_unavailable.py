"""Temporal gone: the receiver answers 503 quickly (Alertmanager retries) and is not ready."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest_asyncio
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RetryConfig
from temporalio.testing import WorkflowEnvironment

from gpu_remediation.temporal_setup import dev_server_path
from tests.triggers.receiver_support import alert, payload, receiver


@dataclass
class GoneServer:
    """Clients of a dev server that has been shut down."""

    default_retries: Client
    """Connected with the SDK's default retries (about 10 s before an RPC gives up)."""
    few_retries: Client
    """Connected with retries bounded to well under a second."""


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def gone() -> AsyncIterator[GoneServer]:
    env = await WorkflowEnvironment.start_local(
        data_converter=pydantic_data_converter,
        dev_server_existing_path=str(dev_server_path()),
    )
    few = await Client.connect(
        env.client.service_client.config.target_host,
        data_converter=pydantic_data_converter,
        retry_config=RetryConfig(max_retries=2, max_interval_millis=100),
    )
    await env.shutdown()
    yield GoneServer(env.client, few)


async def test_unavailable_temporal_gives_503_quickly_so_alertmanager_retries(
    gone: GoneServer,
) -> None:
    async with receiver(gone.few_retries, delivery_timeout=30) as rx:
        began = time.monotonic()
        response = await rx.post(payload(alert("gpu-30"), alert("gpu-31")))
        elapsed = time.monotonic() - began
    assert response.status_code == 503
    assert response.json()["detail"].startswith("Temporal unavailable")
    assert response.headers["retry-after"] == "10"
    assert elapsed < 5


async def test_a_slow_failure_is_cut_short_by_the_delivery_timeout(gone: GoneServer) -> None:
    async with receiver(gone.default_retries, delivery_timeout=1.0) as rx:
        began = time.monotonic()
        response = await rx.post(payload(alert("gpu-32")))
        elapsed = time.monotonic() - began
    assert response.status_code == 503
    assert response.json()["detail"] == "Temporal did not answer within 1s; retry"
    assert elapsed < 3


async def test_a_resolved_alert_with_temporal_gone_is_503_too(gone: GoneServer) -> None:
    async with receiver(gone.few_retries) as rx:
        response = await rx.post(payload(alert("gpu-33", status="resolved")))
    assert response.status_code == 503


async def test_readiness_fails_fast_when_temporal_is_gone(gone: GoneServer) -> None:
    async with receiver(gone.default_retries) as rx:
        assert (await rx.http.get("/healthz")).status_code == 200
        began = time.monotonic()
        response = await rx.http.get("/readyz")
        elapsed = time.monotonic() - began
    assert response.status_code == 503
    assert response.json()["ready"] is False
    assert response.json()["detail"].startswith("Temporal not reachable")
    assert elapsed < 3


async def test_duplicates_waiting_on_a_failed_delivery_fail_with_it(gone: GoneServer) -> None:
    same = alert("gpu-34", fingerprint="same")
    async with receiver(gone.few_retries) as rx:
        responses = await asyncio.gather(*(rx.post(payload(*[same] * 5)) for _ in range(10)))
        assert {r.status_code for r in responses} == {503}
        # Nothing was remembered as delivered: the retry goes to Temporal again.
        again = await rx.post(payload(same))
    assert again.status_code == 503
