"""External payloads are validated before anything acts on them."""

from datetime import UTC, datetime

import pytest
from pydantic import TypeAdapter, ValidationError

from gpu_remediation.contracts import ResetGpusInput
from gpu_remediation.ids import node_workflow_id
from gpu_remediation.models import Evidence, EvidenceReport, Rung, XidEvidence
from gpu_remediation.rungs import rung_spec

NOW = datetime(2026, 12, 2, tzinfo=UTC)


@pytest.mark.parametrize("name", ["", "Node-1", "node_1", "-node", "node;rm -rf /", "a" * 254])
def test_bad_node_names_are_rejected_everywhere(name: str) -> None:
    with pytest.raises(ValueError, match="invalid node name"):
        node_workflow_id("prod", name)
    with pytest.raises(ValidationError, match="invalid node name"):
        ResetGpusInput(node=name, incident_id="i")
    with pytest.raises(ValidationError, match="invalid node name"):
        EvidenceReport(node=name, evidence=[XidEvidence(observed_at=NOW, source="t", xid=79)])


def test_a_dotted_node_name_is_accepted() -> None:
    assert node_workflow_id("prod", "ip-10-0-1-5.us-west-2.compute.internal").endswith(
        "/ip-10-0-1-5.us-west-2.compute.internal"
    )


@pytest.mark.parametrize("gpu", [-1, 64, 1000])
def test_gpu_indices_out_of_range_are_rejected(gpu: int) -> None:
    with pytest.raises(ValidationError, match="gpu_indices"):
        ResetGpusInput(node="gpu-1", incident_id="i", gpu_indices=[gpu])


def test_unknown_fields_in_evidence_are_rejected() -> None:
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        TypeAdapter(Evidence).validate_python(
            {"kind": "xid", "xid": 79, "observed_at": NOW, "source": "t", "extra": 1}
        )


def test_evidence_is_parsed_by_its_kind() -> None:
    parsed = TypeAdapter(Evidence).validate_python(
        {"kind": "condition", "type": "Ready", "status": "False", "observed_at": NOW, "source": "w"}
    )
    assert parsed.key == "condition/Ready"


def test_an_empty_report_is_rejected() -> None:
    with pytest.raises(ValidationError, match="evidence"):
        EvidenceReport(node="gpu-1", evidence=[])


def test_rungs_climb_in_order_and_escalation_is_the_top() -> None:
    assert [r.value for r in Rung] == [
        "quarantine",
        "stop_gpu_work",
        "diagnose",
        "gpu_reset",
        "reboot",
        "replace",
        "escalate",
    ]
    assert Rung.ESCALATE.next() == Rung.ESCALATE
    assert rung_spec(Rung.REBOOT).disruptive
    assert not rung_spec(Rung.GPU_RESET).disruptive
