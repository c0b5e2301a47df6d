"""DCGM health: ``dcgmi health -c -j``, read from its JSON (the exit code is 0 even when unhealthy).

A healthy answer is recognised with the standard library alone (every
``value`` in the document is ``Healthy``), so a healthy cycle stays cheap.
Anything else goes through the project's full parser,
``gpu_remediation.tool_outputs.dcgm_health.parse_dcgm_health``, which turns failing systems into
DCGM evidence (error ids recognised from DCGM's messages).
"""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime
from typing import Any

from agent.config import AgentConfig
from agent.findings import Problem
from agent.runner import ToolResult, run

SOURCE = "dcgmi-health"
_WATCHES_OFF = re.compile(r"watch\w*\s+(?:are\s+|is\s+)?not\s+(?:enabled|set)", re.IGNORECASE)


class DcgmOutcome:
    """What the DCGM check concluded."""

    def __init__(
        self, problems: list[Problem] | None = None, unknown: str | None = None, detail: str = ""
    ) -> None:
        """Problems found, or why health is unknown, and a line for a healthy message."""
        self.problems = problems or []
        self.unknown = unknown
        self.detail = detail


def health_argv(config: AgentConfig, *action: str) -> list[str]:
    """``dcgmi health [--host H] <action>`` (``-c -j`` to check)."""
    argv = [config.dcgmi, "health"]
    if config.dcgm_host:
        argv += ["--host", config.dcgm_host]
    return argv + list(action or ("-c", "-j"))


def _values(node: Any) -> list[str]:
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "value" and isinstance(value, str):
                found.append(value)
            else:
                found.extend(_values(value))
    elif isinstance(node, list):
        for item in node:
            found.extend(_values(item))
    return found


def healthy_fast(stdout: bytes) -> bool:
    """True only for complete JSON with an overall health and every value ``Healthy``."""
    text = stdout.decode("utf-8", "replace")
    start = text.find("{")
    if start < 0:
        return False
    try:
        document = json.loads(text[start:])
    except ValueError:
        return False
    body = document.get("body") if isinstance(document, dict) else None
    if not isinstance(body, dict) or "Overall Health" not in body:
        return False
    values = _values(body)
    return bool(values) and all(v.strip().lower() == "healthy" for v in values)


def evaluate(result: ToolResult, config: AgentConfig, deadline: float) -> DcgmOutcome:
    """Turn a ``dcgmi health -c -j`` run into problems, or say why health is unknown.

    Args:
        result: The run of :func:`health_argv`.
        config: For re-enabling health watches.
        deadline: ``time.monotonic()`` by which the cycle must be done.
    """
    if result.status in ("hung", "missing", "error"):
        return DcgmOutcome(unknown=f"DCGM health unknown: {result.describe()}")
    if healthy_fast(result.stdout):
        return DcgmOutcome(detail="DCGM healthy")
    # Imported only when health is not plainly healthy: pydantic is costly on a node.
    from gpu_remediation.tool_outputs.common import DiagnosticParseError
    from gpu_remediation.tool_outputs.dcgm_health import parse_dcgm_health

    text = result.stdout.decode("utf-8", "replace")
    observed = time.time()
    try:
        verdict = parse_dcgm_health(
            text, observed_at=datetime.fromtimestamp(observed, UTC), source=SOURCE
        )
    except DiagnosticParseError as err:
        everything = text + result.stderr.decode("utf-8", "replace")
        if _WATCHES_OFF.search(everything):
            return DcgmOutcome(unknown=_enable_watches(config, deadline))
        if result.status == "failed":
            return DcgmOutcome(unknown=f"DCGM health unknown: {result.describe()}")
        return DcgmOutcome(unknown=f"DCGM health unknown: {str(err)[:300]}")
    if verdict.passed:
        return DcgmOutcome(detail=verdict.summary)
    problems = [
        Problem(
            kind="dcgm",
            source=SOURCE,
            text=e.message,
            gpu_index=e.gpu_index,
            error_id=e.error_id,
            severity=e.severity,
            test=e.test,
            observed_at=observed,
        )
        for e in verdict.failures
        if e.kind == "dcgm"
    ]
    if not problems:  # overall Failure without a failing system named
        problems = [Problem(kind="note", source=SOURCE, text=verdict.summary, observed_at=observed)]
    return DcgmOutcome(problems=problems, detail=verdict.summary)


def _enable_watches(config: AgentConfig, deadline: float) -> str:
    if not config.dcgm_set_watches:
        return "DCGM health unknown: health watches are not enabled (dcgmi health -s a)"
    timeout = max(0.1, min(config.dcgm_timeout, deadline - time.monotonic()))
    result = run(health_argv(config, "-s", "a"), timeout)
    if result.status != "ok":
        return f"DCGM health unknown: watches off and enabling them failed: {result.describe()}"
    return "DCGM health unknown: watches were off, enabled now (results in about 60 s)"
