"""Fixtures for the activity tests: the Kubernetes API emulator and fast settings."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from kubernetes import client

from activities.kubernetes import KubernetesActivities
from gpu_remediation.settings import Settings
from simulator.kube_api import KubeApiServer, KubeStore


@pytest.fixture
def kube() -> Iterator[KubeApiServer]:
    """A running emulator; tests seed it through ``kube.store``."""
    store = KubeStore()
    with KubeApiServer(store) as server:
        yield server
    store.close()


@pytest.fixture
def store(kube: KubeApiServer) -> KubeStore:
    return kube.store


@pytest.fixture
def api(kube: KubeApiServer) -> Iterator[Any]:
    with kube.api_client() as api_client:
        yield api_client


@pytest.fixture
def settings() -> Settings:
    return Settings(
        eviction_retry=timedelta(milliseconds=50), poll_interval=timedelta(milliseconds=20)
    )


@pytest.fixture
def kube_activities(api: Any, settings: Settings) -> KubernetesActivities:
    return KubernetesActivities(client.CoreV1Api(api), client.CustomObjectsApi(api), settings)
