"""Shared helpers of the tool-output parser tests (fixtures and one clock)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from gpu_remediation.contracts import DiagnosticResult
from gpu_remediation.models import DcgmEvidence
from gpu_remediation.tool_outputs.dcgm_diag import parse_dcgm_diag
from gpu_remediation.tool_outputs.dcgm_health import parse_dcgm_health

# The synthetic fixtures are shared with the SSM executor tests; provenance in their README.
FIXTURES = Path(__file__).parents[2] / "activities" / "fixtures"
REAL = Path(__file__).parent / "fixtures" / "real"
NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
NVVS_ERROR_EXIT = 226  # DCGM_ST_NVVS_ERROR (-30) as the shell sees it


def fixture(name: str) -> str:
    # A host-command executor decodes bytes leniently; do the same here.
    return (FIXTURES / name).read_bytes().decode("utf-8", errors="replace")


def real(name: str) -> str:
    """A real fixture without its first line (the ``# source:`` comment)."""
    text = (REAL / name).read_bytes().decode("utf-8", errors="replace")
    first, _, rest = text.partition("\n")
    assert first.startswith("#"), f"{name}: the first line must name the source"
    return rest


def diag(name: str, exit_code: int = 0) -> DiagnosticResult:
    return parse_dcgm_diag(fixture(name), exit_code, observed_at=NOW)


def health(name: str) -> DiagnosticResult:
    return parse_dcgm_health(fixture(name), observed_at=NOW)


def dcgm(result: DiagnosticResult) -> list[DcgmEvidence]:
    assert all(isinstance(f, DcgmEvidence) for f in result.failures)
    return [f for f in result.failures if isinstance(f, DcgmEvidence)]
