"""``dcgmi diag -r <level> -j`` (DCGM 3.x and 4.x) -> a verdict with DCGM evidence.

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

Verdict rules (never report a pass the output does not prove):

* A ``Fail`` result (any case) fails the run and becomes evidence, one per
  warning it carries (or one without an error id when it carries none).
* ``Warn`` is not a failure, because DCGM itself lets the GPU keep working, unless
  one of its warnings has severity ISOLATE (2) or RESET (6) (as reported, or
  DCGM's own severity of its error id, ``dcgm_errors.c``), or an error id the
  catalog maps to a class that acts on the node (not informational and not a
  configuration finding): those are what the remediation ladder acts on,
  whatever status the test chose. DCGM 4.x already prints warn-level entity
  results as ``Fail`` (``Diag.cpp``, ``HelperDisplayDiagResult`` defaults to
  ``DDR_NO_DISPLAY_WARN``), so the rule mostly matters for 3.x. Remaining
  warnings are counted in the summary.
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

import re
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator

from gpu_remediation.catalog import DCGM_ERRORS
from gpu_remediation.contracts import DiagnosticResult
from gpu_remediation.dcgm_errors import DCGM_ERROR_META, DcgmSeverity
from gpu_remediation.models import DcgmEvidence, Evidence, FaultClass
from gpu_remediation.tool_outputs.common import (
    DCGM3_KEY,
    DCGM4_KEY,
    MAX_MESSAGE,
    MAX_SUMMARY,
    MAX_TEST,
    DiagnosticParseError,
    Shape,
    extract_json,
    failure_list,
    limit_failures,
    truncate,
    valid_error_id,
    valid_gpu_index,
    valid_severity,
)

__all__ = ["parse_dcgm_diag"]

# dcgmErrorSeverity_t (dcgm_errors.h): the two that say the GPU cannot keep working as is.
_ACTIONABLE_SEVERITIES = frozenset({DcgmSeverity.ISOLATE, DcgmSeverity.RESET})
# Classes a Warn result may carry without failing: DCGM lets the GPU keep working,
# and a configuration finding is for a person, not the ladder.
_WARNING_CLASSES = frozenset({FaultClass.INFORMATIONAL, FaultClass.CONFIGURATION})


# dcgmi returns negative dcgmReturn_t values, seen by the shell as 256 + value
# (NVIDIA/DCGM issue #158: 226 is DCGM_ST_NVVS_ERROR, -30).
_DCGMI_EXIT_CODES: dict[int, str] = {
    226: "DCGM_ST_NVVS_ERROR: the diagnostic reported an error",
    205: "DCGM_ST_NVVS_ISOLATE_ERROR: the diagnostic says to isolate the GPU",
}


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


class _Warning(Shape):
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


class _Result(Shape):
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


class _Summary(Shape):
    status: str
    warnings: list[_Warning] = Field(default_factory=list)

    _normalise_warnings = field_validator("warnings", mode="before")(_warnings)


class _Test(Shape):
    name: str
    results: list[_Result] = Field(default_factory=list)
    test_summary: _Summary | None = None

    @field_validator("results", mode="before")
    @classmethod
    def _skip_null_results(cls, value: Any) -> Any:
        return [r for r in value if r is not None] if isinstance(value, list) else value


class _Category(Shape):
    category: str = ""
    tests: list[_Test] = Field(default_factory=list)

    @field_validator("tests", mode="before")
    @classmethod
    def _skip_null_tests(cls, value: Any) -> Any:
        return [t for t in value if t is not None] if isinstance(value, list) else value


class _DiagBody(Shape):
    test_categories: list[_Category] | None = None
    runtime_error: str | None = None
    version: str | None = None


class _Metadata(Shape):
    version: str | None = None


class _DiagDocument(Shape):
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
        index = valid_gpu_index(result.entity_id)
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
    index = valid_gpu_index(ids[0])
    if index is None:
        return None, f"GPU {ids[0]} (not a valid index)"
    return index, f"GPU {index}"


_GPU_IN_TEXT = re.compile(r"\bGPU\s+(\d+)\b")


def _gpu_named_in(text: str) -> int | None:
    """The GPU index a message names, when it names exactly one valid index."""
    # Compared as digits without leading zeros, so "GPU 02" and "GPU 2" are one;
    # only a short one is converted (no index has more than 2 digits, and Python
    # refuses to convert over 4300, slowly).
    named = {n.lstrip("0") or "0" for n in _GPU_IN_TEXT.findall(text)}
    if len(named) != 1:
        return None
    digits = named.pop()
    return valid_gpu_index(int(digits)) if len(digits) <= 3 else None


def _warning_is_actionable(warning: _Warning) -> bool:
    """Whether a warning on a Warn result should still count as a failure (module docstring)."""
    severity = warning.error_severity
    meta = DCGM_ERROR_META.get(warning.error_id) if warning.error_id is not None else None
    if severity is None and meta is not None:
        severity = meta.severity
    if severity in _ACTIONABLE_SEVERITIES:
        return True
    known = DCGM_ERRORS.get(warning.error_id) if warning.error_id is not None else None
    return known is not None and known[0] not in _WARNING_CLASSES


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
        error_id=valid_error_id(warning.error_id) if warning is not None else None,
        severity=valid_severity(warning.error_severity) if warning is not None else None,
        gpu_index=gpu_index,
        test=truncate(test, MAX_TEST) if test else None,
        message=truncate(f"{where}: {text}" if where else text, MAX_MESSAGE),
    )


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
    document = extract_json(stdout, what)
    if document is None:
        if exit_code == 0:
            raise DiagnosticParseError(
                f"{what}: exit code 0 but no JSON in the output "
                f"({truncate(stdout, 200)!r}); cannot tell whether it passed"
            )
        return DiagnosticResult(
            passed=False,
            summary=truncate(
                f"{what} failed to run: exit code {exit_code}{_exit_meaning(exit_code)}"
                f" and no JSON output: {truncate(stdout, 300) or '(empty)'}",
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
            f"{what}: DCGM {generation}.x JSON of an unexpected shape: {truncate(str(err), 500)}"
        ) from err

    version = (outer.metadata.version if outer.metadata else None) or body.version
    label = f"{what} (DCGM {version or f'{generation}.x'})"
    runtime_error = body.runtime_error or outer.runtime_error
    if runtime_error:
        # The run itself failed (GPU busy, hostengine trouble, ...): it says
        # nothing about the hardware, so there is no evidence, only a failed run.
        return DiagnosticResult(
            passed=False,
            summary=truncate(
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

    failures, dropped = limit_failures(failures)
    problems: list[str] = []
    if failures:
        problems.append(f"{len(failures)} failure(s): {failure_list(failures)}")
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
            passed=False, failures=failures, summary=truncate(text, MAX_SUMMARY)
        )
    return DiagnosticResult(
        passed=True, summary=truncate(f"{label} passed. {counts}{notes}", MAX_SUMMARY)
    )


def _exit_meaning(exit_code: int) -> str:
    meaning = _DCGMI_EXIT_CODES.get(exit_code)
    return f" ({meaning})" if meaning else ""
