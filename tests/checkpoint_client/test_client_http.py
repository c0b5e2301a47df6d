"""The helper reads the request from the downward-API file and answers by PATCHing its pod.

Every answer goes over real HTTP to the Kubernetes API emulator (no client is patched);
the base URL, token and CA paths are injected as a pod's environment would give them.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from checkpoint_client import (
    ANSWER_ANNOTATION,
    OPT_IN_ANNOTATION,
    REQUEST_ANNOTATION,
    STEP_TIME_ANNOTATION,
    CheckpointClient,
    CheckpointClientError,
    KubeConfig,
    StepTime,
    parse_step_time,
)
from simulator.kube_api import PODS, KubeApiServer, KubeStore

from .downward_files import write_annotations

NS = "training"
POD = "llama-trainer-0-0"
INCIDENT = "gpu-remediation/demo/h100-0000/run-1"
NOW = datetime(2026, 12, 4, 13, 4, 31, tzinfo=UTC)


def request_value(incident: str = INCIDENT, urgency: str = "checkpoint_first") -> str:
    return json.dumps(
        {
            "version": 1,
            "incident": incident,
            "node": "h100-0000",
            "deadline": "2026-12-04T13:10:00Z",
            "urgency": urgency,
            "reason": "gpu_reset_required: Xid 48 on GPU 3",
        }
    )


class Pod:
    """A pod in the emulator plus its downward-API file, refreshed like the kubelet does."""

    def __init__(self, store: KubeStore, podinfo: Path) -> None:
        self.store = store
        self.file = podinfo / "annotations"
        store.put_pod(NS, POD, node_name="h100-0000", annotations={OPT_IN_ANNOTATION: "supported"})
        self.sync()

    def annotate(self, **changes: str | None) -> None:
        def apply(obj: dict[str, Any]) -> None:
            annotations = obj["metadata"].setdefault("annotations", {})
            for key, value in changes.items():
                key = {"request": REQUEST_ANNOTATION, "answer": ANSWER_ANNOTATION}[key]
                if value is None:
                    annotations.pop(key, None)
                else:
                    annotations[key] = value

        self.store.mutate(PODS, POD, NS, apply)
        self.sync()

    def sync(self) -> None:
        write_annotations(self.file, self.annotations())

    def annotations(self) -> dict[str, str]:
        return dict(self.store.get(PODS, POD, NS)["metadata"].get("annotations") or {})


@pytest.fixture
def api() -> Iterator[KubeApiServer]:
    store = KubeStore()
    with KubeApiServer(store) as server:
        yield server
    store.close()


@pytest.fixture
def token(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text("eyJhbGciOiJSUzI1NiJ9.service-account\n")
    return path


@pytest.fixture
def pod(api: KubeApiServer, tmp_path: Path) -> Pod:
    return Pod(api.store, tmp_path)


def make_client(api: KubeApiServer, pod: Pod, token: Path, **kube: Any) -> CheckpointClient:
    config = KubeConfig(base_url=api.url, token_path=token, ca_path=None, **kube)
    return CheckpointClient(
        namespace=NS, pod_name=POD, annotations_path=pod.file, kube=config, clock=lambda: NOW
    )


def patches(api: KubeApiServer) -> list[tuple[str, str, int]]:
    return [(r.method, r.path, r.status) for r in api.requests() if r.method == "PATCH"]


def test_a_request_is_saved_for_and_answered_on_the_pod(
    api: KubeApiServer, pod: Pod, token: Path
) -> None:
    client = make_client(api, pod, token)
    saves: list[int] = []
    assert client.checkpoint_if_requested(lambda: saves.append(1) or 1) is None
    assert saves == []

    pod.annotate(request=request_value())
    start = api.store.resource_version
    answer = client.checkpoint_if_requested(lambda: 12800)
    assert answer is not None
    assert json.loads(pod.annotations()[ANSWER_ANNOTATION]) == {
        "version": 1,
        "incident": INCIDENT,
        "step": 12800,
        "saved_at": "2026-12-04T13:04:31Z",
    }
    assert patches(api) == [("PATCH", f"/api/v1/namespaces/{NS}/pods/{POD}", 200)]
    # Watchers (the remediation's watcher) see the answer as a MODIFIED pod.
    events = api.store.watch(PODS, NS, resource_version=start).poll(1.0)
    assert [e["type"] for e in events] == ["MODIFIED"]
    assert ANSWER_ANNOTATION in events[0]["object"]["metadata"]["annotations"]

    # The same request is answered once, even before the kubelet refreshes the file.
    assert client.checkpoint_if_requested(lambda: 99) is None
    assert len(patches(api)) == 1


def test_a_restarted_container_does_not_answer_a_request_its_pod_answered(
    api: KubeApiServer, pod: Pod, token: Path
) -> None:
    pod.annotate(request=request_value())
    assert make_client(api, pod, token).checkpoint_if_requested(lambda: 5) is not None
    pod.sync()  # the kubelet now shows the answer in the file
    assert make_client(api, pod, token).pending() is None

    # A new incident asks again; the old answer does not count for it.
    pod.annotate(request=request_value("gpu-remediation/demo/h100-0000/run-2"))
    fresh = make_client(api, pod, token).pending()
    assert fresh is not None
    assert fresh.incident.endswith("run-2")


def test_a_when_idle_request_waits_for_the_next_regular_checkpoint(
    api: KubeApiServer, pod: Pod, token: Path
) -> None:
    pod.annotate(request=request_value(urgency="when_idle"))
    client = make_client(api, pod, token)
    assert client.checkpoint_if_requested(lambda: 1) is None
    assert patches(api) == []
    answer = client.after_save(4000)
    assert answer is not None
    assert answer.step == 4000
    assert json.loads(pod.annotations()[ANSWER_ANNOTATION])["step"] == 4000


def test_a_withdrawn_request_is_not_answered(api: KubeApiServer, pod: Pod, token: Path) -> None:
    pod.annotate(request=request_value())
    pod.annotate(request=None)
    assert make_client(api, pod, token).after_save(10) is None
    assert patches(api) == []


def test_a_malformed_request_is_logged_once_and_not_answered(
    api: KubeApiServer, pod: Pod, token: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pod.annotate(request='{"version": 1, "incident": 7}')
    client = make_client(api, pod, token)
    with caplog.at_level(logging.WARNING, logger="checkpoint_client"):
        assert client.pending() is None
        assert client.pending() is None
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings == [
        "ignoring a malformed checkpoint request: request.incident: expected a non-empty "
        "string, got 7"
    ]


def test_a_refusal_stops_the_wait(api: KubeApiServer, pod: Pod, token: Path) -> None:
    pod.annotate(request=request_value())
    client = make_client(api, pod, token)
    request = client.pending()
    assert request is not None
    client.refuse(request, "evaluation step in progress")
    answer = json.loads(pod.annotations()[ANSWER_ANNOTATION])
    assert (answer["step"], answer["saved_at"], answer["refused"]) == (
        None,
        None,
        "evaluation step in progress",
    )


def test_an_oversized_answer_fails_before_any_request(
    api: KubeApiServer, pod: Pod, token: Path
) -> None:
    pod.annotate(request=request_value())
    client = make_client(api, pod, token)
    request = client.pending()
    assert request is not None
    with pytest.raises(CheckpointClientError, match="more than the contract's 1024"):
        client.refuse(request, "x" * 2000)
    assert patches(api) == []
    assert client.pending() is not None  # still to be answered


def test_a_forbidden_patch_names_the_missing_role(
    api: KubeApiServer, pod: Pod, token: Path
) -> None:
    pod.annotate(request=request_value())
    api.faults.inject(
        rf"^/api/v1/namespaces/{NS}/pods/{POD}$",
        method="PATCH",
        status=403,
        message=f'pods "{POD}" is forbidden: User "system:serviceaccount:{NS}:default" '
        "cannot patch resource",
    )
    client = make_client(api, pod, token)
    with pytest.raises(CheckpointClientError) as err:
        client.checkpoint_if_requested(lambda: 3)
    text = str(err.value)
    assert f"could not answer checkpoint request {INCIDENT}" in text
    assert "HTTP 403 Forbidden" in text
    assert "cannot patch resource" in text
    assert client.pending() is not None  # not marked answered: the next call retries


def test_a_pod_that_is_gone_gets_not_found(api: KubeApiServer, pod: Pod, token: Path) -> None:
    pod.annotate(request=request_value())
    api.store.delete_object(PODS, POD, NS)
    with pytest.raises(CheckpointClientError, match="HTTP 404 NotFound"):
        make_client(api, pod, token).checkpoint_if_requested(lambda: 3)


def test_transport_trouble_is_reported_with_the_address(
    api: KubeApiServer, pod: Pod, token: Path, tmp_path: Path
) -> None:
    pod.annotate(request=request_value())
    request = make_client(api, pod, token).pending()
    assert request is not None
    # TLS against the emulator's plain HTTP port: the handshake fails.
    tls = KubeConfig(
        base_url=api.url.replace("http:", "https:"), token_path=token, ca_path=None, timeout=2
    )
    client = CheckpointClient(namespace=NS, pod_name=POD, annotations_path=pod.file, kube=tls)
    with pytest.raises(CheckpointClientError, match=f"cannot reach https://127.0.0.1:{api.port}"):
        client.answer(request, step=1)
    bad_ca = KubeConfig(base_url=tls.base_url, token_path=token, ca_path=tmp_path / "no-ca.crt")
    client = CheckpointClient(namespace=NS, pod_name=POD, annotations_path=pod.file, kube=bad_ca)
    with pytest.raises(CheckpointClientError, match="cannot load the CA bundle"):
        client.answer(request, step=1)
    missing = KubeConfig(base_url=api.url, token_path=tmp_path / "no-token")
    client = CheckpointClient(namespace=NS, pod_name=POD, annotations_path=pod.file, kube=missing)
    with pytest.raises(CheckpointClientError, match="cannot read the service account token"):
        client.answer(request, step=1)


def test_without_the_downward_volume_the_error_says_what_to_mount(
    api: KubeApiServer, token: Path, tmp_path: Path
) -> None:
    client = CheckpointClient(
        namespace=NS, pod_name=POD, annotations_path=tmp_path / "missing", kube=None
    )
    with pytest.raises(CheckpointClientError, match=r"mount metadata\.annotations"):
        client.pending()


class _Recorder(BaseHTTPRequestHandler):
    seen: list[dict[str, str]] = []

    def do_PATCH(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).seen.append({**dict(self.headers.items()), "body": body.decode()})
        reply = b'{"kind": "Pod", "metadata": {"name": "p"}}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, format: str, *args: Any) -> None:
        del format, args


def test_the_patch_carries_the_token_and_a_merge_patch_of_annotations_only(
    tmp_path: Path, token: Path
) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        write_annotations(tmp_path / "annotations", {REQUEST_ANNOTATION: request_value()})
        client = CheckpointClient(
            namespace=NS,
            pod_name=POD,
            annotations_path=tmp_path / "annotations",
            kube=KubeConfig(
                base_url=f"http://127.0.0.1:{server.server_address[1]}", token_path=token
            ),
        )
        client.checkpoint_if_requested(lambda: 7)
    finally:
        server.shutdown()
        server.server_close()
    (seen,) = _Recorder.seen
    assert seen["Authorization"] == "Bearer eyJhbGciOiJSUzI1NiJ9.service-account"
    assert seen["Content-Type"] == "application/merge-patch+json"
    body = json.loads(seen["body"])
    assert list(body) == ["metadata"]
    assert list(body["metadata"]) == ["annotations"]
    assert json.loads(body["metadata"]["annotations"][ANSWER_ANNOTATION])["step"] == 7


def test_the_pod_identity_and_address_come_from_the_pods_environment(tmp_path: Path) -> None:
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "namespace").write_text(NS + "\n")
    env = {"KUBERNETES_SERVICE_HOST": "10.100.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    client = CheckpointClient.from_environment(
        {**env, "POD_NAME": POD}, podinfo_dir=tmp_path, service_account_dir=sa
    )
    assert (client.namespace, client.pod_name) == (NS, POD)
    assert client.annotations_path == tmp_path / "annotations"
    (tmp_path / "name").write_text("from-file")
    (tmp_path / "namespace").write_text("ns-file")
    client = CheckpointClient.from_environment(env, podinfo_dir=tmp_path, service_account_dir=sa)
    assert (client.namespace, client.pod_name) == ("ns-file", "from-file")
    config = KubeConfig.in_cluster(
        {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"},
        service_account_dir=tmp_path,
    )
    assert config.base_url == "https://[fd00::1]:443"
    assert (config.token_path, config.ca_path) == (tmp_path / "token", tmp_path / "ca.crt")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(CheckpointClientError, match="POD_NAME and POD_NAMESPACE"):
        CheckpointClient.from_environment({}, podinfo_dir=empty, service_account_dir=empty)
    with pytest.raises(CheckpointClientError, match="KUBERNETES_SERVICE_HOST"):
        CheckpointClient.from_environment(
            {"POD_NAME": "p", "POD_NAMESPACE": "n"}, podinfo_dir=tmp_path
        )


def test_step_times_are_written_on_the_pod_at_most_once_a_minute(
    api: KubeApiServer, pod: Pod, token: Path
) -> None:
    now = [NOW]
    config = KubeConfig(base_url=api.url, token_path=token, ca_path=None)
    client = CheckpointClient(
        namespace=NS, pod_name=POD, annotations_path=pod.file, kube=config, clock=lambda: now[0]
    )
    assert client.report_step_time(1200, 2.41, 100) == StepTime(1200, 2.41, 100)
    assert json.loads(pod.annotations()[STEP_TIME_ANNOTATION]) == {
        "version": 1,
        "step": 1200,
        "seconds": 2.41,
        "steps": 100,
    }
    now[0] += timedelta(seconds=59)
    assert client.report_step_time(1224, 2.5, 24) is None
    now[0] += timedelta(seconds=1)
    assert client.report_step_time(1225, 2.5, 25) is not None
    assert parse_step_time(pod.annotations()[STEP_TIME_ANNOTATION]).step == 1225
    assert len(patches(api)) == 2


@pytest.mark.parametrize(
    ("step", "seconds", "steps", "field"),
    [
        (-1, 1.0, 1, "step"),
        (10, 0.0, 1, "seconds"),
        (10, float("nan"), 1, "seconds"),
        (10, 1.0, 0, "steps"),
        (10, 1.0, 12, "steps"),
    ],
)
def test_a_step_time_that_breaks_the_contract_is_refused_before_any_request(
    api: KubeApiServer, pod: Pod, token: Path, step: int, seconds: float, steps: int, field: str
) -> None:
    client = make_client(api, pod, token)
    with pytest.raises(CheckpointClientError, match=f"step-time.{field}"):
        client.report_step_time(step, seconds, steps)
    assert patches(api) == []
