"""The host activities read the node's output on a thread, never on the worker's event loop.

While one activity parses what a node printed (its size and content are the
node's to choose), the loop keeps serving every other activity (issue 35).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

import activities.host as host
from activities.host import HostActivities
from activities.host_commands import CommandOutcome, HostCommand, encode_output
from gpu_remediation.contracts import ResetGpusInput, RunDiagnosticInput
from tests.activities.ssm_support import fixture

RESET = ResetGpusInput(node="gpu-1", incident_id="i", provider_id="aws:///us-west-2a/i-0abc")
DIAG = RunDiagnosticInput(
    node="gpu-1", incident_id="i", provider_id="aws:///us-west-2a/i-0abc", level=2
)


class Executor:
    """Answers each command kind with a fixed output."""

    def __init__(self, **stdout: str) -> None:
        self.stdout = stdout

    async def run(self, node: str, provider_id: str, command: HostCommand) -> CommandOutcome:
        return CommandOutcome(
            command_id=command.kind, exit_code=0, stdout=self.stdout[command.kind]
        )


EXECUTOR = Executor(
    gpu_reset="GPU 00000000:53:00.0 was successfully reset.\n",
    dcgm_diag=encode_output(fixture("dcgm4_pass.json")),
    dcgm_health=encode_output(fixture("health_healthy.json")),
)


def _watched(monkeypatch: pytest.MonkeyPatch, name: str, seen: list[int]) -> None:
    """Record the thread ``activities.host.<name>`` runs on."""
    original: Callable[..., Any] = getattr(host, name)

    def parse(*args: Any, **kwargs: Any) -> Any:
        seen.append(threading.get_ident())
        return original(*args, **kwargs)

    monkeypatch.setattr(host, name, parse)


async def test_reset_and_diagnostic_outputs_are_parsed_off_the_event_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[int] = []
    for name in ("parse_gpu_reset", "parse_dcgm_diag", "parse_dcgm_health", "decode_output"):
        _watched(monkeypatch, name, seen)
    activities = HostActivities(EXECUTOR)
    assert (await ActivityEnvironment().run(activities.reset_gpus, RESET)).status == "ok"
    assert (await ActivityEnvironment().run(activities.run_diagnostic, DIAG)).passed
    assert len(seen) == 5  # the reset; two decodes, the diag and the health check
    assert threading.get_ident() not in seen


async def test_the_event_loop_runs_while_an_output_is_parsed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ticks = 0
    during: list[int] = []
    original = host.parse_dcgm_health

    def slow_parse(*args: Any, **kwargs: Any) -> Any:
        # A parse that takes a while (time.sleep stands for the CPU it would use):
        # the loop's ticker must move meanwhile, which it cannot if the parse
        # holds the loop.
        before = ticks
        time.sleep(0.05)
        during.append(ticks - before)
        return original(*args, **kwargs)

    monkeypatch.setattr(host, "parse_dcgm_health", slow_parse)
    done = asyncio.Event()

    async def tick() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            await asyncio.sleep(0.001)

    ticker = asyncio.create_task(tick())
    try:
        result = await ActivityEnvironment().run(HostActivities(EXECUTOR).run_diagnostic, DIAG)
    finally:
        done.set()
        await ticker
    assert result.passed
    assert during[0] > 0


async def test_unreadable_output_still_fails_the_activity_from_the_thread() -> None:
    executor = Executor(dcgm_diag="not encoded", dcgm_health="not encoded")
    with pytest.raises(ApplicationError) as raised:
        await ActivityEnvironment().run(HostActivities(executor).run_diagnostic, DIAG)
    assert raised.value.type == "DiagnosticUnreadable"
