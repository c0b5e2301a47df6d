"""Fault injection (errors, throttling, latency, dropped connections) and the request log."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import urllib3
from kubernetes.client.rest import ApiException

from simulator.kube_api import FaultInjector, KubeApiServer, KubeStore

NODE_PATH = r"^/api/v1/nodes/n1$"


@pytest.fixture(autouse=True)
def _node(kube_store: KubeStore) -> None:
    kube_store.put_node("n1")


def statuses(api: KubeApiServer) -> list[int | None]:
    return [r.status for r in api.requests()]


def test_500_twice_then_success(core: Any, kube_api: KubeApiServer) -> None:
    kube_api.faults.inject(NODE_PATH, method="GET", status=500, times=2)
    for _ in range(2):
        with pytest.raises(ApiException) as err:
            core.read_node("n1")
        assert err.value.status == 500
        assert json.loads(err.value.body)["reason"] == "InternalError"
    assert core.read_node("n1").metadata.name == "n1"
    assert statuses(kube_api) == [500, 500, 200]
    assert [r.fault for r in kube_api.requests()] == [True, True, False]


def test_throttling_with_retry_after(core: Any, kube_api: KubeApiServer) -> None:
    kube_api.faults.inject(r"^/api/v1/nodes$", method="POST", status=429, retry_after=7, times=1)
    with pytest.raises(ApiException) as err:
        core.create_node({"metadata": {"name": "n2"}})
    assert err.value.status == 429
    assert err.value.headers["Retry-After"] == "7"
    core.create_node({"metadata": {"name": "n2"}})


def test_urllib3_retries_idempotent_requests_on_429_with_retry_after(
    core: Any, kube_api: KubeApiServer
) -> None:
    # Worth knowing for the activities: urllib3's default Retry(3) transparently retries
    # GET/PUT/DELETE answered 413/429/503 with a Retry-After header.
    kube_api.faults.inject(NODE_PATH, method="GET", status=503, retry_after=0, times=1)
    core.read_node("n1")
    assert statuses(kube_api) == [503, 200]


def test_dropped_connection_on_post_raises_protocol_error(
    core: Any, kube_api: KubeApiServer
) -> None:
    kube_api.faults.inject(r"^/api/v1/nodes$", method="POST", drop=True, times=1)
    with pytest.raises(urllib3.exceptions.ProtocolError):
        core.create_node({"metadata": {"name": "n2"}})
    core.create_node({"metadata": {"name": "n2"}})
    assert statuses(kube_api) == [None, 201]


def test_dropped_connections_on_get_exhaust_urllib3_retries(
    core: Any, kube_api: KubeApiServer
) -> None:
    kube_api.faults.inject(NODE_PATH, method="GET", drop=True)
    with pytest.raises(urllib3.exceptions.MaxRetryError):
        core.read_node("n1")
    assert statuses(kube_api) == [None] * 4  # the first try and urllib3's three retries


def test_latency_is_observable(core: Any, kube_api: KubeApiServer) -> None:
    kube_api.faults.inject(NODE_PATH, method="GET", latency=0.3, times=1)
    started = time.monotonic()
    core.read_node("n1")
    assert time.monotonic() - started >= 0.3
    fast = time.monotonic()
    core.read_node("n1")
    assert time.monotonic() - fast < 0.3
    first, second = kube_api.requests()
    assert first.duration >= 0.3
    assert first.fault
    assert second.duration < 0.3
    assert not second.fault


def test_probabilistic_faults_are_reproducible() -> None:
    def pattern(seed: int) -> list[bool]:
        faults = FaultInjector(seed=seed)
        faults.inject("^/api", status=500, probability=0.5)
        return [faults.decide("GET", "/api/v1/nodes").status == 500 for _ in range(40)]

    assert pattern(7) == pattern(7)
    assert 5 < sum(pattern(7)) < 35
    assert pattern(7) != pattern(8)


def test_rules_match_method_and_path(kube_api: KubeApiServer, core: Any) -> None:
    rule = kube_api.faults.inject(r"/nodes/", method="PATCH", status=503)
    core.read_node("n1")
    with pytest.raises(ApiException) as err:
        core.patch_node("n1", {"metadata": {"labels": {"a": "b"}}})
    assert err.value.status == 503
    assert kube_api.faults.remove(rule.id)
    core.patch_node("n1", {"metadata": {"labels": {"a": "b"}}})


def test_http_admin_endpoints(kube_api: KubeApiServer, core: Any) -> None:
    http = urllib3.PoolManager()
    base = f"{kube_api.url}/_emulator"
    added = http.request(
        "POST",
        f"{base}/faults",
        body=json.dumps({"path": NODE_PATH, "method": "GET", "status": 500, "times": 1}),
        headers={"Content-Type": "application/json"},
    )
    assert added.status == 201
    rule_id = json.loads(added.data)["id"]
    assert [r["id"] for r in json.loads(http.request("GET", f"{base}/faults").data)] == [rule_id]
    with pytest.raises(ApiException):
        core.read_node("n1")
    log = json.loads(http.request("GET", f"{base}/requests").data)
    assert [(r["method"], r["path"], r["status"]) for r in log] == [
        ("GET", "/api/v1/nodes/n1", 500)
    ]
    bad = http.request("POST", f"{base}/faults", body=b'{"path": "x", "bogus": 1}')
    assert bad.status == 400
    assert http.request("POST", f"{base}/reset").status == 200
    assert kube_api.requests() == []
    assert kube_api.faults.rules() == []
    assert core.list_node().items == []
