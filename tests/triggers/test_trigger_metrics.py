"""The receiver counts requests by route and status, times them, and counts alerts by outcome."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from triggers.metrics import ReceiverMetrics, RequestMetricsMiddleware


def app_with_metrics() -> tuple[FastAPI, ReceiverMetrics]:
    metrics = ReceiverMetrics()
    app = FastAPI()
    app.add_middleware(RequestMetricsMiddleware, metrics=metrics, routes=("/ok", "/boom"))

    @app.get("/ok")
    async def ok() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/boom")
    async def boom() -> None:
        raise RuntimeError("boom")

    return app, metrics


def samples(metrics: ReceiverMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = metrics.exposition().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_requests_are_counted_by_route_method_and_status_and_timed() -> None:
    app, metrics = app_with_metrics()
    with TestClient(app, raise_server_exceptions=False) as client:
        client.get("/ok")
        client.get("/ok")
        client.get("/boom")
        client.get("/scanner/probe/1")
    seen = samples(metrics)
    name = "gpu_remediation_receiver_requests_total"
    assert seen[(name, (("code", "200"), ("method", "GET"), ("route", "/ok")))] == 2
    assert seen[(name, (("code", "500"), ("method", "GET"), ("route", "/boom")))] == 1
    # Unknown paths share one series.
    assert seen[(name, (("code", "404"), ("method", "GET"), ("route", "other")))] == 1
    duration = "gpu_remediation_receiver_request_duration_seconds_count"
    assert seen[(duration, (("method", "GET"), ("route", "/ok")))] == 2
    assert seen[("gpu_remediation_receiver_requests_in_flight", ())] == 0


def test_each_app_has_its_own_registry_with_process_metrics() -> None:
    first, second = ReceiverMetrics(), ReceiverMetrics()
    first.alerts.labels("delivered").inc()
    assert ("gpu_remediation_receiver_alerts_total", (("outcome", "delivered"),)) in samples(first)
    assert ("gpu_remediation_receiver_alerts_total", (("outcome", "delivered"),)) not in samples(
        second
    )
    assert any(name.startswith("process_") for name, _ in samples(first))
