"""Parsers for host-command output: ``dcgmi diag -j``, ``dcgmi health -c -j`` and ``nvidia-smi -r``.

Pure functions, no I/O: the activities run the commands (SSM or a node Job)
and hand the captured stdout, stderr and exit code here. The result is the
activity contract (``DiagnosticResult``, ``ResetGpusResult``) with failures as
``DcgmEvidence``, so the workflow classifies them like any other signal.

Shapes follow NVIDIA DCGM's sources (github.com/NVIDIA/DCGM):

* DCGM 4.x ``dcgmi diag -j`` (``dcgmi/Diag.cpp`` ``HelperJsonBuildOutput``,
  ``testing/python3/dcgm_diag_schema.json``): top key ``"DCGM Diagnostic"`` with
  ``test_categories[].tests[]`` (``name``, ``results[]``, ``test_summary``);
  each result has ``entity_group``/``entity_group_id``/``entity_id`` (absent for
  node-wide results), ``status`` and ``warnings[]`` of ``{warning, error_id,
  error_category, error_severity}``; ``entity_groups`` and ``metadata`` are
  siblings of the top key. A failed run prints only
  ``{"DCGM Diagnostic": {"version", "runtime_error"}}``.
* DCGM 3.x (``nvvs/include/JsonResult.hpp``): top key ``"DCGM GPU Diagnostic"``,
  results carry ``gpu_id`` (dcgmi) or ``gpu_ids`` (nvvs), an int or a string,
  possibly a CSV list for node-wide tests; statuses are upper case (``PASS``,
  ``FAIL``, ``WARN``, ``SKIP``); warnings are strings or objects; ``null``
  entries appear in ``tests`` and ``results`` and are skipped, as DCGM does.
* ``dcgmi health -c -j`` (``dcgmi/Health.cpp`` through ``DcgmiOutputJson``):
  ``{"header": [...], "body": {"Overall Health": {"value"}, "GPU": {"children":
  {"<id>": {"value", "children": {"Errors": {"children": {"<System> system":
  {"value", "overflow": [message chunks]}}}}}}}}}``. It carries no error ids;
  the few that matter are recognised from DCGM's message templates
  (``dcgmlib/dcgm_errors.h``).

Verdict rules (never report a pass the output does not prove):

* A ``Fail`` result (any case) fails the run and becomes evidence, one per
  warning it carries (or one without an error id when it carries none).
* ``Warn`` is not a failure, because DCGM itself lets the GPU keep working, unless
  one of its warnings has severity ISOLATE (2) or RESET (6), or an error id the
  catalog (``DCGM_ERRORS``) maps to a class other than informational: those are
  what the remediation ladder acts on, whatever status the test chose. DCGM 4.x
  already prints warn-level entity results as ``Fail`` (``Diag.cpp``,
  ``HelperDisplayDiagResult`` defaults to ``DDR_NO_DISPLAY_WARN``), so the rule
  mostly matters for 3.x. Remaining warnings are counted in the summary.
* A node-wide result (no entity, or a 3.x GPU list) is attributed to a GPU only
  when its message names exactly one (``"GPU 2 had memory errors ..."``).
* ``Skip`` and ``Not Run`` are neither. A run with no ``Pass`` at all does not pass.
* An unknown status string counts as ``Fail``: a new DCGM word must not read as a pass.
* ``runtime_error`` fails the run without evidence (the run proves nothing about
  the hardware); so does a non-zero exit code when stdout holds no JSON at all.
* A non-zero exit code with JSON in which every test passed still fails: the
  two disagree, and the safe reading is the failing one.
* Output that starts JSON but does not parse (SSM truncates stdout at 24,000
  characters) raises ``DiagnosticParseError``, as does output with no JSON and a
  zero exit code: the caller treats it as a failed run, never as a pass.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from gpu_remediation.catalog import DCGM_ERRORS
from gpu_remediation.contracts import DiagnosticResult, ResetGpusResult, ResetStatus
from gpu_remediation.models import DcgmEvidence, Evidence, FaultClass, GpuIndex

__all__ = [
    "DiagnosticParseError",
    "combine",
    "parse_dcgm_diag",
    "parse_dcgm_health",
    "parse_gpu_reset",
]

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

# dcgmErrorSeverity_t (dcgm_errors.h): the two that say the GPU cannot keep working as is.
SEVERITY_ISOLATE = 2
SEVERITY_RESET = 6
_ACTIONABLE_SEVERITIES = frozenset({SEVERITY_ISOLATE, SEVERITY_RESET})

# dcgmi returns negative dcgmReturn_t values, seen by the shell as 256 + value
# (NVIDIA/DCGM issue #158: 226 is DCGM_ST_NVVS_ERROR, -30).
_DCGMI_EXIT_CODES: dict[int, str] = {
    226: "DCGM_ST_NVVS_ERROR: the diagnostic reported an error",
    205: "DCGM_ST_NVVS_ISOLATE_ERROR: the diagnostic says to isolate the GPU",
}

_GPU_INDEX: TypeAdapter[int] = TypeAdapter(GpuIndex)


class DiagnosticParseError(ValueError):
    """Command output that cannot be read as a diagnostic verdict (truncated, garbage, unknown).

    The caller must treat it as a failed diagnostic run, never as a pass.
    """


# --------------------------------------------------------------------- helpers


def _truncate(text: str, limit: int) -> str:
    """Cut ``text`` to ``limit`` characters, marking the cut."""
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def _gpu_index(value: int | None) -> int | None:
    """Return ``value`` if it is a valid GPU index (models.GpuIndex), else None."""
    if value is None:
        return None
    try:
        return _GPU_INDEX.validate_python(value)
    except ValidationError:
        return None


def _severity(value: int | None) -> int | None:
    """DCGM severities are 0..6; anything else is not one (DcgmEvidence would reject it)."""
    return value if value is not None and 0 <= value <= 6 else None


def _error_id(value: int | None) -> int | None:
    return value if value is not None and value >= 0 else None


def _error_meaning(error_id: int | None) -> str:
    if error_id is None:
        return ""
    known = DCGM_ERRORS.get(error_id)
    return f"DCGM error {error_id} ({known[1]})" if known else f"DCGM error {error_id}"


def _extract_json(stdout: str, what: str) -> dict[str, Any] | None:
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
    if stdout[end:].strip():
        raise DiagnosticParseError(
            f"{what}: unexpected text after the JSON document at character {end}: "
            f"{_truncate(stdout[end:], 80)!r}"
        )
    if not isinstance(document, dict):
        raise DiagnosticParseError(f"{what}: JSON document is a {type(document).__name__}")
    return document


class _Status(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    WARN = "warn"
    SKIP = "skip"
    NOT_RUN = "not run"


_STATUS_WORDS: dict[str, _Status] = {
    "pass": _Status.PASS,
    "passed": _Status.PASS,
    "fail": _Status.FAIL,
    "failed": _Status.FAIL,
    "failure": _Status.FAIL,
    "warn": _Status.WARN,
    "warning": _Status.WARN,
    "skip": _Status.SKIP,
    "skipped": _Status.SKIP,
    "not run": _Status.NOT_RUN,
    "notrun": _Status.NOT_RUN,
    # DCGM 4.x prints "" for DCGM_DIAG_RESULT_NOT_RUN (Diag.cpp).
    "": _Status.NOT_RUN,
}


def _status(raw: str) -> tuple[_Status, bool]:
    """Normalise a status word; the flag says it was unknown (and so read as Fail)."""
    word = " ".join(raw.replace("_", " ").split()).lower()
    known = _STATUS_WORDS.get(word)
    return (known, False) if known is not None else (_Status.FAIL, True)


# ------------------------------------------------------------ JSON shape models


class _Shape(BaseModel):
    # NVIDIA adds fields between versions: ignore what is not used, type-check what is.
    model_config = ConfigDict(extra="ignore", frozen=True)


class _Warning(_Shape):
    warning: str = ""
    error_id: int | None = None
    error_category: int | None = None
    error_severity: int | None = None


def _warnings(value: Any) -> Any:
    """3.x writes a warning without an error id as a bare string; nulls are skipped."""
    if value is None:
        return []
    if isinstance(value, list):
        return [{"warning": w} if isinstance(w, str) else w for w in value if w is not None]
    return value


class _Result(_Shape):
    status: str
    # 4.x
    entity_group: str | None = None
    entity_group_id: int | None = None
    entity_id: int | None = None
    # 3.x: dcgmi writes gpu_id, nvvs gpu_ids; an int or a string ("3" or "0,1,2").
    gpu_id: int | str | None = None
    gpu_ids: int | str | None = None
    warnings: list[_Warning] = Field(default_factory=list)

    _normalise_warnings = field_validator("warnings", mode="before")(_warnings)


class _Summary(_Shape):
    status: str
    warnings: list[_Warning] = Field(default_factory=list)

    _normalise_warnings = field_validator("warnings", mode="before")(_warnings)


class _Test(_Shape):
    name: str
    results: list[_Result] = Field(default_factory=list)
    test_summary: _Summary | None = None

    @field_validator("results", mode="before")
    @classmethod
    def _skip_null_results(cls, value: Any) -> Any:
        return [r for r in value if r is not None] if isinstance(value, list) else value


class _Category(_Shape):
    category: str = ""
    tests: list[_Test] = Field(default_factory=list)

    @field_validator("tests", mode="before")
    @classmethod
    def _skip_null_tests(cls, value: Any) -> Any:
        return [t for t in value if t is not None] if isinstance(value, list) else value


class _DiagBody(_Shape):
    test_categories: list[_Category] | None = None
    runtime_error: str | None = None
    version: str | None = None


class _Metadata(_Shape):
    version: str | None = None


class _DiagDocument(_Shape):
    metadata: _Metadata | None = None
    runtime_error: str | None = None


# ----------------------------------------------------------------- dcgmi diag


@dataclass
class _Tally:
    """What a diag run reported, gathered before the verdict is built."""

    results: int = 0
    passed: int = 0
    failed: int = 0
    warned: int = 0
    skipped: int = 0
    unknown_statuses: set[str] = field(default_factory=set)


def _where_4x(result: _Result) -> tuple[int | None, str]:
    """Return (gpu index, label) of a 4.x result; non-GPU entities have no index."""
    if result.entity_id is None:
        return None, "node"
    group = result.entity_group or (
        "GPU" if result.entity_group_id == 1 else f"group {result.entity_group_id}"
    )
    if group.upper() == "GPU":
        index = _gpu_index(result.entity_id)
        if index is None:
            return None, f"GPU {result.entity_id} (not a valid index)"
        return index, f"GPU {index}"
    return None, f"{group} {result.entity_id}"


def _where_3x(result: _Result) -> tuple[int | None, str]:
    """Return (gpu index, label) of a 3.x result; a GPU list is node-wide."""
    raw = result.gpu_id if result.gpu_id is not None else result.gpu_ids
    if raw is None:
        return None, "node"
    if isinstance(raw, int):
        ids = [raw]
    else:
        try:
            ids = [int(part) for part in raw.split(",") if part.strip()]
        except ValueError:
            return None, f"GPUs {raw!r}"
    if len(ids) != 1:
        return None, "GPUs " + ",".join(str(i) for i in ids)
    index = _gpu_index(ids[0])
    if index is None:
        return None, f"GPU {ids[0]} (not a valid index)"
    return index, f"GPU {index}"


_GPU_IN_TEXT = re.compile(r"\bGPU\s+(\d+)\b")


def _gpu_named_in(text: str) -> int | None:
    """The GPU index a message names, when it names exactly one valid index."""
    named = {int(n) for n in _GPU_IN_TEXT.findall(text)}
    return _gpu_index(named.pop()) if len(named) == 1 else None


def _warning_is_actionable(warning: _Warning) -> bool:
    """Whether a warning on a Warn result should still count as a failure (module docstring)."""
    if warning.error_severity in _ACTIONABLE_SEVERITIES:
        return True
    known = DCGM_ERRORS.get(warning.error_id) if warning.error_id is not None else None
    return known is not None and known[0] is not FaultClass.INFORMATIONAL


def _evidence(
    *,
    check: Literal["diag", "health"],
    warning: _Warning | None,
    gpu_index: int | None,
    test: str | None,
    where: str,
    fallback: str,
    observed_at: datetime,
    source: str,
) -> DcgmEvidence:
    text = warning.warning if warning is not None and warning.warning else fallback
    return DcgmEvidence(
        observed_at=observed_at,
        source=source,
        check=check,
        error_id=_error_id(warning.error_id) if warning is not None else None,
        severity=_severity(warning.error_severity) if warning is not None else None,
        gpu_index=gpu_index,
        test=_truncate(test, MAX_TEST) if test else None,
        message=_truncate(f"{where}: {text}" if where else text, MAX_MESSAGE),
    )


def _limit(failures: Sequence[Evidence]) -> tuple[list[Evidence], int]:
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


def _describe(item: Evidence) -> str:
    if not isinstance(item, DcgmEvidence):  # pragma: no cover - only DCGM evidence is built here
        return item.key
    where = f"GPU {item.gpu_index}" if item.gpu_index is not None else "node"
    what = _error_meaning(item.error_id) or _truncate(item.message, 120)
    return f"{item.test or item.check} on {where}: {what}"


def _failure_list(failures: Sequence[Evidence], limit: int = 5) -> str:
    shown = "; ".join(_describe(f) for f in failures[:limit])
    more = f"; and {len(failures) - limit} more" if len(failures) > limit else ""
    return shown + more


def parse_dcgm_diag(
    stdout: str,
    exit_code: int,
    *,
    observed_at: datetime,
    source: str = "dcgmi-diag",
) -> DiagnosticResult:
    """Read the output of ``dcgmi diag -r <level> -j`` (DCGM 3.x or 4.x) into a verdict.

    Args:
        stdout: The command's standard output, as captured (possibly truncated).
        exit_code: The process exit code (non-zero when DCGM found a failure).
        observed_at: When the diagnostic ran; stamped on every piece of evidence.
        source: The evidence source name.

    Returns:
        The verdict: ``passed`` only when complete output shows at least one
        ``Pass``, no failing result, no runtime error and a zero exit code.
        Failing results come back as ``DcgmEvidence(check="diag")``.

    Raises:
        DiagnosticParseError: The output is truncated, not JSON, of an unknown
            shape, or empty with a zero exit code. Never a pass.
    """
    what = "dcgmi diag"
    document = _extract_json(stdout, what)
    if document is None:
        if exit_code == 0:
            raise DiagnosticParseError(
                f"{what}: exit code 0 but no JSON in the output "
                f"({_truncate(stdout, 200)!r}); cannot tell whether it passed"
            )
        return DiagnosticResult(
            passed=False,
            summary=_truncate(
                f"{what} failed to run: exit code {exit_code}{_exit_meaning(exit_code)}"
                f" and no JSON output: {_truncate(stdout, 300) or '(empty)'}",
                MAX_SUMMARY,
            ),
        )

    if DCGM4_KEY in document:
        key, generation = DCGM4_KEY, 4
    elif DCGM3_KEY in document:
        key, generation = DCGM3_KEY, 3
    else:
        raise DiagnosticParseError(
            f"{what}: JSON has neither {DCGM4_KEY!r} nor {DCGM3_KEY!r} "
            f"(top-level keys: {sorted(document)[:10]})"
        )
    try:
        body = _DiagBody.model_validate(document[key])
        outer = _DiagDocument.model_validate(document)
    except ValidationError as err:
        raise DiagnosticParseError(
            f"{what}: DCGM {generation}.x JSON of an unexpected shape: {_truncate(str(err), 500)}"
        ) from err

    version = (outer.metadata.version if outer.metadata else None) or body.version
    label = f"{what} (DCGM {version or f'{generation}.x'})"
    runtime_error = body.runtime_error or outer.runtime_error
    if runtime_error:
        # The run itself failed (GPU busy, hostengine trouble, ...): it says
        # nothing about the hardware, so there is no evidence, only a failed run.
        return DiagnosticResult(
            passed=False,
            summary=_truncate(
                f"{label} did not complete: {runtime_error}"
                f" (exit code {exit_code}{_exit_meaning(exit_code)})",
                MAX_SUMMARY,
            ),
        )
    if body.test_categories is None:
        raise DiagnosticParseError(f"{what}: {key!r} has neither test_categories nor runtime_error")

    where_of = _where_4x if generation == 4 else _where_3x
    tally = _Tally()
    failures: list[Evidence] = []
    warned: list[str] = []

    def add(warning: _Warning | None, gpu: int | None, test: str, where: str, fb: str) -> None:
        if gpu is None and (where == "node" or where.startswith("GPUs ")) and warning is not None:
            # A node-wide result (3.x software tests, 4.x test summaries) often
            # names the one GPU it is about; resetting that GPU beats all of them.
            gpu = _gpu_named_in(warning.warning)
        failures.append(
            _evidence(
                check="diag",
                warning=warning,
                gpu_index=gpu,
                test=test,
                where=where,
                fallback=fb,
                observed_at=observed_at,
                source=source,
            )
        )

    summary_failed = False
    for category in body.test_categories:
        for test in category.tests:
            for result in test.results:
                tally.results += 1
                status, unknown = _status(result.status)
                if unknown:
                    tally.unknown_statuses.add(result.status)
                gpu, where = where_of(result)
                if status is _Status.PASS:
                    tally.passed += 1
                elif status in (_Status.SKIP, _Status.NOT_RUN):
                    tally.skipped += 1
                elif status is _Status.WARN and not any(
                    _warning_is_actionable(w) for w in result.warnings
                ):
                    tally.warned += 1
                    warned.append(f"{test.name} on {where}")
                else:
                    tally.failed += 1
                    fallback = f"{test.name} {result.status or 'failed'} without a message"
                    if not result.warnings:
                        add(None, gpu, test.name, where, fallback)
                    for warning in result.warnings:
                        add(warning, gpu, test.name, where, fallback)
            # 4.x puts errors tied to no entity on the test summary.
            summary = test.test_summary
            if summary is not None and _status(summary.status)[0] is _Status.FAIL:
                summary_failed = True
                for warning in summary.warnings:
                    add(warning, None, test.name, "node", f"{test.name} failed")

    failures, dropped = _limit(failures)
    problems: list[str] = []
    if failures:
        problems.append(f"{len(failures)} failure(s): {_failure_list(failures)}")
    elif summary_failed:
        problems.append("a test summary reports Fail")
    if dropped:
        problems.append(f"{dropped} more failure(s) not listed")
    if tally.unknown_statuses:
        problems.append(f"unknown status(es) read as Fail: {sorted(tally.unknown_statuses)}")
    if tally.passed == 0 and not failures:
        problems.append("no test passed")
    if exit_code != 0 and not failures:
        problems.append(f"exit code {exit_code}{_exit_meaning(exit_code)} although no test failed")

    counts = (
        f"{tally.results} result(s): {tally.passed} pass, {tally.failed} fail, "
        f"{tally.warned} warn, {tally.skipped} skipped/not run"
    )
    notes = f"; warnings (not failures): {', '.join(warned[:5])}" if warned else ""
    if problems:
        text = f"{label} FAILED: {'; '.join(problems)}. {counts}{notes}"
        return DiagnosticResult(
            passed=False, failures=failures, summary=_truncate(text, MAX_SUMMARY)
        )
    return DiagnosticResult(
        passed=True, summary=_truncate(f"{label} passed. {counts}{notes}", MAX_SUMMARY)
    )


def _exit_meaning(exit_code: int) -> str:
    meaning = _DCGMI_EXIT_CODES.get(exit_code)
    return f" ({meaning})" if meaning else ""


# --------------------------------------------------------------- dcgmi health


class _Node(_Shape):
    """One DcgmiOutputBoxer node of dcgmi's JSON output."""

    value: str | None = None
    overflow: list[str] = Field(default_factory=list)
    children: dict[str, _Node] = Field(default_factory=dict)


