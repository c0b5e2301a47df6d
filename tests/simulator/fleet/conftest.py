"""Fixtures for the fleet simulator tests: a fast fleet and the worker's real activities."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from temporalio.testing import ActivityEnvironment

from simulator.fleet import Fleet, FleetConfig, PoolSpec
from simulator.kube_api import NODES
from worker import production_activities

# 1 real second = 20 simulated minutes: a reboot (4 min) takes 0.2 s, a diag r2 0.25 s.
FAST = 1200.0
FAST_SETTINGS: dict[str, Any] = {
    "poll_interval": timedelta(milliseconds=20),
    "eviction_retry": timedelta(milliseconds=20),
}


def small_config(**overrides: Any) -> FleetConfig:
    """Two pools of three nodes: ``h100`` resets GPUs, ``p5`` is EC2's no-reset profile."""
    values: dict[str, Any] = {
        "pools": [
            PoolSpec(name="h100", nodes=3),
            PoolSpec(name="p5", nodes=3, reset_supported=False),
        ],
        "time_factor": FAST,
        "seed": 7,
    }
    values.update(overrides)
    return FleetConfig(**values)


@pytest.fixture
def make_fleet() -> Iterator[Callable[..., Fleet]]:
    """Start fleets (``small_config`` with overrides); all are stopped after the test."""
    started: list[Fleet] = []

    def make(**overrides: Any) -> Fleet:
        fleet = Fleet(small_config(**overrides)).start()
        started.append(fleet)
        return fleet

    yield make
    for fleet in started:
        fleet.stop()


@pytest.fixture
def fleet(make_fleet: Callable[..., Fleet]) -> Fleet:
    """A small fast fleet without workloads or random faults."""
    return make_fleet()


class Real:
    """The worker's production activities wired to a fleet, run in an activity environment."""

    def __init__(self, fleet: Fleet, **settings: Any) -> None:
        self.fleet = fleet
        self.settings = fleet.worker_settings(**{**FAST_SETTINGS, **settings})
        self._by_name = {fn.__name__: fn for fn in production_activities(self.settings)}

    async def run(self, name: str, arg: Any) -> Any:
        """Run the real activity ``name`` with ``arg``."""
        return await ActivityEnvironment().run(self._by_name[name], arg)


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Credentials for the worker's boto3 clients (the SDK's normal chain)."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")


@pytest.fixture
def real(fleet: Fleet, aws_env: None) -> Real:
    """The production activities (SSM executor) against ``fleet``."""
    return Real(fleet)


def conditions(fleet: Fleet, node: str) -> dict[str, dict[str, Any]]:
    """The node's conditions by type, as the API serves them."""
    obj = fleet.store.get(NODES, node)
    return {c["type"]: c for c in obj["status"]["conditions"]}


def condition_status(fleet: Fleet, node: str, type_: str) -> str | None:
    """One condition's status (None when absent)."""
    found = conditions(fleet, node).get(type_)
    return found["status"] if found else None
