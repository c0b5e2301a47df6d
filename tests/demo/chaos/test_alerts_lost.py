"""Alerts as the second trigger path: an acknowledged alert reaches an incident, none is dropped."""

from __future__ import annotations

from typing import Any

from demo.chaos.facts import AlertRecord
from demo.chaos.invariants import incidents_lost
from tests.demo.chaos.builders import at, facts, incident, node

REPORT = "alertmanager/0123456789abcdef/2026-12-05T09:00:20+00:00/firing"


def _alert(**fields: Any) -> AlertRecord:
    fields.setdefault("starts_at", at(20))
    return AlertRecord(node="gpu-0001", fingerprint="0123456789abcdef", report_id=REPORT, **fields)


def test_an_acknowledged_alert_whose_report_reached_the_nodes_incident_is_not_lost() -> None:
    covered = incident("gpu-0001", 12, 200).model_copy(update={"report_ids": ["w-1", REPORT]})
    result = incidents_lost(
        facts(
            [node("gpu-0001")],
            [covered],
            alerts=[_alert(first_notified_at=at(21), acknowledged_at=at(22))],
        )
    )
    assert result.holds
    assert result.checked.endswith("1 alert(s) notified, 1 acknowledged by the receiver")


def test_an_alert_the_receiver_acknowledged_that_no_incident_got_is_lost_and_named() -> None:
    elsewhere = incident("gpu-0002", 12, 200).model_copy(update={"report_ids": [REPORT]})
    result = incidents_lost(
        facts(
            [node("gpu-0001"), node("gpu-0002")],
            [incident("gpu-0001", 12, 200), elsewhere],
            alerts=[_alert(first_notified_at=at(21), acknowledged_at=at(22))],
        )
    )
    (violation,) = result.violations
    assert violation.startswith("gpu-0001: alert 0123456789abcdef")
    assert "acknowledged by the receiver" in violation
    assert "reached no incident" in violation


def test_an_alert_still_firing_long_after_its_notification_and_never_delivered_is_lost() -> None:
    result = incidents_lost(
        facts(
            [node("gpu-0001")],
            [],
            end=100,
            alert_delivery_slack_s=30.0,
            alerts=[_alert(first_notified_at=at(21))],
        )
    )
    (violation,) = result.violations
    assert "first notified at" in violation
    assert "still not delivered 79s later" in violation


def test_an_alert_that_resolved_before_a_retry_got_through_is_not_owed() -> None:
    # Alertmanager drops a group that only holds alerts resolved before any notification
    # succeeded: the receiver was never told, and the fault is gone.
    result = incidents_lost(
        facts(
            [node("gpu-0001")],
            [],
            end=100,
            alert_delivery_slack_s=30.0,
            alerts=[
                _alert(first_notified_at=at(21), ends_at=at(30)),
                _alert(starts_at=at(90)),  # fired, not notified yet
            ],
        )
    )
    assert result.holds
    assert result.checked.endswith("1 alert(s) notified, 0 acknowledged by the receiver")
