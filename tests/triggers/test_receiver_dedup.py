"""The receiver's memory of recent deliveries: it only ever saves Temporal calls."""

from __future__ import annotations

import asyncio

import pytest
from temporalio.client import Client

from gpu_remediation.policy_loader import load_policy
from triggers.receiver import AlertOutcome, RecentDeliveries, create_app
from triggers.starter import IncidentStarter, TemporalUnavailableError


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Sender:
    """Counts sends; answers with ``outcome`` once ``gate`` opens."""

    def __init__(self, outcome: AlertOutcome = "delivered") -> None:
        self.outcome = outcome
        self.calls = 0
        self.gate = asyncio.Event()
        self.gate.set()
        self.error: BaseException | None = None

    async def __call__(self) -> AlertOutcome:
        self.calls += 1
        await self.gate.wait()
        if self.error is not None:
            raise self.error
        return self.outcome


async def test_a_delivered_report_is_remembered_until_its_ttl_runs_out() -> None:
    clock, send = Clock(), Sender()
    memory = RecentDeliveries(size=10, ttl=300, clock=clock)
    assert await memory.once("k", send) == ("delivered", False)
    clock.now = 299
    assert await memory.once("k", send) == ("delivered", True)
    assert send.calls == 1
    clock.now = 300
    assert memory.recent("k") is None
    assert await memory.once("k", send) == ("delivered", False)
    assert send.calls == 2


async def test_the_oldest_reports_are_forgotten_beyond_the_size() -> None:
    memory = RecentDeliveries(size=2, ttl=300, clock=Clock())
    for key in ("a", "b", "c"):
        await memory.once(key, Sender())
    assert memory.recent("a") is None
    assert memory.recent("b") == "delivered"
    assert memory.recent("c") == "delivered"


async def test_concurrent_duplicates_share_the_one_delivery_in_flight() -> None:
    memory, send = RecentDeliveries(size=10, ttl=300, clock=Clock()), Sender()
    send.gate.clear()
    calls = [asyncio.create_task(memory.once("k", send)) for _ in range(20)]
    await asyncio.sleep(0)
    send.gate.set()
    answers = await asyncio.gather(*calls)
    assert send.calls == 1
    assert answers.count(("delivered", False)) == 1
    assert answers.count(("delivered", True)) == 19


async def test_a_failed_delivery_fails_its_waiters_and_is_not_remembered() -> None:
    memory, send = RecentDeliveries(size=10, ttl=300, clock=Clock()), Sender()
    send.gate.clear()
    send.error = TemporalUnavailableError("down")
    calls = [asyncio.create_task(memory.once("k", send)) for _ in range(5)]
    await asyncio.sleep(0)
    send.gate.set()
    answers = await asyncio.gather(*calls, return_exceptions=True)
    assert all(isinstance(a, TemporalUnavailableError) for a in answers)
    assert memory.recent("k") is None
    send.error = None
    assert await memory.once("k", send) == ("delivered", False)


async def test_an_interrupted_delivery_tells_its_waiters_to_retry() -> None:
    memory, send = RecentDeliveries(size=10, ttl=300, clock=Clock()), Sender()
    send.gate.clear()
    first = asyncio.create_task(memory.once("k", send))
    await asyncio.sleep(0)
    waiter = asyncio.create_task(memory.once("k", send))
    await asyncio.sleep(0)
    first.cancel()
    with pytest.raises(TemporalUnavailableError, match="delivery interrupted"):
        await waiter
    with pytest.raises(asyncio.CancelledError):
        await first


async def test_no_incident_answers_are_not_remembered() -> None:
    memory, send = RecentDeliveries(size=10, ttl=300, clock=Clock()), Sender("no_incident")
    await memory.once("k", send)
    await memory.once("k", send)
    assert send.calls == 2


async def test_size_zero_sends_everything() -> None:
    memory, send = RecentDeliveries(size=0, ttl=300, clock=Clock()), Sender()
    for _ in range(3):
        assert await memory.once("k", send) == ("delivered", False)
    assert send.calls == 3


def test_the_app_refuses_a_short_token(dev_client: Client) -> None:
    starter = IncidentStarter(dev_client, cluster="c", policy=load_policy())
    with pytest.raises(ValueError, match="at least 16 characters"):
        create_app(starter, "short", client=dev_client)
