"""``dcgmi diag -j`` (DCGM 3.x and 4.x) -> verdict and evidence (tool_outputs.dcgm_diag).

Fixture provenance (the DCGM source of each shape): tests/activities/fixtures/README.md.
"""

from __future__ import annotations

import json
import random

import pytest

from gpu_remediation.models import EvidenceReport
from gpu_remediation.tool_outputs.common import DiagnosticParseError
from gpu_remediation.tool_outputs.dcgm_diag import parse_dcgm_diag
from tests.gpu_remediation.tool_outputs.support import (
    NOW,
    NVVS_ERROR_EXIT,
    dcgm,
    diag,
    fixture,
)

# ------------------------------------------------------------------ DCGM 4.x


def test_dcgm4_all_pass_is_a_pass_without_failures() -> None:
    result = diag("dcgm4_pass.json")

    assert result.passed
    assert result.failures == []
    assert "DCGM 4.2.3" in result.summary
    assert "12 result(s): 12 pass, 0 fail" in result.summary


def test_dcgm4_failure_on_gpu_3_becomes_evidence_with_error_id_85() -> None:
    result = diag("dcgm4_fail_gpu3.json", NVVS_ERROR_EXIT)

    assert not result.passed
    pending = [f for f in dcgm(result) if f.error_id == 85]
    assert len(pending) == 1
    evidence = pending[0]
    assert evidence.check == "diag"
    assert evidence.gpu_index == 3
    assert evidence.severity == 6
    assert evidence.test == "software"
    assert "row remappings are pending" in evidence.message
    assert evidence.observed_at == NOW
    assert evidence.source == "dcgmi-diag"


def test_dcgm4_failure_on_gpu_3_also_reports_row_remap_failure_80_from_the_memory_test() -> None:
    result = diag("dcgm4_fail_gpu3.json", NVVS_ERROR_EXIT)

    assert {(f.error_id, f.gpu_index, f.test) for f in dcgm(result)} == {
        (85, 3, "software"),
        (80, 3, "memory"),
    }
    assert "GPU 3" in result.summary
    assert "pending row remap" in result.summary
    assert "row remap failure" in result.summary


def test_dcgm4_failure_is_read_from_the_json_even_when_the_exit_code_is_zero() -> None:
    assert not diag("dcgm4_fail_gpu3.json", 0).passed


def test_dcgm4_runtime_error_fails_the_run_without_hardware_evidence() -> None:
    result = diag("dcgm4_runtime_error.json", NVVS_ERROR_EXIT)

    assert not result.passed
    assert result.failures == []
    assert "did not complete" in result.summary
    assert "in use by another process" in result.summary
    assert "DCGM_ST_NVVS_ERROR" in result.summary


def test_non_gpu_entity_failure_is_evidence_without_a_gpu_index() -> None:
    doc = json.loads(fixture("dcgm4_pass.json"))
    doc["DCGM Diagnostic"]["test_categories"][0]["tests"][0]["results"].append(
        {"entity_group": "CPU", "entity_group_id": 7, "entity_id": 0, "status": "Fail"}
    )

    result = parse_dcgm_diag(json.dumps(doc), 1, observed_at=NOW)

    assert not result.passed
    [evidence] = dcgm(result)
    assert evidence.gpu_index is None
    assert evidence.message.startswith("CPU 0:")


def test_gpu_entity_id_outside_0_to_63_is_not_used_as_an_index() -> None:
    doc = json.loads(fixture("dcgm4_pass.json"))
    doc["DCGM Diagnostic"]["test_categories"][0]["tests"][0]["results"][0]["entity_id"] = 99
    doc["DCGM Diagnostic"]["test_categories"][0]["tests"][0]["results"][0]["status"] = "Fail"

    [evidence] = dcgm(parse_dcgm_diag(json.dumps(doc), 1, observed_at=NOW))

    assert evidence.gpu_index is None
    assert "GPU 99 (not a valid index)" in evidence.message


def test_test_summary_failure_with_a_node_wide_error_becomes_evidence() -> None:
    doc = json.loads(fixture("dcgm4_pass.json"))
    test = doc["DCGM Diagnostic"]["test_categories"][0]["tests"][0]
    test["test_summary"] = {
        "status": "Fail",
        "warnings": [
            {
                "warning": "Found driver on the denylist: nouveau",
                "error_id": 23,
                "error_category": 3,
                "error_severity": 5,
            }
        ],
    }

    result = parse_dcgm_diag(json.dumps(doc), 1, observed_at=NOW)

    assert not result.passed
    [evidence] = dcgm(result)
    assert (evidence.error_id, evidence.gpu_index, evidence.severity) == (23, None, 5)
    assert evidence.message.startswith("node:")


