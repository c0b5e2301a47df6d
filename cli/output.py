"""How the operator commands report: rich tables for people, one JSON object for scripts.

Every command prints its result to stdout (tables, or with ``--json`` exactly
one JSON object) and its errors to stderr, and exits with one of
:class:`ExitCode`, so scripts can tell "refused" from "Temporal is down" from
"nothing to act on".
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine
from datetime import UTC, datetime, timedelta
from enum import IntEnum
from typing import Annotated, Any, NoReturn, TypeVar

import typer
from pydantic import BaseModel
from rich.console import Console
from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import FailureError

T = TypeVar("T")


class ExitCode(IntEnum):
    """Exit codes of every operator command (documented in docs/operations.md)."""

    OK = 0
    FAILED = 1
    """The workflow's validator refused the request, or the operation failed."""
    INVALID_INPUT = 2
    """Bad arguments or options (typer's usage errors use 2 as well)."""
    UNREACHABLE = 3
    """Temporal could not be reached (or has no such namespace)."""
    NOT_FOUND = 4
    """The node has no (open) incident, or the semaphore does not exist yet."""


class CliError(Exception):
    """A failure to report on stderr with an exit code, without a traceback."""

    def __init__(self, message: str, code: ExitCode = ExitCode.FAILED) -> None:
        super().__init__(message)
        self.code = code


JsonOption = Annotated[
    bool, typer.Option("--json", help="Print one JSON object on stdout instead of tables.")
]


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run a command's coroutine; turn a :class:`CliError` into a message and an exit code."""
    try:
        return asyncio.run(main)
    except CliError as err:
        fail(str(err), err.code)


def refusal(err: WorkflowUpdateFailedError) -> str:
    """The validator's own message from a refused update (without the error type)."""
    cause = err.cause
    return cause.message if isinstance(cause, FailureError) else str(cause)


def fail(message: str, code: ExitCode) -> NoReturn:
    """Print ``message`` on stderr and exit with ``code``."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(int(code))


def warn(message: str) -> None:
    """Print a warning on stderr (the command still succeeds)."""
    typer.echo(f"warning: {message}", err=True)


def emit_json(data: Any) -> None:
    """Print ``data`` (models included) as one JSON object on stdout."""
    typer.echo(json.dumps(jsonable(data), indent=2))


def jsonable(data: Any) -> Any:
    """``data`` with pydantic models, datetimes and durations turned into JSON values."""
    if isinstance(data, BaseModel):
        return data.model_dump(mode="json")
    if isinstance(data, dict):
        return {str(key): jsonable(value) for key, value in data.items()}
    if isinstance(data, list | tuple):
        return [jsonable(value) for value in data]
    if isinstance(data, datetime):
        return data.isoformat()
    if isinstance(data, timedelta):
        return data.total_seconds()
    return data


def console() -> Console:
    """A console on the current stdout (created per command, so test runners capture it)."""
    return Console()


def age(since: datetime, now: datetime | None = None) -> str:
    """A short age such as ``3d4h``, ``2h5m``, ``4m10s`` or ``12s``."""
    seconds = max(0, int(((now or datetime.now(UTC)) - since).total_seconds()))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours}h"
    if hours:
        return f"{hours}h{minutes}m"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"


def timestamp(value: datetime | None) -> str:
    """A UTC time to the second, or ``-``."""
    if value is None:
        return "-"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")
