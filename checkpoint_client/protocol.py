"""The checkpoint handshake's annotations and values (docs/checkpoint-contract.md).

Pure functions, standard library only: parsing a request the system wrote,
encoding the answer the job writes. Used by :mod:`checkpoint_client.client`
and by the fleet simulator's training jobs, so both speak the same contract.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

OPT_IN_ANNOTATION = "gpu-remediation.io/checkpoint"
"""A job's pods carry ``gpu-remediation.io/checkpoint: supported`` to take part."""
SUPPORTED = "supported"
REQUEST_ANNOTATION = "gpu-remediation.io/checkpoint-request"
ANSWER_ANNOTATION = "gpu-remediation.io/checkpoint-answer"
VERSION = 1
URGENCIES = ("checkpoint_first", "when_idle")
MAX_ANSWER_BYTES = 1024
"""The contract's bound on the answer's value (UTF-8 bytes)."""
MAX_REQUEST_BYTES = 4096
"""This helper's bound on a request's value: anything longer is not a request it trusts."""
STEP_TIME_ANNOTATION = "gpu-remediation.io/step-time"
"""Where a pod writes its own time per training step (docs/checkpoint-contract.md)."""
MAX_STEP_TIME_BYTES = 256
"""The contract's bound on a step-time value (UTF-8 bytes)."""
MAX_STEP_SECONDS = 86_400.0
"""A step longer than a day is not a step time the detector can use."""

_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$")


class ProtocolError(ValueError):
    """A request or answer that does not follow the contract; the message names the field."""


def parse_time(value: Any, field: str) -> datetime:
    """Parse an RFC 3339 timestamp (``2026-12-04T13:10:00Z``) into an aware UTC datetime.

    Raises:
        ProtocolError: Not a string in RFC 3339 form.
    """
    if not isinstance(value, str) or not _RFC3339.fullmatch(value):
        raise ProtocolError(f"{field}: expected an RFC 3339 time, got {value!r}")
    text = value.upper().replace("Z", "+00:00")
    head, dot, rest = text.partition(".")
    if dot:
        # Python reads at most microseconds: cut nanoseconds, keep the offset.
        digits = rest[: len(rest) - len(rest.lstrip("0123456789"))]
        text = f"{head}.{digits[:6].ljust(6, '0')}{rest[len(digits) :]}"
    try:
        return datetime.fromisoformat(text).astimezone(UTC)
    except ValueError as err:
        raise ProtocolError(f"{field}: {value!r} is not a valid time ({err})") from err


def format_time(moment: datetime) -> str:
    """``2026-12-04T13:04:31Z``: UTC, whole seconds (naive datetimes are taken as UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _versioned(raw: str, what: str, limit: int) -> dict[str, Any]:
    """A bounded JSON object of the contract's version."""
    size = len(raw.encode())
    if size > limit:
        raise ProtocolError(f"{what}: {size} bytes, more than {limit}")
    try:
        value = json.loads(raw)
    except (json.JSONDecodeError, RecursionError) as err:
        raise ProtocolError(f"{what}: not JSON ({err})") from err
    if not isinstance(value, dict):
        raise ProtocolError(f"{what}: expected a JSON object, got {type(value).__name__}")
    version = value.get("version")
    if version != VERSION or isinstance(version, bool):
        raise ProtocolError(f"{what}.version: expected {VERSION}, got {version!r}")
    return value


def _object(raw: str, what: str, limit: int) -> dict[str, Any]:
    """A request or an answer: versioned, naming its incident."""
    value = _versioned(raw, what, limit)
    incident = value.get("incident")
    if not isinstance(incident, str) or not incident:
        raise ProtocolError(f"{what}.incident: expected a non-empty string, got {incident!r}")
    return value


@dataclass(frozen=True, slots=True)
class Request:
    """A checkpoint request: save before ``deadline``, then echo ``incident`` in the answer."""

    incident: str
    deadline: datetime
    urgency: str
    node: str = ""
    reason: str = ""

    @property
    def urgent(self) -> bool:
        """Whether to save now (``checkpoint_first``) rather than at the next convenient step."""
        return self.urgency == "checkpoint_first"


def parse_request(raw: str) -> Request:
    """Read a ``gpu-remediation.io/checkpoint-request`` value.

    Fields the contract does not name are ignored (a newer system may add some).

    Raises:
        ProtocolError: Oversized, not JSON, or a field missing or of the wrong type.
    """
    value = _object(raw, "request", MAX_REQUEST_BYTES)
    urgency = value.get("urgency")
    if urgency not in URGENCIES:
        raise ProtocolError(f"request.urgency: expected one of {URGENCIES}, got {urgency!r}")
    for field in ("node", "reason"):
        if not isinstance(value.get(field, ""), str):
            raise ProtocolError(f"request.{field}: expected a string, got {value[field]!r}")
    return Request(
        incident=value["incident"],
        deadline=parse_time(value.get("deadline"), "request.deadline"),
        urgency=urgency,
        node=value.get("node", ""),
        reason=value.get("reason", ""),
    )


