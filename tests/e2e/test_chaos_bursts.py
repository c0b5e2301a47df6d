"""Chaos bursts beside a running stack: a Kubernetes latency window opens, slows, and closes."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from kubernetes import client

from demo.chaos.driver import BURST_SECONDS, LATENCY_S, ChaosDriver
from simulator.fleet import PoolSpec
from tests.conftest import assert_eventually
from tests.e2e.conftest import MakeStack, fleet_call


def _timed_read(api: Any) -> float:
    started = time.monotonic()
    client.CoreV1Api(api).read_node("gpu-0000")
    return time.monotonic() - started


async def test_a_latency_burst_slows_every_api_request_for_its_window_and_then_ends(
    make_stack: MakeStack,
) -> None:
    stack = await make_stack([PoolSpec(name="gpu", nodes=2)])
    faults = stack.fleet.kube.faults
    driver = ChaosDriver(stack, [])

    burst = asyncio.create_task(driver.inject("kube_api_latency"))
    await assert_eventually(
        lambda: fleet_call(faults.rules),
        lambda rules: any(r.latency == LATENCY_S for r in rules),
        message="the latency rule in force",
    )
    with stack.fleet.kube.api_client() as api:
        during = await fleet_call(lambda: _timed_read(api))
        event = await burst
        after = await fleet_call(lambda: _timed_read(api))

    assert during >= LATENCY_S
    assert after < LATENCY_S
    assert event.kind == "kube_api_latency"
    assert event.took_s >= BURST_SECONDS
    assert f"delayed {LATENCY_S:g}s" in event.detail
    assert driver.faults_injected == {"kube_api_latency": 1}
    assert faults.rules() == []
