"""Shared fixtures: real Temporal servers (no downloads), clients, task queues."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from gpu_remediation.search_attributes import ALL_SEARCH_ATTRIBUTES
from gpu_remediation.temporal_setup import (
    dev_server_path,
    register_search_attributes,
    time_skipping_server_path,
)
from simulator.kube_api import KubeApiServer, KubeStore

T = TypeVar("T")


async def _start_time_skipping() -> WorkflowEnvironment:
    env = await WorkflowEnvironment.start_time_skipping(
        data_converter=pydantic_data_converter,
        test_server_existing_path=str(time_skipping_server_path()),
    )
    await register_search_attributes(env.client)
    return env


@pytest_asyncio.fixture(scope="session")
async def time_skipping_env() -> AsyncIterator[WorkflowEnvironment]:
    """The time-skipping test server, shared by the session."""
    env = await _start_time_skipping()
    try:
        yield env
    finally:
        await env.shutdown()


@pytest_asyncio.fixture
async def own_time_skipping_env() -> AsyncIterator[WorkflowEnvironment]:
    """A time-skipping server of the test's own (about a second to start).

    For tests whose result calls leap the clock past long leases: on a shared
    server such a leap has left a later test's time skip hanging.
    """
    env = await _start_time_skipping()
    try:
        yield env
    finally:
        await env.shutdown()


@pytest_asyncio.fixture(scope="session")
async def dev_env() -> AsyncIterator[WorkflowEnvironment]:
    """A real dev server (in-memory SQLite), for what time skipping lacks."""
    env = await WorkflowEnvironment.start_local(
        data_converter=pydantic_data_converter,
        dev_server_existing_path=str(dev_server_path()),
        search_attributes=ALL_SEARCH_ATTRIBUTES,
    )
    try:
        yield env
    finally:
        await env.shutdown()


@pytest.fixture
def kube() -> Iterator[KubeApiServer]:
    """A running Kubernetes API emulator; tests seed it through ``kube.store``."""
    store = KubeStore()
    with KubeApiServer(store) as server:
        yield server
    store.close()


@pytest.fixture
def store(kube: KubeApiServer) -> KubeStore:
    """The emulator's store, for seeding and direct mutation."""
    return kube.store


@pytest.fixture
def api(kube: KubeApiServer) -> Iterator[Any]:
    """An official ``kubernetes.client.ApiClient`` configured for the emulator."""
    with kube.api_client() as api_client:
        yield api_client


@pytest.fixture
def task_queue() -> str:
    """A fresh task queue per test, so workers of different tests never mix."""
    return f"tq-{uuid.uuid4()}"


@pytest.fixture
def ts_client(time_skipping_env: WorkflowEnvironment) -> Client:
    """Client of the time-skipping server."""
    return time_skipping_env.client


@pytest.fixture
def dev_client(dev_env: WorkflowEnvironment) -> Client:
    """Client of the dev server."""
    return dev_env.client


def own_semaphore() -> str:
    """A semaphore id of a test's own, for incidents on a shared dev server.

    A semaphore (the replacements', and each disruptive step's beside it) runs
    on the task queue of the worker that first asked for it: an incident of a
    later test, on its own task queue, would wait forever for a permit from a
    semaphore nobody runs any more.
    """
    return f"test-semaphore/{uuid.uuid4()}"


async def assert_eventually(
    probe: Callable[[], Awaitable[T]],
    check: Callable[[T], bool],
    *,
    timeout: float = 10.0,
    interval: float = 0.05,
    message: str = "condition not met",
) -> T:
    """Poll ``probe`` until ``check`` holds on its value; fail with the last value.

    Used instead of sleeps: returns as soon as the condition holds.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last: T | None = None
    while True:
        last = await probe()
        if check(last):
            return last
        if loop.time() > deadline:
            raise AssertionError(f"{message} within {timeout}s; last value: {last!r}")
        await asyncio.sleep(interval)
