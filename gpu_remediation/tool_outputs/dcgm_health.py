"""``dcgmi health -c -j`` -> a verdict with DCGM evidence.

Shape (``dcgmi/Health.cpp`` through ``DcgmiOutputJson``):
``{"header": [...], "body": {"Overall Health": {"value"}, "GPU": {"children":
{"<id>": {"value", "children": {"Errors": {"children": {"<System> system":
{"value", "overflow": [message chunks]}}}}}}}}}``. Incidents DCGM raises for
every watch (``DCGM_HEALTH_WATCH_ALL``: fallen off the bus, Xid 95, the
"devastating" Xids) are filed under the system ``"Internal error"``
(``Health.cpp``, ``HelperHealthSystemToString``), the driver's recovery actions
under ``"Driver"``. The document carries no error ids: each message is matched
against DCGM's own message templates (``dcgm_errors.h``, kept as data in
``gpu_remediation.dcgm_errors``) to recover its id.
"""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum

from pydantic import Field, ValidationError

from gpu_remediation.catalog import REPLACEMENT_CLASSES, dcgm_class
from gpu_remediation.contracts import DiagnosticResult
from gpu_remediation.models import DcgmEvidence, Evidence
from gpu_remediation.tool_outputs.common import (
    MAX_MESSAGE,
    MAX_SUMMARY,
    MAX_TEST,
    DiagnosticParseError,
    Shape,
    extract_json,
    failure_list,
    limit_failures,
    truncate,
    valid_gpu_index,
)
from gpu_remediation.tool_outputs.dcgm_messages import MAX_MATCHED_MESSAGE, message_error_id

__all__ = ["parse_dcgm_health"]


class _Node(Shape):
    """One DcgmiOutputBoxer node of dcgmi's JSON output."""

    value: str | None = None
    overflow: list[str] = Field(default_factory=list)
    children: dict[str, _Node] = Field(default_factory=dict)


class _HealthDocument(Shape):
    header: list[str] = Field(default_factory=list)
    body: dict[str, _Node]


class _Health(StrEnum):
    HEALTHY = "Healthy"
    WARNING = "Warning"
    FAILURE = "Failure"


def _health(raw: str | None) -> tuple[_Health, bool]:
    """Normalise a health word; unknown words ("Internal error") read as Failure."""
    word = (raw or "").strip().lower()
    for health in _Health:
        if word == health.value.lower():
            return health, False
    return _Health.FAILURE, True


# Loose phrasings of the same templates, tried after DCGM's own
# (dcgm_messages): older DCGM releases and other tools word them a little
# differently ("row remapping failed" without "uncorrectable").
_LEGACY_MESSAGE_IDS: tuple[tuple[re.Pattern[str], int], ...] = tuple(
    (re.compile(pattern, re.IGNORECASE), error_id)
    for pattern, error_id in (
        (r"row remappings? (?:are|is) pending", 85),
        (r"row remapping failed", 80),
        (r"uncorrectable memory errors and \d+ rows were remapped", 84),
        (r"volatile double-bit ECC error", 4),
        (r"single-bit ECC error\(s\) detected", 5),
        (r"NvLink link \d+ is currently down", 14),
        (r"uncontained error", 81),
        (r"PCIe replays per minute", 3),
    )
)


def _health_error_id(message: str) -> int | None:
    # The loose phrasings read the same head of the message as the templates
    # (MAX_MATCHED_MESSAGE says why no message DCGM writes is longer).
    head = message[:MAX_MATCHED_MESSAGE]
    found = message_error_id(head)
    if found is not None:
        return found
    for pattern, error_id in _LEGACY_MESSAGE_IDS:
        if pattern.search(head):
            return error_id
    return None


def _warning_fails(error_id: int | None) -> bool:
    """A Warning DCGM files under an RMA condition (id 132) is still a failure."""
    return error_id is not None and dcgm_class(error_id, None)[0] in REPLACEMENT_CLASSES


def _system_name(raw: str) -> str:
    """``"Memory system"`` -> ``"Memory"`` (the name the operator knows)."""
    return raw[: -len(" system")] if raw.lower().endswith(" system") else raw


