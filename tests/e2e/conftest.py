"""End-to-end harness: the simulated fleet, ``remediate worker`` and the watcher on the dev server.

Each test gets its own small fleet, cluster name, task queue and replacement
semaphore (``demo.stack.DemoStack``, the demo's own wiring), so tests never
see each other's incidents. Faults reach the remediation only the real way:
the simulated node agent sets Node Problem Detector conditions, the watcher
reports them, the worker's production activities act on the fleet over HTTP.
The policy is the default one scaled to the fleet's time factor
(``demo.policy``), with the overrides a test gives in simulated time.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol

import pytest_asyncio
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment

from demo.incidents import Incident
from demo.policy import scale_policy
from demo.stack import DemoStack, StackOptions
from gpu_remediation.policy_loader import parse_policy
from simulator.fleet import FleetConfig, PoolSpec, Scenario
from tests.conftest import assert_eventually

# 1 real second = 10 simulated minutes: a reboot takes 0.4 s, a diag level 2 0.5 s.
FAST = 600.0
# Behaviour tests keep the policy's windows above a loaded CI machine's latency;
# tests of the windows themselves pass None (the demo's and the comparison's way).
WINDOW_FLOOR = timedelta(seconds=5)


class MakeStack(Protocol):
    """Start a stack for a test (stopped, and its workflows terminated, afterwards)."""

    def __call__(
        self,
        pools: list[PoolSpec],
        *,
        scenario: Scenario | None = None,
        policy: str = "",
        time_factor: float = FAST,
        window_floor: timedelta | None = WINDOW_FLOOR,
        nvsentinel: bool = False,
        **fleet: Any,
    ) -> Awaitable[DemoStack]: ...


@pytest_asyncio.fixture
async def make_stack(dev_env: WorkflowEnvironment, tmp_path: Path) -> AsyncIterator[MakeStack]:
    stacks: list[DemoStack] = []
    address = dev_env.client.service_client.config.target_host

    async def make(
        pools: list[PoolSpec],
        *,
        scenario: Scenario | None = None,
        policy: str = "",
        time_factor: float = FAST,
        window_floor: timedelta | None = WINDOW_FLOOR,
        nvsentinel: bool = False,
        **fleet: Any,
    ) -> DemoStack:
        tag = uuid.uuid4().hex[:8]
        options = StackOptions(
            fleet=FleetConfig(
                pools=pools, time_factor=time_factor, seed=3, scenario=scenario, **fleet
            ),
            policy=scale_policy(
                parse_policy(policy or "{}"), time_factor, window_floor=window_floor
            ),
            run_dir=tmp_path,
            cluster=f"e2e-{tag}",
            task_queue=f"tq-e2e-{tag}",
            semaphore_workflow_id=f"semaphore-e2e-{tag}",
            poll_interval=timedelta(milliseconds=50),
            watcher_tick=0.1,
            nvsentinel=nvsentinel,
        )
        stack = DemoStack(dev_env.client, address, options)
        stacks.append(stack)
        return await stack.start()

    yield make
    for stack in stacks:
        await stack.stop(force=True)
        await terminate_open(stack)


async def terminate_open(stack: DemoStack) -> None:
    """Leave nothing running on the shared dev server (escalated incidents wait for days)."""
    client = stack.client
    query = f"ExecutionStatus = 'Running' AND TaskQueue = '{stack.options.task_queue}'"
    async for execution in client.list_workflows(query):
        with contextlib.suppress(RPCError):
            await client.get_workflow_handle(execution.id, run_id=execution.run_id).terminate(
                reason="end of the end-to-end test"
            )


async def settled_incidents(
    stack: DemoStack, count: int, *, timeout: float = 30.0
) -> list[Incident]:
    """Wait until ``count`` incidents exist and all have their outcome; return them."""

    async def probe() -> list[Incident]:
        incidents = await stack.book.refresh_list()
        await stack.book.refresh_states()
        return incidents

    return await assert_eventually(
        probe,
        lambda found: len(found) >= count and all(i.settled for i in found),
        timeout=timeout,
        interval=0.2,
        message=f"{count} settled incident(s)",
    )


def attempts(incident: Incident) -> list[str]:
    """The rungs the incident ran, in order."""
    assert incident.state is not None
    return [attempt.rung.value for attempt in incident.state.attempts]


def decisions(incident: Incident) -> list[tuple[str, str]]:
    """(stage, action) of every decision."""
    assert incident.state is not None
    return [(d.stage, d.action) for d in incident.state.decisions]


async def fleet_call(fn: Callable[[], Any]) -> Any:
    """Call a blocking fleet method off the event loop."""
    return await asyncio.to_thread(fn)
