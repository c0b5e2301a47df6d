"""Shared fixtures: real Temporal servers (no downloads), clients, task queues; test tiers."""

from __future__ import annotations

import asyncio
import functools
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
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

TIERS = ("unit", "integration", "e2e")
# Whole directories of end-to-end tests: the demo stack, a browser on the Temporal UI.
E2E_DIRS = (Path(__file__).parent / "e2e", Path(__file__).parent / "browser")
# Fixtures that start the whole system: the simulated fleet, worker and watcher.
E2E_FIXTURES = frozenset({"make_stack", "ui_stack"})
# Fixtures that start a server: Temporal's, the Kubernetes emulator over HTTP, the
# simulated fleet. ``item.fixturenames`` holds the fixtures they are built on too.
INTEGRATION_FIXTURES = frozenset(
    {"dev_env", "time_skipping_env", "own_time_skipping_env", "kube", "kube_api", "make_fleet"}
)
# What in a test module's source (a test, a helper, a fixture of its own) starts a
# program of the system as a server process: the worker, receiver, watcher, simulator.
STARTS_A_SERVER_PROCESS = re.compile(r"\bPopen\b|\bcreate_subprocess_exec\b")
# What in a test module's source starts a server or a process outside those fixtures.
STARTS_SOMETHING = re.compile(
    r"\bsubprocess\b"  # a command run to its end
    r"|\bmoto_cloud\b|\bssm_cloud\b"  # moto's EC2 and SSM over HTTP
    r"|\bFleet\("  # the simulated fleet
    r"|\bKubeApiServer\("  # the Kubernetes emulator over HTTP
    r"|\bWorkflowEnvironment\.start_"  # a Temporal server
    r"|\bnode\.agent\("  # tests/agent's fake node runs ``python -m agent``
    r"|from agent\.runner import .*\brun\b"  # the agent's runner runs tools
)


@functools.cache
def module_tier(path: Path) -> str:
    """The tier a test module's own source shows: what it starts outside the fixtures."""
    source = path.read_text()
    if path.stem.endswith("_e2e") or STARTS_A_SERVER_PROCESS.search(source):
        return "e2e"
    if STARTS_SOMETHING.search(source):
        return "integration"
    return "unit"


def tier(item: pytest.Item) -> str:
    """The tier of a test that names none: where it is, its fixtures, what its module starts."""
    if any(item.path.is_relative_to(directory) for directory in E2E_DIRS):
        return "e2e"
    fixtures = set(getattr(item, "fixturenames", ()))
    if fixtures & E2E_FIXTURES:
        return "e2e"
    by_module = module_tier(item.path)
    if by_module == "unit" and fixtures & INTEGRATION_FIXTURES:
        return "integration"
    return by_module


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test with exactly one tier: ``unit``, ``integration`` or ``e2e``.

    The whole suite takes about 13 minutes on 2 cores, nearly all of it in tests
    that start servers or processes; ``make test-fast`` (``pytest -m unit``) runs
    the pure core in under a minute. The tier is decided here, from the fixtures a
    test uses and what its module starts, so a new test lands in the right tier
    without anyone remembering to mark it. A test (or a module, with
    ``pytestmark``) that marks its tier itself keeps it; a test under two tiers
    is an error, so ``-m unit``, ``-m integration`` and ``-m e2e`` split the suite.
    """
    del config
    for item in items:
        marked = {mark.name for mark in item.iter_markers() if mark.name in TIERS}
        if len(marked) > 1:
            raise pytest.UsageError(f"{item.nodeid} is marked {sorted(marked)}: one tier only")
        if not marked:
            item.add_marker(tier(item))


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