def test_unknown_status_word_is_read_as_fail() -> None:
    doc = json.loads(fixture("dcgm4_pass.json"))
    doc["DCGM Diagnostic"]["test_categories"][1]["tests"][0]["results"][2]["status"] = "Errored"

    result = parse_dcgm_diag(json.dumps(doc), 0, observed_at=NOW)

    assert not result.passed
    assert [f.gpu_index for f in dcgm(result)] == [2]
    assert "Errored" in result.summary


def test_extra_fields_from_newer_dcgm_are_ignored() -> None:
    doc = json.loads(fixture("dcgm4_pass.json"))
    doc["metadata"]["new_field"] = {"nested": [1, 2]}
    doc["DCGM Diagnostic"]["test_categories"][0]["tests"][0]["results"][0]["aux"] = "x"

    assert parse_dcgm_diag(json.dumps(doc), 0, observed_at=NOW).passed


def test_wrong_field_type_is_a_parse_error() -> None:
    doc = json.loads(fixture("dcgm4_pass.json"))
    doc["DCGM Diagnostic"]["test_categories"][0]["tests"][0]["results"][0]["entity_id"] = "zero"

    with pytest.raises(DiagnosticParseError, match="unexpected shape"):
        parse_dcgm_diag(json.dumps(doc), 0, observed_at=NOW)


def test_all_skipped_is_not_a_pass() -> None:
    doc = json.loads(fixture("dcgm4_pass.json"))
    for category in doc["DCGM Diagnostic"]["test_categories"]:
        for test in category["tests"]:
            for result in test["results"]:
                result["status"] = "Skip"

    result = parse_dcgm_diag(json.dumps(doc), 0, observed_at=NOW)

    assert not result.passed
    assert result.failures == []
    assert "no test passed" in result.summary


def test_non_zero_exit_with_every_test_passing_is_not_a_pass() -> None:
    result = diag("dcgm4_pass.json", 1)

    assert not result.passed
    assert "exit code 1 although no test failed" in result.summary


def test_long_warning_text_is_truncated_to_fit_the_evidence_model() -> None:
    doc = json.loads(fixture("dcgm4_fail_gpu3.json"))
    results = doc["DCGM Diagnostic"]["test_categories"][0]["tests"][0]["results"]
    results[3]["warnings"][0]["warning"] = "x" * 20_000

    result = parse_dcgm_diag(json.dumps(doc), 1, observed_at=NOW)

    assert all(len(f.message) <= 1024 for f in result.failures)
    assert len(result.summary) <= 1000


def test_failures_are_capped_at_what_an_evidence_report_accepts() -> None:
    doc = json.loads(fixture("dcgm4_pass.json"))
    results = doc["DCGM Diagnostic"]["test_categories"][0]["tests"][0]["results"]
    results[0]["status"] = "Fail"
    results[0]["warnings"] = [
        {"warning": f"w{i}", "error_id": i, "error_category": 1, "error_severity": 2}
        for i in range(300)
    ]

    result = parse_dcgm_diag(json.dumps(doc), 1, observed_at=NOW)

    assert len(result.failures) == 256
    assert "44 more failure(s) not listed" in result.summary
    EvidenceReport(node="ip-10-0-0-1.ec2.internal", evidence=result.failures)


# ------------------------------------------------------------------ DCGM 3.x


def test_dcgm3_pass_with_csv_gpu_ids_and_null_entries_is_a_pass() -> None:
    result = diag("dcgm3_pass.json")

    assert result.passed
    assert "DCGM 3.1.8" in result.summary


def test_dcgm3_failure_on_gpu_1_becomes_evidence_with_error_id_4() -> None:
    result = diag("dcgm3_fail.json", NVVS_ERROR_EXIT)

    assert not result.passed
    dbe = [f for f in dcgm(result) if f.error_id == 4]
    assert [(f.gpu_index, f.test, f.severity) for f in dbe] == [(1, "GPU Memory", 2)]


def test_dcgm3_warn_with_a_catalogued_error_id_counts_as_a_failure() -> None:
    # Error 85 (pending row remap) on a Warn: the ladder must act on it.
    result = diag("dcgm3_fail.json", NVVS_ERROR_EXIT)

    [pending] = [f for f in dcgm(result) if f.error_id == 85]
    assert "GPU 2 had memory errors" in pending.message


def test_dcgm3_node_wide_result_takes_the_gpu_its_message_names() -> None:
    # The software test reports for all GPUs at once ("0,1,2,3"); the message names GPU 2.
    [pending] = [f for f in dcgm(diag("dcgm3_fail.json", NVVS_ERROR_EXIT)) if f.error_id == 85]

    assert pending.gpu_index == 2


def test_node_wide_message_naming_several_gpus_keeps_no_gpu_index() -> None:
    doc = json.loads(fixture("dcgm3_pass.json"))
    result0 = doc["DCGM GPU Diagnostic"]["test_categories"][0]["tests"][0]["results"][0]
    result0["status"] = "FAIL"
    result0["warnings"] = ["GPU 0 and GPU 1 disagree"]

    [evidence] = dcgm(parse_dcgm_diag(json.dumps(doc), 1, observed_at=NOW))

    assert evidence.gpu_index is None


