"""Activities that run the fixed host commands: GPU reset, DCGM diagnostics, EFA loopback.

The executor (SSM Run Command, or a Kubernetes Job pinned to the node) is
injected and chosen by settings; both run the same scripts from
``activities.host_commands``, so these activities and their parsing are the
same either way.

Parsing runs on a thread (``asyncio.to_thread``), not on the event loop: the
output comes from the node, so its size and content are the node's to choose,
and while one activity parses, the loop serves every other activity of the
worker (issue 35). The parsers are linear in their input
(tests/gpu_remediation/test_parsers_linear.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.host_commands import (
    CommandOutcome,
    HostCommand,
    HostCommandExecutor,
    decode_output,
)
from gpu_remediation import contracts as c
from gpu_remediation.ids import Activities
from gpu_remediation.tool_outputs.common import DiagnosticParseError, combine
from gpu_remediation.tool_outputs.dcgm_diag import parse_dcgm_diag
from gpu_remediation.tool_outputs.dcgm_health import parse_dcgm_health
from gpu_remediation.tool_outputs.efa_loopback import judge_efa_loopback
from gpu_remediation.tool_outputs.gpu_reset import parse_gpu_reset


class HostActivities:
    """GPU reset and verification diagnostics on a node's host."""

    def __init__(self, executor: HostCommandExecutor) -> None:
        """Bind to an executor.

        Args:
            executor: Runs host commands (``SsmExecutor`` or ``JobExecutor``).
        """
        self._executor = executor

    def all(self) -> list[Callable[..., Any]]:
        """The activities, for a worker's registration (a new rung's activity goes here too)."""
        return [self.reset_gpus, self.run_diagnostic, self.run_efa_loopback]

    @activity.defn(name=Activities.RESET_GPUS)
    async def reset_gpus(self, input: c.ResetGpusInput) -> c.ResetGpusResult:
        """Reset the named GPUs with ``nvidia-smi -r`` (all of them when none are named).

        A reset that the platform does not support (EC2 blocks the function
        level reset) or a GPU that fell off the bus is a typed outcome, not an
        error: the ladder climbs on it.
        """
        command = HostCommand(kind="gpu_reset", gpu_indices=input.gpu_indices)
        outcome = await self._executor.run(input.node, input.provider_id, command)
        return await asyncio.to_thread(
            parse_gpu_reset,
            outcome.exit_code,
            outcome.stdout,
            outcome.stderr,
            command_id=outcome.command_id,
        )

    @activity.defn(name=Activities.RUN_DIAGNOSTIC)
    async def run_diagnostic(self, input: c.RunDiagnosticInput) -> c.DiagnosticResult:
        """Run ``dcgmi diag`` at the level asked, then re-check DCGM health.

        Raises:
            ApplicationError: ``DiagnosticUnreadable`` when the output cannot be
                read (truncated, garbled): never taken for a pass.
        """
        diag_command = HostCommand(
            kind="dcgm_diag", level=input.level, gpu_indices=input.gpu_indices
        )
        diag_outcome = await self._executor.run(input.node, input.provider_id, diag_command)
        health_outcome = await self._executor.run(
            input.node, input.provider_id, HostCommand(kind="dcgm_health")
        )
        now = datetime.now(UTC)
        return await asyncio.to_thread(
            _diagnostic_verdict, input.node, diag_outcome, health_outcome, now
        )

    @activity.defn(name=Activities.RUN_EFA_LOOPBACK)
    async def run_efa_loopback(self, input: c.RunEfaLoopbackInput) -> c.EfaLoopbackResult:
        """Load every EFA device with ``fi_pingpong`` in loopback, then judge the report.

        Changes nothing on the host: a retry runs the test again.

        Raises:
            ApplicationError: ``DiagnosticUnreadable`` when the report cannot be
                decoded (truncated, garbled): never taken for a pass.
        """
        outcome = await self._executor.run(
            input.node, input.provider_id, HostCommand(kind="efa_loopback")
        )
        return await asyncio.to_thread(_loopback_verdict, input, outcome, datetime.now(UTC))


def _loopback_verdict(
    input: c.RunEfaLoopbackInput, outcome: CommandOutcome, now: datetime
) -> c.EfaLoopbackResult:
    """Decode and judge the loopback's report (run on a thread).

    Raises:
        ApplicationError: ``DiagnosticUnreadable`` when the output cannot be decoded.
    """
    try:
        report = decode_output(outcome.stdout)
    except ValueError as err:
        raise ApplicationError(
            f"EFA loopback output on {input.node} unreadable (exit {outcome.exit_code}): {err}",
            type="DiagnosticUnreadable",
        ) from err
    return judge_efa_loopback(
        report,
        max_counter_increase=input.max_counter_increase,
        min_bandwidth_fraction=input.min_bandwidth_fraction,
        observed_at=now,
    )


def _diagnostic_verdict(
    node: str, diag_outcome: CommandOutcome, health_outcome: CommandOutcome, now: datetime
) -> c.DiagnosticResult:
    """Decode and read both outputs into one verdict (run on a thread).

    Raises:
        ApplicationError: ``DiagnosticUnreadable`` when either output cannot be read.
    """
    try:
        diag = parse_dcgm_diag(
            decode_output(diag_outcome.stdout), diag_outcome.exit_code, observed_at=now
        )
        health = parse_dcgm_health(decode_output(health_outcome.stdout), observed_at=now)
    except (DiagnosticParseError, ValueError) as err:
        raise ApplicationError(
            f"diagnostic output on {node} unreadable: {err}", type="DiagnosticUnreadable"
        ) from err
    return combine(diag, health)
