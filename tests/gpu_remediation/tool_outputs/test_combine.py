"""The verification verdict: diag and health combined (tool_outputs.common.combine)."""

from __future__ import annotations

from gpu_remediation.tool_outputs.common import combine
from tests.gpu_remediation.tool_outputs.support import (
    NVVS_ERROR_EXIT,
    diag,
    health,
)

# ---------------------------------------------------------------------- combine


def test_combine_passes_only_when_both_pass() -> None:
    ok_diag, ok_health = diag("dcgm4_pass.json"), health("health_healthy.json")
    bad_health = health("health_memory_failure_gpu2_thermal_warning_gpu5.json")

    assert combine(ok_diag, ok_health).passed
    combined = combine(ok_diag, bad_health)
    assert not combined.passed
    assert combined.failures == bad_health.failures
    assert "dcgmi diag" in combined.summary
    assert "dcgmi health" in combined.summary


def test_combine_keeps_diag_failures_first_and_both_summaries() -> None:
    bad_diag = diag("dcgm4_fail_gpu3.json", NVVS_ERROR_EXIT)
    bad_health = health("health_memory_failure_gpu2_thermal_warning_gpu5.json")

    combined = combine(bad_diag, bad_health)

    assert not combined.passed
    assert [f.key for f in combined.failures] == [
        "dcgm/diag/85/3",
        "dcgm/diag/80/3",
        "dcgm/health/85/2",
    ]
    assert len(combined.summary) <= 1000
