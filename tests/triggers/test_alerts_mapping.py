"""Alertmanager payloads: validation, and the mapping of an alert to a node and evidence."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from gpu_remediation.classifier import classify
from gpu_remediation.models import FaultClass
from gpu_remediation.policy_loader import load_policy
from tests.triggers.receiver_support import ZERO_TIME, alert, iso, payload
from triggers.alerts import (
    WebhookPayload,
    find_node,
    map_alerts,
    node_name_from_label,
    payload_problems,
    report_id,
)

LABELS = ["hostname", "Hostname", "node", "instance"]


def parse(body: object) -> WebhookPayload:
    return WebhookPayload.model_validate_json(json.dumps(body))


def problems(body: object) -> list[str]:
    with pytest.raises(ValidationError) as info:
        WebhookPayload.model_validate_json(body if isinstance(body, str) else json.dumps(body))
    return payload_problems(info.value)


@pytest.mark.parametrize(
    ("value", "node"),
    [
        ("gpu-1", "gpu-1"),
        ("ip-10-0-0-1.us-west-2.compute.internal", "ip-10-0-0-1.us-west-2.compute.internal"),
        ("gpu-1:9400", "gpu-1"),
        ("GPU-1", "gpu-1"),
        (" gpu-1 ", "gpu-1"),
        ("gpu_1", None),
        ("[::1]:9400", None),
        ("gpu-1:port", None),
        ("-gpu", None),
        ("a" * 64, None),
    ],
)
def test_label_values_become_node_names_only_when_valid(value: str, node: str | None) -> None:
    assert node_name_from_label(value) == node


def test_the_first_configured_label_present_names_the_node() -> None:
    labels = {"instance": "10.0.0.9:9400", "Hostname": "gpu-old", "node": "gpu-7"}
    found = find_node(labels, LABELS)
    assert (found.node, found.label, found.problem) == ("gpu-old", "Hostname", None)
    assert find_node(labels, ["node", "instance"]).node == "gpu-7"


def test_an_invalid_value_is_an_unknown_node_not_a_fallback_to_later_labels() -> None:
    found = find_node({"hostname": "GPU_07!", "instance": "10.0.0.9:9400"}, LABELS)
    assert found.node is None
    assert found.problem == "unknown_node"
    assert "hostname" in found.detail
    assert "GPU_07!" in found.detail


def test_an_alert_without_node_labels_is_unmapped() -> None:
    found = find_node({"alertname": "X", "hostname": ""}, LABELS)
    assert found.problem == "unmapped"
    assert "hostname, Hostname, node, instance" in found.detail


def test_firing_alert_becomes_evidence_observed_when_it_started() -> None:
    started = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
    body = payload(alert("gpu-1", fingerprint="abc123", starts_at=started))
    (m,) = map_alerts(parse(body), LABELS)
    assert m.lookup.node == "gpu-1"
    evidence = m.evidence()
    assert evidence.observed_at == started
    assert not evidence.cleared
    assert evidence.fingerprint == "abc123"
    assert evidence.labels["xid"] == "48"
    assert evidence.source == "alertmanager/gpu-remediation"
    assert evidence.message == "[critical] Xid on gpu-1"
    assert m.report_id == f"alertmanager/abc123/{started.isoformat()}/firing"


def test_resolved_alert_clears_the_same_key_at_its_end_and_is_another_report() -> None:
    started = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
    ended = started + timedelta(minutes=3)
    firing, resolved = map_alerts(
        parse(
            payload(
                alert("gpu-1", fingerprint="f1", starts_at=started),
                alert(
                    "gpu-1", fingerprint="f1", starts_at=started, status="resolved", ends_at=ended
                ),
            )
        ),
        LABELS,
    )
    assert resolved.evidence().cleared
    assert resolved.evidence().observed_at == ended
    assert resolved.evidence().key == firing.evidence().key
    assert resolved.report_id != firing.report_id


def test_repeats_of_a_firing_episode_share_a_report_id_and_a_new_episode_does_not() -> None:
    started = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
    first = parse(payload(alert("gpu-1", fingerprint="f1", starts_at=started))).alerts[0]
    raw = alert("gpu-1", fingerprint="f1")
    raw["startsAt"] = "2026-12-01T12:00:00+02:00"  # the same instant
    again = parse(payload(raw)).alerts[0]
    later = started + timedelta(hours=1)
    new = parse(payload(alert("gpu-1", fingerprint="f1", starts_at=later))).alerts[0]
    assert report_id(first) == report_id(again) != report_id(new)


def test_xid_in_an_annotation_reaches_the_classifier() -> None:
    raw = alert("gpu-1", alertname="DCGM_FI_DEV_XID_ERRORS")
    del raw["labels"]["xid"]
    raw["annotations"]["value"] = "79"
    (m,) = map_alerts(parse(payload(raw)), LABELS)
    assert m.evidence().labels["value"] == "79"
    verdict = classify([m.evidence()], load_policy())
    assert verdict.fault_class == FaultClass.GPU_FALLEN_OFF_BUS
    assert verdict.gpu_indices == [2]


def test_a_label_xid_wins_over_an_annotation() -> None:
    raw = alert("gpu-1", xid="48")
    raw["annotations"]["xid"] = "79"
    (m,) = map_alerts(parse(payload(raw)), LABELS)
    assert m.evidence().labels["xid"] == "48"


def test_unknown_fields_are_ignored_for_forward_compatibility() -> None:
    body = payload(alert("gpu-1"))
    body["somethingNew"] = {"a": 1}
    body["alerts"][0]["alsoNew"] = True
    assert len(parse(body).alerts) == 1


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda b: b.update(version="3"), "version: Input should be '4' (got '3')"),
        (lambda b: b.pop("alerts"), "alerts: Field required"),
        (lambda b: b.update(alerts=[]), "alerts: List should have at least 1 item"),
        (lambda b: b["alerts"][0].update(status="pending"), "alerts.0.status: Input should be"),
        (lambda b: b["alerts"][0]["labels"].update(gpu=3), "alerts.0.labels.gpu: Input should be"),
        (lambda b: b["alerts"][0].update(fingerprint=""), "alerts.0.fingerprint: String should"),
        (lambda b: b["alerts"][0].update(startsAt="2026-12-01T10:00:00"), "alerts.0.startsAt"),
        (lambda b: b["alerts"][0].update(startsAt=1764583200), "alerts.0.startsAt"),
        (lambda b: b.update(truncatedAlerts="3"), "truncatedAlerts: Input should be"),
        (
            lambda b: b["alerts"][0].update(status="resolved", endsAt=ZERO_TIME),
            "alerts.0: a resolved alert needs endsAt",
        ),
    ],
)
def test_invalid_payloads_name_the_problem_by_path(change: object, expected: str) -> None:
    body = payload(alert("gpu-1", starts_at=datetime(2026, 12, 1, tzinfo=UTC)))
    change(body)  # type: ignore[operator]
    found = problems(body)
    assert any(p.startswith(expected) for p in found), found


def test_broken_json_is_named_as_such() -> None:
    (found,) = problems('{"version": "4", ')
    assert found.startswith("Invalid JSON")


def test_problem_lists_are_bounded() -> None:
    body = payload(*(alert("gpu-1", status="bogus") for _ in range(50)))
    found = problems(body)
    assert len(found) == 21
    assert found[-1] == "... and 30 more problems"


def test_a_firing_alert_may_carry_a_real_end_time() -> None:
    ends = datetime.now(UTC) + timedelta(minutes=4)
    assert parse(payload(alert("gpu-1", ends_at=ends))).alerts[0].ends_at.year > 1
    assert iso(ends).endswith("Z")
