"""The receiver over HTTP: authentication, refused payloads, mapping problems, probes, OpenAPI."""

from __future__ import annotations

import json

import pytest
from temporalio.client import Client

from tests.triggers.receiver_support import AUTH, TOKEN, alert, payload, receiver


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong-token-0123456789"},
        {"Authorization": f"Bearer {TOKEN}x"},
        {"Authorization": f"Basic {TOKEN}"},
        {"Authorization": TOKEN},
    ],
    ids=["none", "wrong", "longer", "basic", "no-scheme"],
)
async def test_requests_without_the_token_are_refused_and_start_nothing(
    dev_client: Client, headers: dict[str, str]
) -> None:
    async with receiver(dev_client) as rx:
        response = await rx.post(payload(alert("gpu-1")), headers=headers)
        assert response.status_code == 401
        assert response.headers["www-authenticate"] == "Bearer"
        assert not await rx.started("gpu-1")


async def test_an_invalid_body_without_the_token_is_401_not_422(dev_client: Client) -> None:
    async with receiver(dev_client) as rx:
        response = await rx.http.post("/v1/alerts", content=b"{not json", headers={})
    assert response.status_code == 401


async def test_a_firing_alert_with_the_token_starts_the_node_incident(dev_client: Client) -> None:
    async with receiver(dev_client) as rx:
        response = await rx.post(payload(alert("gpu-1", fingerprint="a1")))
        assert response.status_code == 200, response.text
        body = response.json()
        assert (body["received"], body["delivered"]) == (1, 1)
        (result,) = body["results"]
        assert result["outcome"] == "delivered"
        assert result["node"] == "gpu-1"
        assert result["workflow_id"] == rx.workflow_id("gpu-1")
        assert await rx.started("gpu-1")


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (b"{not json", "Invalid JSON"),
        (b"", "Invalid JSON"),
        (json.dumps([1, 2]).encode(), "Input should be an object"),
        (json.dumps({**payload(alert("gpu-2")), "version": "3"}).encode(), "version: Input"),
        (json.dumps({**payload(alert("gpu-2")), "alerts": "gpu-2"}).encode(), "alerts: Input"),
    ],
    ids=["broken-json", "empty", "array", "version-3", "alerts-not-a-list"],
)
async def test_malformed_payloads_get_422_naming_the_problem_and_start_nothing(
    dev_client: Client, body: bytes, problem: str
) -> None:
    async with receiver(dev_client) as rx:
        response = await rx.http.post("/v1/alerts", content=body, headers=AUTH)
        assert response.status_code == 422
        answer = response.json()
        assert answer["detail"] == "invalid Alertmanager webhook payload (version 4)"
        assert any(p.startswith(problem) for p in answer["problems"]), answer
        for node in ("gpu-2", "gpu-3"):
            assert not await rx.started(node)


@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        ({**alert("gpu-3"), "status": "pending"}, "status: Input should be 'firing' or 'resolved'"),
        ({**alert("gpu-3"), "startsAt": "yesterday"}, "startsAt: Input should be a valid datetime"),
    ],
    ids=["bad-status", "bad-time"],
)
async def test_a_malformed_alert_is_refused_alone_naming_the_problem(
    dev_client: Client, bad: dict[str, object], problem: str
) -> None:
    # Formerly a 422 for the whole payload: Alertmanager does not retry 4xx, so
    # the good alert beside the bad one was lost.
    async with receiver(dev_client) as rx:
        body = payload(alert("gpu-2", fingerprint="good"), {**bad, "fingerprint": "bad"})
        response = await rx.post(body)
        assert response.status_code == 200, response.text
        answer = response.json()
        assert (answer["received"], answer["delivered"], answer["refused"]) == (2, 1, 1)
        good, refused = answer["results"]
        assert (good["index"], good["outcome"]) == (0, "delivered")
        assert (refused["index"], refused["fingerprint"]) == (1, "bad")
        assert refused["alertname"] == "GpuXidError"
        assert refused["outcome"] == "refused"
        assert refused["detail"].startswith(f"invalid alert: {problem}"), refused
        assert await rx.started("gpu-2")
        assert not await rx.started("gpu-3")


async def test_a_body_over_the_limit_is_413(dev_client: Client) -> None:
    async with receiver(dev_client, max_body_bytes=2000) as rx:
        body = payload(*(alert(f"gpu-{i}") for i in range(10)))
        response = await rx.post(body)
        assert response.status_code == 413
        assert not await rx.started("gpu-0")


async def test_unknown_and_unmapped_alerts_are_reported_and_the_rest_delivered(
    dev_client: Client,
) -> None:
    async with receiver(dev_client) as rx:
        body = payload(
            alert("GPU_9!", fingerprint="bad"),
            alert("gpu-4:9400", fingerprint="good", label="instance"),
            alert(None, fingerprint="none"),
        )
        response = await rx.post(body)
        assert response.status_code == 200, response.text
        answer = response.json()
        outcomes = [(r["fingerprint"], r["outcome"], r["node"]) for r in answer["results"]]
        assert outcomes == [
            ("bad", "unknown_node", None),
            ("good", "delivered", "gpu-4"),
            ("none", "unmapped", None),
        ]
        assert "is not a valid Kubernetes node name" in answer["results"][0]["detail"]
        assert (answer["unknown_node"], answer["unmapped"], answer["delivered"]) == (1, 1, 1)
        assert await rx.started("gpu-4")


async def test_node_labels_come_from_the_policy_or_the_app(dev_client: Client) -> None:
    async with receiver(dev_client, node_labels=["exported_node"]) as rx:
        body = payload(alert("gpu-5", label="exported_node"), alert("gpu-6"))
        answer = (await rx.post(body)).json()
        assert [r["outcome"] for r in answer["results"]] == ["delivered", "unmapped"]


async def test_health_readiness_and_openapi_need_no_token(dev_client: Client) -> None:
    async with receiver(dev_client) as rx:
        assert (await rx.http.get("/healthz")).json() == {"status": "ok"}
        ready = await rx.http.get("/readyz")
        assert ready.status_code == 200
        assert ready.json()["ready"] is True
        spec = (await rx.http.get("/openapi.json")).json()
        operation = spec["paths"]["/v1/alerts"]["post"]
        assert operation["requestBody"]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/WebhookPayload"
        }
        schemas = spec["components"]["schemas"]
        assert {"WebhookPayload", "Alert", "ReceiveResult"} <= set(schemas)
        assert "groupKey" in schemas["WebhookPayload"]["properties"]
        assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
        assert {"401", "422", "503"} <= set(operation["responses"])
        docs = await rx.http.get("/docs")
        assert docs.status_code == 200
        assert "swagger" in docs.text.lower()
