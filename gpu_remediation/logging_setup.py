"""Logging for the services: plain text, or one JSON object per line.

Every JSON line carries ``node``, ``workflow_id`` and ``rung`` (``null`` when
the line is about no node, e.g. a receiver's request summary), so log search
can follow one incident across the worker's activities, the receiver and the
watcher. They are found, in order, in:

1. the record's ``extra`` (``log.info(..., extra={"node": ...})``: the
   receiver and the watcher name the node and its workflow this way);
2. the activity's context, set by :class:`ActivityLogContextInterceptor` from
   the activity's input (``node``; ``rung`` from the input or the rung the
   activity serves) and its info (workflow id), which also reaches log lines
   of libraries the activity calls (the Kubernetes client, botocore), threads
   included;
3. the Temporal SDK's own ``temporal_activity`` / ``temporal_workflow``
   extras (workflow id; ``workflow.logger`` lines from the node workflow);
4. the node workflow id itself (``gpu-remediation/<cluster>/<node>``).
"""

from __future__ import annotations

import contextvars
import json
import logging
import re
import sys
import traceback
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from temporalio import activity, workflow
from temporalio.worker import (
    ActivityInboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)

from gpu_remediation.ids import Activities

LogFormat = Literal["text", "json"]
LOG_FORMATS: tuple[LogFormat, ...] = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# The rung each activity serves, for activities whose input does not say.
# Verification runs `run_diagnostic` (and the EFA loopback) too; their lines say "diagnose".
ACTIVITY_RUNGS: dict[str, str] = {
    Activities.QUARANTINE_NODE: "quarantine",
    Activities.DRAIN_GPU_PODS: "stop_gpu_work",
    Activities.RUN_DIAGNOSTIC: "diagnose",
    Activities.RUN_EFA_LOOPBACK: "diagnose",
    Activities.RESET_GPUS: "gpu_reset",
    Activities.REBOOT_NODE: "reboot",
    Activities.DELETE_NODE_CLAIM: "replace",
    Activities.WAIT_FOR_REPLACEMENT: "replace",
    Activities.ESCALATE: "escalate",
}

_NODE_WORKFLOW_ID = re.compile(r"^gpu-remediation/[^/]+/(?P<node>[^/]+)$")
# LogRecord attributes that are not user extras.
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}
_SDK_EXTRAS = frozenset(
    {"temporal_activity", "temporal_workflow", "activity_info", "workflow_info"}
)


@dataclass(frozen=True)
class LogContext:
    """What an activity's log lines are about."""

    node: str | None
    workflow_id: str | None
    rung: str | None
    activity: str | None


_context: contextvars.ContextVar[LogContext | None] = contextvars.ContextVar(
    "gpu_remediation_log_context", default=None
)


def current_log_context() -> LogContext | None:
    """The running activity's log context, if any."""
    return _context.get()


def node_from_workflow_id(workflow_id: str | None) -> str | None:
    """The node of a node workflow id (``gpu-remediation/<cluster>/<node>``), else None."""
    if not workflow_id:
        return None
    match = _NODE_WORKFLOW_ID.match(workflow_id)
    return match.group("node") if match else None


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, node, workflow_id, rung."""

    def format(self, record: logging.LogRecord) -> str:
        """Render ``record`` as a single line of JSON."""
        fields = record.__dict__
        ctx = _context.get()
        sdk: dict[str, Any] = {}
        for key in ("temporal_activity", "temporal_workflow"):
            value = fields.get(key)
            if isinstance(value, dict):
                sdk = value
                break
        workflow_id = (
            fields.get("workflow_id") or (ctx and ctx.workflow_id) or sdk.get("workflow_id")
        )
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "node": fields.get("node") or (ctx and ctx.node) or node_from_workflow_id(workflow_id),
            "workflow_id": workflow_id,
            "rung": None,
        }
        activity_type = (ctx and ctx.activity) or sdk.get("activity_type")
        out["rung"] = (
            fields.get("rung") or (ctx and ctx.rung) or ACTIVITY_RUNGS.get(activity_type or "")
        )
        if activity_type:
            out["activity"] = activity_type
        if "attempt" in sdk:
            out["attempt"] = sdk["attempt"]
        if "run_id" in sdk or "workflow_run_id" in sdk:
            out["run_id"] = sdk.get("run_id") or sdk.get("workflow_run_id")
        for key, value in fields.items():
            if key not in _STANDARD and key not in _SDK_EXTRAS and key not in out:
                out[key] = value
        if record.exc_info:
            out["exception"] = "".join(traceback.format_exception(*record.exc_info)).rstrip()
        elif record.exc_text:
            out["exception"] = record.exc_text
        if record.stack_info:
            out["stack"] = record.stack_info
        return json.dumps(out, default=str, ensure_ascii=False)


def configure_logging(log_format: LogFormat, level: str = "INFO") -> None:
    """Send every log record to stderr as text or JSON lines (replaces root handlers).

    In JSON mode the Temporal SDK stops appending its info dict to messages:
    the same details are fields of the line.

    Raises:
        ValueError: For an unknown format or level.
    """
    if log_format not in LOG_FORMATS:
        raise ValueError(f"unknown log format {log_format!r} (text or json)")
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}")
    handler = logging.StreamHandler(sys.stderr)
    formatter = JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(numeric)
    json_mode = log_format == "json"
    activity.logger.activity_info_on_message = not json_mode
    workflow.logger.workflow_info_on_message = not json_mode


class ActivityLogContextInterceptor(Interceptor):
    """Sets the log context (node, workflow id, rung) for each activity execution."""

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        """Wrap the activity's inbound calls."""
        return _ActivityLogContext(next)


class _ActivityLogContext(ActivityInboundInterceptor):
    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        info = activity.info()
        arg = input.args[0] if input.args else None
        node = getattr(arg, "node", None)
        rung = getattr(arg, "rung", None)
        context = LogContext(
            node=node if isinstance(node, str) else node_from_workflow_id(info.workflow_id),
            workflow_id=info.workflow_id,
            rung=str(rung) if rung is not None else ACTIVITY_RUNGS.get(info.activity_type),
            activity=info.activity_type,
        )
        token = _context.set(context)
        try:
            return await super().execute_activity(input)
        finally:
            _context.reset(token)
