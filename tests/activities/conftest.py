"""Fixtures for the activity tests: fast settings and the Kubernetes activities."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from kubernetes import client

from activities.kubernetes import KubernetesActivities
from gpu_remediation.settings import Settings


@pytest.fixture
def settings() -> Settings:
    return Settings(
        eviction_retry=timedelta(milliseconds=50), poll_interval=timedelta(milliseconds=20)
    )


@pytest.fixture
def kube_activities(api: Any, settings: Settings) -> KubernetesActivities:
    return KubernetesActivities(client.CoreV1Api(api), client.CustomObjectsApi(api), settings)
