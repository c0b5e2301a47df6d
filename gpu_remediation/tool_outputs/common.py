"""What every tool-output parser shares: limits, JSON extraction, evidence lists.

Pure functions, no I/O, no Temporal, no Kubernetes: the node agent and the
activities both import this package (tests/agent/test_import_contract.py).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from gpu_remediation.catalog import DCGM_ERRORS
from gpu_remediation.contracts import DiagnosticResult
from gpu_remediation.models import DcgmEvidence, Evidence, GpuIndex

# Limits of the contract models: EvidenceReport takes at most 256 pieces of
# evidence, DcgmEvidence.message 4096 characters and .test 128. The summary
# ends up in a RecordStep message (1024), so it is kept below that.
MAX_FAILURES = 256
MAX_MESSAGE = 1024
MAX_TEST = 128
MAX_SUMMARY = 1000
MAX_DETAIL = 1000

DCGM4_KEY = "DCGM Diagnostic"
DCGM3_KEY = "DCGM GPU Diagnostic"


_GPU_INDEX: TypeAdapter[int] = TypeAdapter(GpuIndex)


class DiagnosticParseError(ValueError):
    """Command output that cannot be read as a diagnostic verdict (truncated, garbage, unknown).

    The caller must treat it as a failed diagnostic run, never as a pass.
    """


# --------------------------------------------------------------------- helpers


def truncate(text: str, limit: int) -> str:
    """Cut ``text`` to ``limit`` characters, marking the cut."""
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def valid_gpu_index(value: int | None) -> int | None:
    """Return ``value`` if it is a valid GPU index (models.GpuIndex), else None."""
    if value is None:
        return None
    try:
        return _GPU_INDEX.validate_python(value)
    except ValidationError:
        return None


def valid_severity(value: int | None) -> int | None:
    """DCGM severities are 0..6; anything else is not one (DcgmEvidence would reject it)."""
    return value if value is not None and 0 <= value <= 6 else None


def valid_error_id(value: int | None) -> int | None:
    """DCGM error ids are not negative; anything else is not one."""
    return value if value is not None and value >= 0 else None


def error_meaning(error_id: int | None) -> str:
    """``DCGM error 85 (pending row remap)`` for a summary line, "" without an id."""
    if error_id is None:
        return ""
    known = DCGM_ERRORS.get(error_id)
    return f"DCGM error {error_id} ({known[1]})" if known else f"DCGM error {error_id}"


def extract_json(stdout: str, what: str) -> dict[str, Any] | None:
    """Return the JSON object in ``stdout``, None when there is none at all.

    Text before the first ``{`` is skipped, as DCGM's own reader does (dcgmi
    may print a warning line first). Anything but whitespace after the object
    is refused: a verdict is only read from output known to be complete.

    Raises:
        DiagnosticParseError: the output starts an object that does not parse
            (truncated or garbage), or is not an object.
    """
    start = stdout.find("{")
    if start < 0:
        return None
    try:
        document, end = json.JSONDecoder().raw_decode(stdout, start)
    except json.JSONDecodeError as err:
        raise DiagnosticParseError(
            f"{what}: output is not complete JSON ({err.msg} at character {err.pos} "
            f"of {len(stdout)}); truncated or corrupted output is not a verdict"
        ) from err
    except (ValueError, RecursionError) as err:
        # JSON the decoder refuses for its content, not its syntax: a number of
        # over 4300 digits (Python's limit on a conversion that is quadratic in
        # its length) or nesting deeper than the interpreter's recursion limit.
        # No DCGM output looks like that: not a verdict either.
        raise DiagnosticParseError(
            f"{what}: output is JSON no DCGM tool writes ({type(err).__name__}: "
            f"{truncate(str(err), 120)})"
        ) from err
    if stdout[end:].strip():
        raise DiagnosticParseError(
            f"{what}: unexpected text after the JSON document at character {end}: "
            f"{truncate(stdout[end:], 80)!r}"
        )
    if not isinstance(document, dict):
        raise DiagnosticParseError(f"{what}: JSON document is a {type(document).__name__}")
    return document


# ------------------------------------------------------------ JSON shape models


class Shape(BaseModel):
    """Base of the JSON shape models."""

    # NVIDIA adds fields between versions: ignore what is not used, type-check what is.
    model_config = ConfigDict(extra="ignore", frozen=True)


def limit_failures(failures: Sequence[Evidence]) -> tuple[list[Evidence], int]:
    """Drop exact repeats and cap at what an EvidenceReport accepts; return the overflow."""
    seen: set[tuple[str, str]] = set()
    kept: list[Evidence] = []
    for item in failures:
        identity = (item.key, item.message)
        if identity in seen:
            continue
        seen.add(identity)
        kept.append(item)
    return kept[:MAX_FAILURES], max(0, len(kept) - MAX_FAILURES)


def describe(item: Evidence) -> str:
    """One failure in a summary line: test, where, and what it means."""
    if not isinstance(item, DcgmEvidence):  # pragma: no cover - only DCGM evidence is built here
        return item.key
    where = f"GPU {item.gpu_index}" if item.gpu_index is not None else "node"
    what = error_meaning(item.error_id) or truncate(item.message, 120)
    return f"{item.test or item.check} on {where}: {what}"


def failure_list(failures: Sequence[Evidence], limit: int = 5) -> str:
    """The first ``limit`` failures described, and how many more there are."""
    shown = "; ".join(describe(f) for f in failures[:limit])
    more = f"; and {len(failures) - limit} more" if len(failures) > limit else ""
    return shown + more


# ---------------------------------------------------------------------- combine


def combine(diag: DiagnosticResult, health: DiagnosticResult) -> DiagnosticResult:
    """Merge the verification's diagnostic and health recheck into one verdict.

    Args:
        diag: The ``dcgmi diag`` verdict.
        health: The ``dcgmi health`` verdict.

    Returns:
        Passed only when both passed; failures of both (diag first, repeats
        dropped, capped at what an EvidenceReport accepts); both summaries.
    """
    failures, dropped = limit_failures([*diag.failures, *health.failures])
    return DiagnosticResult(
        passed=diag.passed and health.passed,
        failures=failures,
        summary=_combine_summary(diag.summary, health.summary, dropped),
    )


def _combine_summary(diag: str, health: str, dropped: int) -> str:
    # Each half is capped on its own so neither verdict hides the other.
    half = MAX_SUMMARY // 2 - 3
    parts = [truncate(s, half) for s in (diag, health) if s]
    text = " | ".join(parts)
    if dropped:
        text += f" | {dropped} more failure(s) not listed"
    return text
