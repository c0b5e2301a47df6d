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
from agent.runner import MAX_PARSED_OUTPUT, ToolResult, head, run

SOURCE = "dcgmi-health"
# "Health watches are not enabled" / "watch is not set": a word holding "watch",
# then "not enabled" or "not set". Read one word at a time, from word starts
# only and without giving characters back (``\w++``): ``watch\w*\s+...``
# re-read the rest of a long word from every "watch" inside it, quadratic
# (64 KB of "watchwatch..." took 4.6 s, issue 35).
_NOT_ENABLED = re.compile(r"(?<!\w)(\w++)\s+(?:are\s+|is\s+)?not\s+(?:enabled|set)", re.IGNORECASE)
_WATCH = re.compile("watch", re.IGNORECASE)


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


def _watches_off(text: str) -> bool:
    """Whether ``text`` says DCGM's health watches are off."""
    position = 0
    while (found := _NOT_ENABLED.search(text, position)) is not None:
        if _WATCH.search(found.group(1)):
            return True
        # On from the end of the word, not of the match: "enabled" may run on
        # into a word holding "watch" ("not enabledwatch not set").
        position = found.end(1)
    return False


def _values(document: Any) -> list[str]:
    """Every string under a ``value`` key, in any order.

    A loop, not recursion: nesting is as deep as the tool's output makes it.
    """
    found: list[str] = []
    pending = [document]
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "value" and isinstance(value, str):
                    found.append(value)
                else:
                    pending.append(value)
        elif isinstance(node, list):
            pending.extend(node)
    return found


def healthy_fast(stdout: bytes) -> bool:
    """True only for complete JSON with an overall health and every value ``Healthy``."""
    text = stdout.decode("utf-8", "replace")
    start = text.find("{")
    if start < 0:
        return False
    try:
        document = json.loads(text[start:])
    except (ValueError, RecursionError):  # not JSON, a number too long, or nested too deep
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
    if len(result.stdout) > MAX_PARSED_OUTPUT:
        # Not what dcgmi prints for a node, and its head alone is no complete
        # JSON: not read, so it costs no time in the cycle.
        return DcgmOutcome(
            unknown=f"DCGM health unknown: dcgmi health printed {len(result.stdout)} bytes,"
            f" more than the {MAX_PARSED_OUTPUT} read"
        )
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
        everything = text + head(result.stderr).decode("utf-8", "replace")
        if _watches_off(everything):
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
