"""The receiver validates and delivers per alert: one bad alert never holds back its group.

Temporal's answers are injected with a client interceptor
(``tests/triggers/temporal_faults.py``) on the real dev server's connection.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from temporalio.client import Client
from temporalio.service import RPCStatusCode

from tests.triggers.receiver_support import alert, payload, receiver, reports_received
from tests.triggers.temporal_faults import TemporalFaults, rpc_error, with_faults


def oversized_labels() -> dict[str, Any]:
    """An alert with 72 labels (64 are allowed)."""
    return alert("gpu-bad", fingerprint="toomanylabels", **{f"extra{i}": "x" for i in range(67)})


def oversized_description() -> dict[str, Any]:
    """An alert with a 70 kB description (64 KiB are allowed)."""
    bad = alert("gpu-bad", fingerprint="hugedescription")
    bad["annotations"]["description"] = "d" * 70_000
    return bad


async def alerts_by_outcome(http: Any) -> dict[str, float]:
    text = (await http.get("/metrics")).text
    return {
        s.labels["outcome"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "gpu_remediation_receiver_alerts_total"
    }


@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        (oversized_labels, "labels: Dictionary should have at most 64 items"),
        (oversized_description, "annotations.description: String should have at most 65536"),
    ],
    ids=["72-labels", "70kB-description"],
)
async def test_one_oversized_alert_among_fifty_valid_ones_is_refused_alone(
    dev_client: Client,
    bad: Any,
    problem: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="gpu_remediation.receiver")
    alerts = [alert(f"gpu-{i}", fingerprint=f"fp{i:02d}") for i in range(50)]
    alerts.insert(20, bad())
    async with receiver(dev_client) as rx:
        response = await rx.post(payload(*alerts))
        assert response.status_code == 200, response.text[:2000]
        answer = response.json()
        assert (answer["received"], answer["delivered"], answer["refused"]) == (51, 50, 1)
        assert [r["index"] for r in answer["results"]] == list(range(51))
        refused = answer["results"][20]
        assert refused["outcome"] == "refused"
        assert (refused["fingerprint"], refused["alertname"]) == (
            bad()["fingerprint"],
            "GpuXidError",
        )
        assert refused["node"] is None
        assert refused["detail"].startswith(f"invalid alert: {problem}"), refused["detail"]
        assert len(refused["detail"]) < 1000  # the 70 kB are not echoed back
        for i in range(50):
            assert await rx.started(f"gpu-{i}")
        assert not await rx.started("gpu-bad")
        counted = await alerts_by_outcome(rx.http)
        assert (counted["delivered"], counted["refused"]) == (50, 1)
    (line,) = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert line.startswith(f"alert {bad()['fingerprint']} (index 20, GpuXidError): refused, ")
    assert problem in line


async def test_a_report_temporal_refuses_as_invalid_is_refused_alone(dev_client: Client) -> None:
    faults = TemporalFaults()
    async with receiver(with_faults(dev_client, faults)) as rx:
        faults.fail(rx.workflow_id("gpu-inv"), rpc_error(RPCStatusCode.INVALID_ARGUMENT))
        response = await rx.post(payload(alert("gpu-inv"), alert("gpu-fine")))
        assert response.status_code == 200, response.text
        answer = response.json()
        invalid, fine = answer["results"]
        assert invalid["outcome"] == "refused"
        assert invalid["node"] == "gpu-inv"
        assert invalid["detail"].startswith(
            "Temporal refused the report as invalid (INVALID_ARGUMENT)"
        )
        assert fine["outcome"] == "delivered"
        assert (answer["delivered"], answer["refused"]) == (1, 1)
        assert faults.calls[rx.workflow_id("gpu-inv")] == 1  # not retried: it cannot help
        assert not await rx.started("gpu-inv")


@pytest.mark.parametrize(
    "status",
    [RPCStatusCode.INTERNAL, RPCStatusCode.UNKNOWN, RPCStatusCode.RESOURCE_EXHAUSTED],
    ids=lambda s: s.name,
)
async def test_a_transient_temporal_error_is_retried_within_the_request(
    dev_client: Client, status: RPCStatusCode
) -> None:
    faults = TemporalFaults()
    async with receiver(with_faults(dev_client, faults)) as rx:
        workflow_id = rx.workflow_id("gpu-flaky")
        faults.fail(workflow_id, rpc_error(status), rpc_error(status))
        response = await rx.post(payload(alert("gpu-flaky", fingerprint="flaky")))
        assert response.status_code == 200, response.text
        assert response.json()["results"][0]["outcome"] == "delivered"
        assert faults.calls[workflow_id] == 3
        assert await reports_received(dev_client, workflow_id) == 1


async def test_a_lasting_internal_error_is_503_and_alertmanagers_retry_delivers_each_report_once(
    dev_client: Client,
) -> None:
    faults = TemporalFaults()
    async with receiver(with_faults(dev_client, faults), delivery_attempts=3) as rx:
        workflow_id = rx.workflow_id("gpu-down")
        faults.fail(workflow_id, *(rpc_error(RPCStatusCode.INTERNAL) for _ in range(3)))
        body = payload(alert("gpu-down", fingerprint="down"), alert("gpu-up", fingerprint="up"))

        first = await rx.post(body)
        assert first.status_code == 503, first.text
        assert first.headers["retry-after"] == "10"
        assert "INTERNAL" in first.json()["detail"]
        assert faults.calls[workflow_id] == 3

        retried = await rx.post(body)  # what Alertmanager does with a 5xx
        assert retried.status_code == 200, retried.text
        outcomes = [r["outcome"] for r in retried.json()["results"]]
        assert outcomes[0] == "delivered"
        assert outcomes[1] in ("delivered", "duplicate")
        assert await reports_received(dev_client, workflow_id) == 1
        assert await reports_received(dev_client, rx.workflow_id("gpu-up")) == 1


async def test_a_refusal_an_operator_must_fix_is_502_so_alertmanager_retries(
    dev_client: Client,
) -> None:
    faults = TemporalFaults()
    async with receiver(with_faults(dev_client, faults)) as rx:
        workflow_id = rx.workflow_id("gpu-perm")
        faults.fail(workflow_id, rpc_error(RPCStatusCode.PERMISSION_DENIED))
        response = await rx.post(payload(alert("gpu-perm")))
        assert response.status_code == 502, response.text
        assert faults.calls[workflow_id] == 1
