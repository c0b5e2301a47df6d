"""The time activities wait in while the world changes: real, or Temporal's test server's.

An activity that waits for the world (a node to come back from a reboot, pods to
go, a Job to finish, a replacement to be Ready) reads how long it has waited and
sleeps between looks. In production that is the event loop's clock. In the
clock-free what-if (ADR 018) the world is the fleet simulator, whose clock is the
time-skipping test server's: there the activity reads the server's time and
sleeps by letting the server's time move (``UnlockTimeSkippingWithSleep``), so a
45-minute reboot window costs no real time and lasts 45 minutes of the fleet's.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Protocol

from google.protobuf.empty_pb2 import Empty
from temporalio.api.testservice.v1 import SleepRequest
from temporalio.client import Client


class WorldTime(Protocol):
    """A clock and a sleep on the world's timeline (seconds)."""

    async def now(self) -> float:
        """Seconds on this timeline, for deadlines (only differences mean anything)."""

    async def wall(self) -> datetime:
        """The calendar time on this timeline (UTC), to stamp and compare with the world's."""

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` of this timeline."""


class RealTime:
    """The event loop's clock: production, and every test of a real-time system."""

    async def now(self) -> float:
        """The event loop's monotonic time."""
        return asyncio.get_running_loop().time()

    async def wall(self) -> datetime:
        """``datetime.now(UTC)``."""
        return datetime.now(UTC)

    async def sleep(self, seconds: float) -> None:
        """``asyncio.sleep``."""
        await asyncio.sleep(seconds)


REAL_TIME = RealTime()


class TestServerTime:
    """The time-skipping test server's clock (the clock-free what-if only).

    ``sleep`` must be called from a running activity: the server holds its time
    for each activity while it runs, and the sleep hands that hold back for its
    length, taking it again when the server's time reached the end.

    Args:
        client: A client of the test server.
    """

    __test__ = False  # not a pytest class, though its name starts with "Test"

    def __init__(self, client: Client) -> None:
        self._client = client

    async def now(self) -> float:
        """The server's time, in seconds since the epoch."""
        return (await self.wall()).timestamp()

    async def wall(self) -> datetime:
        """The server's time."""
        response = await self._client.test_service.get_current_time(Empty())
        return response.time.ToDatetime().replace(tzinfo=UTC)

    async def sleep(self, seconds: float) -> None:
        """Let the server's time move ``seconds`` (it skips unless other work holds it)."""
        request = SleepRequest()
        request.duration.FromTimedelta(timedelta(seconds=max(0.0, seconds)))
        await self._client.test_service.unlock_time_skipping_with_sleep(request)
