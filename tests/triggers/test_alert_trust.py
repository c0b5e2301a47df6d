"""What the receiver does not take at an alert's word: a stated fault class, a future time.

A metric series can carry any label its exporter likes, and a payload any time
its sender's clock says: a ``fault_class`` label is honoured only where the
policy trusts it, and no evidence is observed later than the receiver's clock
(docs/security.md, "Alerts").
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta

import pytest
from temporalio.client import Client

from gpu_remediation.classifier import classify
from gpu_remediation.evidence_history import received_reports
from gpu_remediation.models import AlertEvidence, FaultClass
from gpu_remediation.policy import Policy
from gpu_remediation.policy_loader import load_policy
from tests.triggers.receiver_support import alert, payload, receiver
from triggers.alerts import MappedAlert, WebhookPayload, map_alerts

LABELS = ["hostname", "Hostname", "node", "instance"]
NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def trusting_policy() -> Policy:
    default = load_policy()
    triggers = default.triggers.model_copy(update={"trust_alert_fault_class": True})
    return default.model_copy(update={"triggers": triggers})


def xid_alert_stating(fault_class: str, **options: object) -> dict[str, object]:
    """A GpuXidError alert as the shipped rule words it (Xid 13 in the annotation),
    whose series also carried ``fault_class``.
    """
    raw = alert("gpu-1", metric="DCGM_FI_DEV_XID_ERRORS", fault_class=fault_class, **options)  # type: ignore[arg-type]
    del raw["labels"]["xid"]
    raw["annotations"]["xid"] = "13"
    return raw


def mapped(body: dict[str, object], **options: object) -> MappedAlert:
    parsed = WebhookPayload.model_validate_json(json.dumps(body))
    (m,) = map_alerts(parsed, LABELS, **options)  # type: ignore[arg-type]
    return m


def test_a_series_fault_class_label_is_dropped_and_the_alert_classified_from_its_xid() -> None:
    m = mapped(payload(xid_alert_stating("hardware_failure")), received_at=NOW)
    evidence = m.evidence()
    assert "fault_class" not in evidence.labels
    assert m.ignored_fault_class
    verdict = classify([evidence], load_policy())
    # Xid 13 is an application error: the workload's owner is told, the node kept.
    assert verdict.fault_class == FaultClass.APPLICATION
    assert not any("set by the alert rule" in reason for reason in verdict.reasons)


def test_a_fault_class_label_applies_when_the_policy_trusts_it() -> None:
    policy = trusting_policy()
    m = mapped(
        payload(xid_alert_stating("hardware_failure")),
        received_at=NOW,
        trust_fault_class=policy.triggers.trust_alert_fault_class,
    )
    assert m.evidence().labels["fault_class"] == "hardware_failure"
    assert not m.ignored_fault_class
    assert classify([m.evidence()], policy).fault_class == FaultClass.HARDWARE_FAILURE


def test_the_default_policy_does_not_trust_alert_fault_classes() -> None:
    assert load_policy().triggers.trust_alert_fault_class is False


def test_a_firing_alert_dated_in_the_future_is_observed_when_received() -> None:
    m = mapped(payload(alert("gpu-1", starts_at=NOW + timedelta(days=3650))), received_at=NOW)
    assert m.evidence().observed_at == NOW
    assert m.skew == timedelta(days=3650)


def test_a_resolved_alert_ending_in_the_future_clears_when_received() -> None:
    body = payload(
        alert(
            "gpu-1",
            status="resolved",
            starts_at=NOW - timedelta(hours=1),
            ends_at=NOW + timedelta(minutes=5),
        )
    )
    m = mapped(body, received_at=NOW)
    assert m.evidence().cleared
    assert m.evidence().observed_at == NOW
    assert m.skew == timedelta(minutes=5)


def test_past_alert_times_are_kept() -> None:
    started = NOW - timedelta(hours=2)
    firing = mapped(payload(alert("gpu-1", starts_at=started)), received_at=NOW)
    assert firing.evidence().observed_at == started
    assert firing.skew is None
    ended = NOW - timedelta(minutes=1)
    resolved = mapped(
        payload(alert("gpu-1", status="resolved", starts_at=started, ends_at=ended)),
        received_at=NOW,
    )
    assert resolved.evidence().observed_at == ended


def test_the_report_id_still_names_the_episode_the_sender_dated() -> None:
    # Clamping changes when the evidence counts from, not which episode it is:
    # Alertmanager's repeats of the episode stay duplicates.
    future = NOW + timedelta(days=1)
    body = payload(alert("gpu-1", fingerprint="f1", starts_at=future))
    first = mapped(body, received_at=NOW)
    later = mapped(body, received_at=NOW + timedelta(minutes=5))
    assert first.report_id == later.report_id
    assert first.evidence().observed_at == NOW


def test_a_naive_receiver_clock_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        mapped(payload(alert("gpu-1")), received_at=NOW.replace(tzinfo=None))


async def _delivered(client: Client, workflow_id: str) -> AlertEvidence:
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    ((report, _),) = received_reports(history.events)
    (evidence,) = report.evidence
    assert isinstance(evidence, AlertEvidence)
    return evidence


async def test_the_receiver_delivers_a_future_alert_observed_now_and_logs_the_skew(
    dev_client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    far = datetime(9000, 1, 1, tzinfo=UTC)
    async with receiver(dev_client) as rx:
        before = datetime.now(UTC)
        with caplog.at_level(logging.WARNING, logger="gpu_remediation.receiver"):
            response = await rx.post(payload(alert("gpu-1", fingerprint="fut1", starts_at=far)))
        after = datetime.now(UTC)
        assert response.status_code == 200, response.text
        evidence = await _delivered(dev_client, rx.workflow_id("gpu-1"))
    assert before <= evidence.observed_at <= after
    (line,) = [r.getMessage() for r in caplog.records if "dated after" in r.getMessage()]
    assert "fut1" in line
    assert "gpu-1" in line


async def test_the_receiver_drops_an_untrusted_fault_class_and_logs_it(
    dev_client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    async with receiver(dev_client) as rx:
        with caplog.at_level(logging.WARNING, logger="gpu_remediation.receiver"):
            response = await rx.post(payload(xid_alert_stating("hardware_failure")))
        assert response.status_code == 200, response.text
        evidence = await _delivered(dev_client, rx.workflow_id("gpu-1"))
    assert "fault_class" not in evidence.labels
    (line,) = [r.getMessage() for r in caplog.records if "does not trust" in r.getMessage()]
    assert "hardware_failure" in line


async def test_the_receiver_keeps_the_fault_class_when_its_policy_trusts_it(
    dev_client: Client,
) -> None:
    async with receiver(dev_client, policy=trusting_policy()) as rx:
        response = await rx.post(payload(xid_alert_stating("hardware_failure")))
        assert response.status_code == 200, response.text
        evidence = await _delivered(dev_client, rx.workflow_id("gpu-1"))
    assert evidence.labels["fault_class"] == "hardware_failure"
