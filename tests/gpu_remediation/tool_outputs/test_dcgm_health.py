"""``dcgmi health -c -j`` -> verdict and evidence (tool_outputs.dcgm_health)."""

from __future__ import annotations

import json

import pytest

from gpu_remediation.tool_outputs.common import DiagnosticParseError
from gpu_remediation.tool_outputs.dcgm_health import parse_dcgm_health
from tests.gpu_remediation.tool_outputs.support import (
    NOW,
    dcgm,
    fixture,
    health,
)


@pytest.mark.parametrize(
    "name", ["health_healthy.json", "health_memory_failure_gpu2_thermal_warning_gpu5.json"]
)
def test_random_health_truncations_never_pass_unless_the_json_is_complete(name: str) -> None:
    full = fixture(name)
    complete = len(full.rstrip())
    for cut in range(len(full) + 1):
        try:
            result = parse_dcgm_health(full[:cut], observed_at=NOW)
        except DiagnosticParseError:
            continue
        if result.passed:
            assert cut >= complete, f"passed on output cut at {cut} of {len(full)}"


# --------------------------------------------------------------- dcgmi health


def test_health_all_healthy_passes() -> None:
    result = health("health_healthy.json")

    assert result.passed
    assert result.failures == []
    assert "healthy" in result.summary


def test_health_memory_failure_on_gpu_2_becomes_evidence_with_error_id_85() -> None:
    result = health("health_memory_failure_gpu2_thermal_warning_gpu5.json")

    assert not result.passed
    [evidence] = dcgm(result)
    assert evidence.check == "health"
    assert evidence.gpu_index == 2
    assert evidence.test == "Memory"
    assert evidence.error_id == 85  # recognised from DCGM's message template
    assert "row remappings are pending" in evidence.message
    assert evidence.source == "dcgmi-health"


def test_health_thermal_warning_is_not_a_failure_but_is_in_the_summary() -> None:
    result = health("health_memory_failure_gpu2_thermal_warning_gpu5.json")

    assert all(f.gpu_index != 5 for f in dcgm(result))
    assert "1 warning(s): Thermal on GPU 5" in result.summary
    # The overflow chunks are joined back into one message.
    assert "thermal violation in GPU 5." in result.summary


def test_health_warning_only_passes() -> None:
    doc = json.loads(fixture("health_memory_failure_gpu2_thermal_warning_gpu5.json"))
    del doc["body"]["GPU"]["children"]["2"]
    doc["body"]["Overall Health"]["value"] = "Warning"

    result = parse_dcgm_health(json.dumps(doc), observed_at=NOW)

    assert result.passed
    assert "healthy with warnings" in result.summary


def test_health_overall_failure_without_a_named_system_still_fails() -> None:
    doc = {"body": {"Overall Health": {"value": "Failure"}}, "header": ["Health Monitor Report"]}

    result = parse_dcgm_health(json.dumps(doc), observed_at=NOW)

    assert not result.passed
    assert "no failing system named" in result.summary


def test_health_unknown_health_word_is_read_as_failure() -> None:
    doc = json.loads(fixture("health_memory_failure_gpu2_thermal_warning_gpu5.json"))
    system = doc["body"]["GPU"]["children"]["5"]["children"]["Errors"]["children"]
    system["Thermal system"]["value"] = "Internal error"

    result = parse_dcgm_health(json.dumps(doc), observed_at=NOW)

    assert {f.gpu_index for f in dcgm(result)} == {2, 5}


def test_health_failure_on_an_nvswitch_has_no_gpu_index() -> None:
    doc = {
        "body": {
            "Overall Health": {"value": "Failure"},
            "Switch": {
                "children": {
                    "0": {
                        "value": "Failure",
                        "children": {
                            "Errors": {
                                "children": {
                                    "NVLINK system": {
                                        "value": "Failure",
                                        "overflow": ["Detected fatal errors on NvSwitch 0 link 4"],
                                    }
                                }
                            }
                        },
                    }
                }
            },
        },
        "header": ["Health Monitor Report"],
    }

    [evidence] = dcgm(parse_dcgm_health(json.dumps(doc), observed_at=NOW))

    assert evidence.gpu_index is None
    assert evidence.message.startswith("Switch 0: NVLINK")


def test_health_watches_not_enabled_is_a_parse_error() -> None:
    with pytest.raises(DiagnosticParseError, match="Health watches not enabled"):
        parse_dcgm_health(
            "Error: Health watches not enabled. Please enable watches. \n", observed_at=NOW
        )


def test_health_truncated_output_is_a_parse_error() -> None:
    text = fixture("health_memory_failure_gpu2_thermal_warning_gpu5.json")
    with pytest.raises(DiagnosticParseError):
        parse_dcgm_health(text[: len(text) // 2], observed_at=NOW)


def test_health_json_without_overall_health_is_a_parse_error() -> None:
    with pytest.raises(DiagnosticParseError, match="Overall Health"):
        parse_dcgm_health('{"body": {}, "header": []}', observed_at=NOW)