@dataclass(frozen=True, slots=True)
class Answer:
    """A job's answer: the checkpoint it saved for ``incident``, or why it will not save."""

    incident: str
    step: int | None
    saved_at: datetime | None
    refused: str | None = None

    def to_json(self) -> str:
        """The annotation value (compact JSON).

        Raises:
            ProtocolError: A negative step, a checkpoint without a time (or a refusal
                with one), or a value over :data:`MAX_ANSWER_BYTES`.
        """
        if self.refused is None:
            if self.step is None or self.saved_at is None:
                raise ProtocolError("answer: step and saved_at are required unless refused")
        elif self.step is not None or self.saved_at is not None:
            raise ProtocolError("answer: a refusal carries step and saved_at null")
        if self.step is not None and (isinstance(self.step, bool) or self.step < 0):
            raise ProtocolError(f"answer.step: expected an integer >= 0, got {self.step!r}")
        body: dict[str, Any] = {
            "version": VERSION,
            "incident": self.incident,
            "step": self.step,
            "saved_at": format_time(self.saved_at) if self.saved_at is not None else None,
        }
        if self.refused is not None:
            body["refused"] = self.refused
        text = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
        size = len(text.encode())
        if size > MAX_ANSWER_BYTES:
            raise ProtocolError(
                f"answer: {size} bytes, more than the contract's {MAX_ANSWER_BYTES} "
                "(shorten the incident echo or the refusal reason)"
            )
        return text


def parse_answer(raw: str) -> Answer:
    """Read a ``gpu-remediation.io/checkpoint-answer`` value (to see what a pod answered).

    Raises:
        ProtocolError: Oversized, not JSON, or a field missing or of the wrong type.
    """
    value = _object(raw, "answer", MAX_ANSWER_BYTES)
    refused = value.get("refused")
    if refused is not None and not isinstance(refused, str):
        raise ProtocolError(f"answer.refused: expected a string, got {refused!r}")
    step = value.get("step")
    if refused is None:
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ProtocolError(f"answer.step: expected an integer >= 0, got {step!r}")
        saved_at: datetime | None = parse_time(value.get("saved_at"), "answer.saved_at")
    else:
        step, saved_at = None, None
    return Answer(incident=value["incident"], step=step, saved_at=saved_at, refused=refused)


@dataclass(frozen=True, slots=True)
class StepTime:
    """This pod's own mean time per training step over its last ``steps`` steps, up to ``step``.

    Measure what this rank spends on its own work in a step (forward, backward,
    optimizer; e.g. with CUDA events), not the whole step: in a synchronous job
    every rank waits for the slowest at each collective, so whole-step times are
    the same on every node and cannot tell which one is slow.
    """

    step: int
    seconds: float
    steps: int

    def to_json(self) -> str:
        """The annotation value (compact JSON).

        Raises:
            ProtocolError: A negative step, a window below one step or past ``step + 1``,
                or a time that is not a positive number of at most a day.
        """
        _check_step_time(self.step, self.seconds, self.steps)
        body = {"version": VERSION, "step": self.step, "seconds": self.seconds, "steps": self.steps}
        return json.dumps(body, separators=(",", ":"))


def _check_step_time(step: Any, seconds: Any, steps: Any) -> None:
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ProtocolError(f"step-time.step: expected an integer >= 0, got {step!r}")
    if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= step + 1:
        raise ProtocolError(f"step-time.steps: expected an integer 1..step+1, got {steps!r}")
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not 0 < seconds <= MAX_STEP_SECONDS
    ):
        raise ProtocolError(
            f"step-time.seconds: expected a number in (0, {MAX_STEP_SECONDS:.0f}], got {seconds!r}"
        )


def parse_step_time(raw: str) -> StepTime:
    """Read a ``gpu-remediation.io/step-time`` value; fields the contract does not name are ignored.

    Raises:
        ProtocolError: Oversized, not JSON, another version, or a field missing or of the
            wrong type.
    """
    value = _versioned(raw, "step-time", MAX_STEP_TIME_BYTES)
    step: Any = value.get("step")
    seconds: Any = value.get("seconds")
    steps: Any = value.get("steps")
    _check_step_time(step, seconds, steps)
    return StepTime(step=step, seconds=float(seconds), steps=steps)