def parse_dcgm_health(
    stdout: str,
    *,
    observed_at: datetime,
    source: str = "dcgmi-health",
) -> DiagnosticResult:
    """Read the output of ``dcgmi health -c -j`` into a verdict.

    The exit code is not an argument: dcgmi exits 0 even when a GPU is unhealthy.

    Args:
        stdout: The command's standard output, as captured (possibly truncated).
        observed_at: When the check ran; stamped on every piece of evidence.
        source: The evidence source name.

    Returns:
        The verdict: ``passed`` unless an entity, a system or the overall health
        is ``Failure`` (or a word DCGM does not define). Each failing system
        becomes ``DcgmEvidence(check="health")`` with the incident message and,
        where the message is one of DCGM's known ones, its error id. Warnings do
        not fail the check (they are listed in the summary), except one whose
        id is an RMA condition (132, uncorrectable row remap limit).

    Raises:
        DiagnosticParseError: The output is empty, not JSON, truncated or of an
            unknown shape (e.g. "Error: Health watches not enabled").
    """
    what = "dcgmi health"
    document = extract_json(stdout, what)
    if document is None:
        raise DiagnosticParseError(
            f"{what}: no JSON in the output: {truncate(stdout, 300) or '(empty)'!r}"
        )
    try:
        parsed = _HealthDocument.model_validate(document)
    except ValidationError as err:
        raise DiagnosticParseError(
            f"{what}: JSON of an unexpected shape: {truncate(str(err), 500)}"
        ) from err
    overall_node = parsed.body.get("Overall Health")
    if overall_node is None or overall_node.value is None:
        raise DiagnosticParseError(f"{what}: no 'Overall Health' in {sorted(parsed.body)[:10]}")
    overall, overall_unknown = _health(overall_node.value)

    failures: list[Evidence] = []
    warnings: list[str] = []
    failing_entities: list[str] = []

    for group, group_node in parsed.body.items():
        if group == "Overall Health":
            continue
        for entity_id, entity in group_node.children.items():
            gpu: int | None = None
            where = f"{group} {entity_id}"
            if group.upper() == "GPU":
                try:
                    gpu = valid_gpu_index(int(entity_id))
                except ValueError:
                    gpu = None
                if gpu is None:
                    where = f"GPU {entity_id} (not a valid index)"
            entity_health, _ = _health(entity.value)
            systems = entity.children.get("Errors", _Node()).children
            entity_failed = False
            for system_raw, system in systems.items():
                system_name = _system_name(system_raw)
                health, unknown = _health(system.value)
                message = " ".join(" ".join(system.overflow).split())
                error_id = _health_error_id(message)
                if health is _Health.WARNING and not _warning_fails(error_id):
                    warnings.append(f"{system_name} on {where}: {truncate(message, 120)}")
                    continue
                if health is _Health.HEALTHY:
                    continue
                entity_failed = True
                if unknown:
                    message = f"health {system.value!r}: {message}"
                elif health is _Health.WARNING:
                    message = f"(DCGM says Warning; an RMA condition) {message}"
                failures.append(
                    DcgmEvidence(
                        observed_at=observed_at,
                        source=source,
                        check="health",
                        error_id=error_id,
                        gpu_index=gpu,
                        test=truncate(system_name, MAX_TEST),
                        message=truncate(
                            f"{where}: {system_name} {message or 'Failure'}", MAX_MESSAGE
                        ),
                    )
                )
            if entity_health is _Health.FAILURE and not entity_failed:
                # The entity fails but names no failing system: still evidence.
                failures.append(
                    DcgmEvidence(
                        observed_at=observed_at,
                        source=source,
                        check="health",
                        gpu_index=gpu,
                        message=truncate(f"{where}: health {entity.value!r}", MAX_MESSAGE),
                    )
                )
            if entity_health is _Health.FAILURE or entity_failed:
                failing_entities.append(where)

    failures, dropped = limit_failures(failures)
    overall_failed = overall is _Health.FAILURE
    passed = not failures and not overall_failed
    parts: list[str] = []
    if failures:
        parts.append(f"{len(failures)} failure(s): {failure_list(failures)}")
    if dropped:
        parts.append(f"{dropped} more failure(s) not listed")
    if overall_failed and not failures:
        raw = overall_node.value
        parts.append(
            f"overall health {raw!r}"
            + (" (unknown word)" if overall_unknown else "")
            + " with no failing system named"
        )
    if warnings:
        parts.append(f"{len(warnings)} warning(s): {'; '.join(warnings[:5])}")
    verdict = "FAILED" if not passed else ("healthy with warnings" if warnings else "healthy")
    text = f"{what}: {verdict} (overall {overall_node.value})"
    if parts:
        text += ": " + "; ".join(parts)
    return DiagnosticResult(passed=passed, failures=failures, summary=truncate(text, MAX_SUMMARY))