def test_dcgm3_benign_warnings_are_not_failures_but_are_listed_in_the_summary() -> None:
    result = diag("dcgm3_fail.json", NVVS_ERROR_EXIT)

    assert {f.error_id for f in dcgm(result)} == {4, 85}
    assert "warnings (not failures)" in result.summary
    assert "Persistence Mode" in result.summary
    assert "Targeted Stress on GPU 0" in result.summary


def test_dcgm3_warn_only_run_passes() -> None:
    doc = json.loads(fixture("dcgm3_pass.json"))
    stress = doc["DCGM GPU Diagnostic"]["test_categories"][2]["tests"][0]["results"][0]
    stress["status"] = "WARN"
    stress["warnings"] = ["GPU 0: Detected clock throttling due to thermal violation in GPU 0."]

    result = parse_dcgm_diag(json.dumps(doc), 0, observed_at=NOW)

    assert result.passed
    assert "1 warn" in result.summary


def test_dcgm3_warn_with_isolate_severity_counts_as_a_failure() -> None:
    doc = json.loads(fixture("dcgm3_pass.json"))
    result0 = doc["DCGM GPU Diagnostic"]["test_categories"][1]["tests"][0]["results"][0]
    result0["status"] = "Warn"
    result0["warnings"] = [{"warning": "PCIe replays", "error_id": 98, "error_severity": 2}]

    result = parse_dcgm_diag(json.dumps(doc), 0, observed_at=NOW)

    assert not result.passed
    assert [(f.error_id, f.gpu_index) for f in dcgm(result)] == [(98, 0)]


def test_dcgm3_integer_gpu_id_is_accepted() -> None:
    doc = json.loads(fixture("dcgm3_pass.json"))
    memory = doc["DCGM GPU Diagnostic"]["test_categories"][2]["tests"][0]["results"][1]
    memory.update({"gpu_ids": 1, "status": "FAIL", "warnings": ["memory mismatch"]})

    [evidence] = dcgm(parse_dcgm_diag(json.dumps(doc), 1, observed_at=NOW))

    assert (evidence.gpu_index, evidence.error_id) == (1, None)


# ------------------------------------------------- unparseable diag output


def test_truncated_output_raises_a_parse_error_not_a_verdict() -> None:
    with pytest.raises(DiagnosticParseError, match="not complete JSON"):
        diag("dcgm4_fail_gpu3_truncated.txt", NVVS_ERROR_EXIT)


def test_garbage_bytes_raise_a_parse_error() -> None:
    with pytest.raises(DiagnosticParseError):
        diag("garbage.bin", 0)


def test_parse_error_is_a_value_error() -> None:
    assert issubclass(DiagnosticParseError, ValueError)


def test_empty_output_with_exit_code_zero_is_a_parse_error() -> None:
    with pytest.raises(DiagnosticParseError, match="cannot tell whether it passed"):
        parse_dcgm_diag("", 0, observed_at=NOW)


def test_non_zero_exit_without_json_is_a_failed_run_with_a_clear_summary() -> None:
    result = parse_dcgm_diag("bash: dcgmi: command not found\n", 127, observed_at=NOW)

    assert not result.passed
    assert result.failures == []
    assert "exit code 127" in result.summary
    assert "dcgmi: command not found" in result.summary


def test_unknown_top_level_key_is_a_parse_error() -> None:
    with pytest.raises(DiagnosticParseError, match="neither"):
        parse_dcgm_diag('{"something": {}}', 0, observed_at=NOW)


def test_text_after_the_json_document_is_a_parse_error() -> None:
    with pytest.raises(DiagnosticParseError, match="after the JSON"):
        parse_dcgm_diag(fixture("dcgm4_pass.json") + "\n{ partial", 0, observed_at=NOW)


def test_warning_line_before_the_json_is_skipped_as_dcgm_does() -> None:
    text = "WARNING: something the wrapper printed\n" + fixture("dcgm4_pass.json")

    assert parse_dcgm_diag(text, 0, observed_at=NOW).passed


@pytest.mark.parametrize("name", ["dcgm4_pass.json", "dcgm3_pass.json"])
def test_random_truncations_never_pass_unless_the_json_is_complete(name: str) -> None:
    full = fixture(name)
    complete = len(full.rstrip())
    rng = random.Random(20261202)  # fixed seed: a failure must be reproducible
    cuts = {0, 1, complete - 1, complete, len(full)} | {
        rng.randrange(len(full)) for _ in range(400)
    }
    for cut in sorted(cuts):
        for exit_code in (0, 1):
            try:
                result = parse_dcgm_diag(full[:cut], exit_code, observed_at=NOW)
            except DiagnosticParseError:
                continue
            if result.passed:
                assert cut >= complete, f"passed on output cut at {cut} of {len(full)}"
