"""NVSentinel's ExternalRemediationRequest read, bounded and mapped to this project's classes."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from gpu_remediation import nvsentinel as nvs
from gpu_remediation.classifier import classify
from gpu_remediation.models import FaultClass, Outcome
from gpu_remediation.policy_loader import load_policy

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
POLICY = load_policy()


def _raw(**event: Any) -> dict[str, Any]:
    """A request as the API server returns it (design 040's example, abridged)."""
    health_event = {
        "version": 1,
        "agent": "syslog-health-monitor",
        "componentClass": "GPU",
        "checkName": "SysLogsXIDError",
        "isFatal": True,
        "isHealthy": False,
        "message": "Xid 79: GPU has fallen off the bus",
        "recommendedAction": "CUSTOM",
        "customRecommendedAction": "EXTERNAL_REMEDIATION",
        "errorCode": ["79"],
        "entitiesImpacted": [
            {"entityType": "GPU_UUID", "entityValue": "GPU-abc"},
            {"entityType": "GPU", "entityValue": "3"},
        ],
        "nodeName": "gpu-node-7",
        "processingStrategy": "EXECUTE_REMEDIATION",
        "quarantineOverrides": {"force": False, "skip": False},
        "id": "he-1",
        "generatedTimestamp": "2026-12-06T11:59:00Z",
    }
    health_event.update(event)
    return {
        "apiVersion": "nvsentinel.dgxc.nvidia.com/v1",
        "kind": "ExternalRemediationRequest",
        "metadata": {"name": "err-1", "uid": "u-1", "resourceVersion": "7", "generation": 1},
        "spec": {"healthEvent": health_event},
        "status": {
            "conditions": [
                {
                    "type": "NVSentinelOwnershipReleased",
                    "status": "True",
                    "reason": "ReleaseTaintApplied",
                },
                {"type": nvs.COMPLETE, "status": "Unknown", "reason": "AwaitingExternalSystem"},
            ]
        },
    }


def _classified(**event: Any) -> FaultClass:
    request = nvs.parse_request(_raw(**event))
    result = classify([nvs.evidence(request, NOW)], POLICY)
    return result.fault_class


def test_a_request_becomes_evidence_with_its_gpu_and_codes() -> None:
    request = nvs.parse_request(_raw())
    assert request.node == "gpu-node-7"
    assert request.completion() is None  # Unknown is still open
    evidence = nvs.evidence(request, NOW)
    assert (evidence.request, evidence.gpu_index, evidence.error_codes) == ("err-1", 3, ["79"])
    assert evidence.recommended_action == "CUSTOM"
    assert evidence.key == "nvsentinel/err-1"


def test_an_xid_is_classified_from_this_projects_catalog() -> None:
    assert _classified() == FaultClass.GPU_FALLEN_OFF_BUS
    assert _classified(errorCode=["48"]) == FaultClass.GPU_RESET_REQUIRED


@pytest.mark.parametrize(
    ("action", "expected"),
    [
        ("COMPONENT_RESET", FaultClass.GPU_RESET_REQUIRED),
        (24, FaultClass.REBOOT_REQUIRED),  # RESTART_BM by its protobuf number
        ("RESTART_VM", FaultClass.REBOOT_REQUIRED),
        ("REPLACE_VM", FaultClass.HARDWARE_FAILURE),
        ("CONTACT_SUPPORT", FaultClass.UNKNOWN),
        ("CUSTOM", FaultClass.UNKNOWN),
        ("SOMETHING_NEWER", FaultClass.UNKNOWN),
    ],
)
def test_without_an_xid_the_recommended_action_decides(action: Any, expected: FaultClass) -> None:
    assert (
        _classified(checkName="GpuMemWatch", errorCode=["DCGM_FR_DBE"], recommendedAction=action)
        == expected
    )


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"nodeName": None}, "nodeName"),
        ({"nodeName": "Not A Node"}, "nodeName"),
        ({"errorCode": "79"}, "errorCode"),
        ({"isFatal": "maybe"}, "isFatal"),
    ],
)
def test_a_bad_request_is_refused_naming_the_field(change: dict[str, Any], field: str) -> None:
    raw = _raw()
    raw["spec"]["healthEvent"].update(change)
    if change.get("nodeName") is None and "nodeName" in change:
        del raw["spec"]["healthEvent"]["nodeName"]
    with pytest.raises(ValueError, match=field):
        nvs.parse_request(raw)


def test_long_text_and_lists_are_cut_not_refused() -> None:
    raw = _raw(message="x" * 5000, errorCode=[str(n) for n in range(100)])
    raw["metadata"]["annotations"] = {
        "kubectl.kubernetes.io/last-applied-configuration": "y" * 9000
    }
    request = nvs.parse_request(raw)
    assert len(request.spec.health_event.message) == 4096
    assert len(request.spec.health_event.error_code) == 64


def test_the_taken_mark_is_read_with_its_offset_or_as_utc() -> None:
    raw = _raw()
    raw["metadata"]["annotations"] = {nvs.PICKED_UP_ANNOTATION: "2026-12-06T11:00:00"}
    assert nvs.parse_request(raw).picked_up_at() == datetime(2026, 12, 6, 11, tzinfo=UTC)
    raw["metadata"]["annotations"] = {nvs.PICKED_UP_ANNOTATION: "yesterday"}
    assert nvs.parse_request(raw).picked_up_at() is None


def test_a_request_without_a_health_event_is_refused() -> None:
    raw = _raw()
    del raw["spec"]["healthEvent"]
    with pytest.raises(ValueError, match="healthEvent"):
        nvs.parse_request(raw)


def test_every_outcome_has_an_answer_and_only_a_healthy_or_new_node_is_true() -> None:
    answers = {outcome: nvs.completion(outcome)[0] for outcome in Outcome}
    assert {o for o, a in answers.items() if a == "True"} == {
        Outcome.REPAIRED,
        Outcome.RECOVERED,
        Outcome.REPLACED,
        Outcome.NODE_GONE,
        Outcome.TRANSIENT,
        Outcome.NO_FAULT_FOUND,
        Outcome.APPLICATION_FAULT,
    }
    assert nvs.completion(None) == ("False", "IncidentFailed")
    for _, reason in map(nvs.completion, Outcome):
        assert reason.isalnum(), reason  # a Kubernetes condition reason
        assert reason[0].isupper(), reason


def test_a_completed_request_is_no_longer_open() -> None:
    raw = _raw()
    raw["status"]["conditions"][1]["status"] = "False"
    assert nvs.parse_request(raw).completion() == "False"
