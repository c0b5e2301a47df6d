"""Fixtures for the Kubernetes API emulator tests: a fresh server per test, official client."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from simulator.kube_api import KubeApiServer, KubeStore


@pytest.fixture
def kube_api() -> Iterator[KubeApiServer]:
    """A running emulator on a free loopback port (fast bookmarks for the watch tests)."""
    store = KubeStore()
    with KubeApiServer(store, bookmark_interval=0.2) as server:
        yield server
    store.close()


@pytest.fixture
def kube_store(kube_api: KubeApiServer) -> KubeStore:
    """The emulator's store, for seeding and direct mutation."""
    return kube_api.store


@pytest.fixture
def api_client(kube_api: KubeApiServer) -> Iterator[Any]:
    """An official ``kubernetes.client.ApiClient`` configured for the emulator."""
    with kube_api.api_client() as api:
        yield api


@pytest.fixture
def core(api_client: Any) -> Any:
    """``CoreV1Api`` against the emulator."""
    return client.CoreV1Api(api_client)


@pytest.fixture
def policy(api_client: Any) -> Any:
    """``PolicyV1Api`` against the emulator."""
    return client.PolicyV1Api(api_client)


@pytest.fixture
def batch(api_client: Any) -> Any:
    """``BatchV1Api`` against the emulator."""
    return client.BatchV1Api(api_client)


@pytest.fixture
def custom(api_client: Any) -> Any:
    """``CustomObjectsApi`` against the emulator."""
    return client.CustomObjectsApi(api_client)