class _HealthDocument(_Shape):
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


# dcgmi health JSON carries no error id, only the message; these are the
# message templates of dcgm_errors.h for the ids the catalog acts on. Matching
# is loose on purpose: dcgmi splits long messages into "overflow" chunks and may
# drop a punctuation mark at a split (Health.cpp, AddErrorMessage).
_HEALTH_MESSAGE_IDS: tuple[tuple[re.Pattern[str], int], ...] = tuple(
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
    for pattern, error_id in _HEALTH_MESSAGE_IDS:
        if pattern.search(message):
            return error_id
    return None


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
        not fail the check; they are listed in the summary.

    Raises:
        DiagnosticParseError: The output is empty, not JSON, truncated or of an
            unknown shape (e.g. "Error: Health watches not enabled").
    """
    what = "dcgmi health"
    document = _extract_json(stdout, what)
    if document is None:
        raise DiagnosticParseError(
            f"{what}: no JSON in the output: {_truncate(stdout, 300) or '(empty)'!r}"
        )
    try:
        parsed = _HealthDocument.model_validate(document)
    except ValidationError as err:
        raise DiagnosticParseError(
            f"{what}: JSON of an unexpected shape: {_truncate(str(err), 500)}"
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
                    gpu = _gpu_index(int(entity_id))
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
                if health is _Health.WARNING:
                    warnings.append(f"{system_name} on {where}: {_truncate(message, 120)}")
                    continue
                if health is not _Health.FAILURE:
                    continue
                entity_failed = True
                if unknown:
                    message = f"health {system.value!r}: {message}"
                error_id = _health_error_id(message)
                failures.append(
                    DcgmEvidence(
                        observed_at=observed_at,
                        source=source,
                        check="health",
                        error_id=error_id,
                        gpu_index=gpu,
                        test=_truncate(system_name, MAX_TEST),
                        message=_truncate(
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
                        message=_truncate(f"{where}: health {entity.value!r}", MAX_MESSAGE),
                    )
                )
            if entity_health is _Health.FAILURE or entity_failed:
                failing_entities.append(where)

    failures, dropped = _limit(failures)
    overall_failed = overall is _Health.FAILURE
    passed = not failures and not overall_failed
    parts: list[str] = []
    if failures:
        parts.append(f"{len(failures)} failure(s): {_failure_list(failures)}")
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
    return DiagnosticResult(passed=passed, failures=failures, summary=_truncate(text, MAX_SUMMARY))


# --------------------------------------------------------------- nvidia-smi -r

# nvidia-smi exit codes (reference section 3).
_RESET_EXIT_MEANINGS: dict[int, str] = {
    2: "invalid argument",
    3: "not supported",
    4: "no permission (needs root)",
    6: "GPU not found",
    9: "NVIDIA driver not loaded",
    15: "GPU has fallen off the bus",
    255: "other error",
}
_NOT_SUPPORTED_TEXT = re.compile(r"unknown error|not supported", re.IGNORECASE)
_IN_USE_TEXT = re.compile(r"in use by another client", re.IGNORECASE)
_FALLEN_OFF_TEXT = re.compile(r"fallen off the bus", re.IGNORECASE)


def _relevant_line(text: str, pattern: re.Pattern[str] | None = None) -> str:
    """The line matching ``pattern`` (else the first non-empty line), shortened."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if pattern is not None:
        for line in lines:
            if pattern.search(line):
                return _truncate(line, 300)
    return _truncate(lines[0], 300) if lines else ""


def parse_gpu_reset(
    exit_code: int, stdout: str, stderr: str, *, command_id: str = ""
) -> ResetGpusResult:
    """Map the outcome of ``nvidia-smi -r [-i N]`` to a typed reset result.

    Precedence, most specific first: exit 0 is ``ok``; exit 15 or "fallen off
    the bus" is ``fallen_off_bus`` (only a reboot helps); "In use by another
    client" is ``failed`` (work is still on the GPU); exit 3, "not supported" or
    "Unknown Error" is ``not_supported`` (on EC2 the hypervisor blocks the
    function-level reset, and retrying will not help); anything else is
    ``failed`` with the exit code's meaning.

    Args:
        exit_code: The process exit code.
        stdout: Standard output of the command.
        stderr: Standard error of the command.
        command_id: The host-command id (SSM command id or Job name), echoed back.

    Returns:
        The result; anything but ``ok`` makes the ladder climb.
    """
    text = f"{stdout}\n{stderr}"
    status: ResetStatus
    if exit_code == 0:
        status, detail = "ok", _relevant_line(stdout) or "reset succeeded"
    elif exit_code == 15 or _FALLEN_OFF_TEXT.search(text):
        status = "fallen_off_bus"
        detail = f"GPU has fallen off the bus: {_relevant_line(text, _FALLEN_OFF_TEXT)}"
    elif _IN_USE_TEXT.search(text):
        status = "failed"
        detail = (
            "GPU in use by another client (processes still hold it): "
            f"{_relevant_line(text, _IN_USE_TEXT)}"
        )
    elif exit_code == 3 or _NOT_SUPPORTED_TEXT.search(text):
        status = "not_supported"
        detail = (
            "GPU reset not supported on this platform (on EC2 the hypervisor blocks "
            f"the function-level reset): {_relevant_line(text, _NOT_SUPPORTED_TEXT)}"
        )
    else:
        status = "failed"
        meaning = _RESET_EXIT_MEANINGS.get(exit_code, "unexpected exit code")
        detail = f"{meaning}: {_relevant_line(stderr) or _relevant_line(stdout)}"
    prefix = f"nvidia-smi -r exited {exit_code}"
    return ResetGpusResult(
        status=status,
        detail=_truncate(f"{prefix}: {detail}".rstrip(": "), MAX_DETAIL),
        command_id=command_id,
    )


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
    failures, dropped = _limit([*diag.failures, *health.failures])
    return DiagnosticResult(
        passed=diag.passed and health.passed,
        failures=failures,
        summary=_combine_summary(diag.summary, health.summary, dropped),
    )


def _combine_summary(diag: str, health: str, dropped: int) -> str:
    # Each half is capped on its own so neither verdict hides the other.
    half = MAX_SUMMARY // 2 - 3
    parts = [_truncate(s, half) for s in (diag, health) if s]
    text = " | ".join(parts)
    if dropped:
        text += f" | {dropped} more failure(s) not listed"
    return text
