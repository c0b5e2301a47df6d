"""The pods/log subresource and container termination, through the official client."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from simulator.kube_api import KubeStore
from tests.simulator.kube_helpers import pod_body, status_of


def read_log(core: Any, name: str, **options: Any) -> str:
    """The log as the server sent it.

    Unparsed, because the client's deserializer turns a preloaded ``str`` body into
    the repr of its bytes (``"b'...'"``), and a JSON-looking one into a Python object.
    """
    raw = core.read_namespaced_pod_log(name, "ops", _preload_content=False, **options)
    text: str = raw.data.decode()
    return text


def running_pod(store: KubeStore, name: str = "p1", *, ns: str = "ops") -> None:
    store.put_pod(ns, name, node_name="n1", phase="Pending", ready=False)
    store.set_container_running(ns, name)


def test_log_is_read_as_plain_text(core: Any, kube_store: KubeStore) -> None:
    running_pod(kube_store)
    # JSON-looking text stays text when read unparsed (the client would json.loads it).
    kube_store.set_pod_log("ops", "p1", 'line 1\n{"a": 1}\n')
    raw = core.read_namespaced_pod_log("p1", "ops", _preload_content=False)
    assert raw.headers["Content-Type"] == "text/plain"
    assert raw.data.decode() == 'line 1\n{"a": 1}\n'
    assert read_log(core, "p1", container="main") == 'line 1\n{"a": 1}\n'


def test_tail_lines_and_limit_bytes(core: Any, kube_store: KubeStore) -> None:
    running_pod(kube_store)
    kube_store.set_pod_log("ops", "p1", "one\ntwo\nthree\n")
    assert read_log(core, "p1", tail_lines=2) == "two\nthree\n"
    assert read_log(core, "p1", tail_lines=9) == "one\ntwo\nthree\n"
    assert read_log(core, "p1", tail_lines=0) == ""
    assert read_log(core, "p1", limit_bytes=5) == "one\nt"
    kube_store.set_pod_log("ops", "p1", "no newline\nat end")
    assert read_log(core, "p1", tail_lines=1) == "at end"
    with pytest.raises(ApiException) as err:
        read_log(core, "p1", limit_bytes=0)
    assert err.value.status == 422


def test_a_started_pod_without_a_log_reads_empty(core: Any, kube_store: KubeStore) -> None:
    # Seeded pods carry no container statuses; a Running phase means they started.
    kube_store.put_pod("ops", "seeded", node_name="n1")
    raw = core.read_namespaced_pod_log("seeded", "ops", _preload_content=False)
    assert raw.data == b""


@pytest.mark.parametrize(
    ("setup", "code", "message"),
    [
        ("missing", 404, 'pods "p1" not found'),
        ("pending", 400, 'container "main" in pod "p1" is waiting to start: ContainerCreating'),
        ("unscheduled", 400, "pod p1 does not have a host assigned"),
        ("unknown-container", 400, "container nope is not valid for pod p1"),
    ],
)
def test_log_errors(core: Any, kube_store: KubeStore, setup: str, code: int, message: str) -> None:
    container = None
    if setup == "pending":
        core.create_namespaced_pod("ops", pod_body("p1", node="n1"))  # status reset to Pending
    elif setup == "unscheduled":
        kube_store.put_pod("ops", "p1")
    elif setup == "unknown-container":
        running_pod(kube_store)
        container = "nope"
    options = {"container": container} if container else {}
    with pytest.raises(ApiException) as err:
        read_log(core, "p1", **options)
    assert err.value.status == code
    assert status_of(err.value)["message"] == message


def test_several_containers_need_a_name(core: Any, kube_store: KubeStore) -> None:
    body = pod_body("multi", node="n1")
    body["spec"]["containers"].append({"name": "side", "image": "busybox"})
    core.create_namespaced_pod("ops", body)
    kube_store.set_container_running("ops", "multi", container="main")
    kube_store.set_container_running("ops", "multi", container="side")
    kube_store.set_pod_log("ops", "multi", "from side", container="side")
    with pytest.raises(ApiException) as err:
        read_log(core, "multi")
    assert status_of(err.value)["message"] == (
        "a container name must be specified for pod multi, choose one of: [main side]"
    )
    assert read_log(core, "multi", container="side") == "from side"
    pod = core.read_namespaced_pod("multi", "ops")
    assert pod.status.phase == "Running"
    assert [c.ready for c in pod.status.container_statuses] == [True, True]


def test_unemulated_options_are_refused(core: Any, kube_store: KubeStore) -> None:
    running_pod(kube_store)
    for option in ({"follow": True}, {"previous": True}, {"since_seconds": 5}):
        with pytest.raises(ApiException) as err:
            core.read_namespaced_pod_log("p1", "ops", **option)
        assert err.value.status == 400


@pytest.mark.parametrize(
    ("exit_code", "phase", "reason"), [(0, "Succeeded", "Completed"), (3, "Failed", "Error")]
)
def test_terminated_container_state(
    core: Any, kube_store: KubeStore, exit_code: int, phase: str, reason: str
) -> None:
    running_pod(kube_store)
    kube_store.terminate_container("ops", "p1", exit_code, message="bye", log="out\n")
    pod = core.read_namespaced_pod("p1", "ops")
    assert pod.status.phase == phase
    (status,) = pod.status.container_statuses
    assert status.state.running is None
    term = status.state.terminated
    assert (term.exit_code, term.reason, term.message) == (exit_code, reason, "bye")
    assert term.finished_at is not None
    assert term.started_at <= term.finished_at
    assert not any(c.status == "True" for c in pod.status.conditions if c.type == "Ready")
    # A terminated container's log stays readable.
    assert read_log(core, "p1") == "out\n"


def test_fallback_to_logs_on_error_fills_the_message(core: Any, kube_store: KubeStore) -> None:
    body = pod_body("p1", node="n1")
    body["spec"]["containers"][0]["terminationMessagePolicy"] = "FallbackToLogsOnError"
    core.create_namespaced_pod("ops", body)
    lines = "".join(f"line {n}\n" for n in range(100))
    kube_store.terminate_container("ops", "p1", 1, log=lines, reason="OOMKilled")
    term = core.read_namespaced_pod("p1", "ops").status.container_statuses[0].state.terminated
    assert term.reason == "OOMKilled"
    assert term.message == "".join(f"line {n}\n" for n in range(20, 100))


def test_the_log_goes_with_the_pod(core: Any, kube_store: KubeStore) -> None:
    running_pod(kube_store)
    kube_store.set_pod_log("ops", "p1", "old pod")
    core.delete_namespaced_pod("p1", "ops")
    running_pod(kube_store)
    assert core.read_namespaced_pod_log("p1", "ops", _preload_content=False).data == b""


def test_discovery_lists_the_log_subresource(api_client: Any) -> None:
    resources = client.CoreV1Api(api_client).get_api_resources().resources
    (log,) = [r for r in resources if r.name == "pods/log"]
    assert log.verbs == ["get"]
    assert log.namespaced


def test_job_pods_carry_the_job_name_labels(batch: Any, core: Any, kube_store: KubeStore) -> None:
    batch.create_namespaced_job(
        "ops",
        {
            "metadata": {"name": "reset"},
            "spec": {
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "c", "image": "busybox"}],
                    }
                }
            },
        },
    )
    pod = kube_store.add_job_pod("ops", "reset", node_name="n1")
    labels = pod["metadata"]["labels"]
    assert labels["job-name"] == labels["batch.kubernetes.io/job-name"] == "reset"
    found = core.list_namespaced_pod("ops", label_selector="job-name=reset").items
    assert [p.metadata.name for p in found] == [pod["metadata"]["name"]]
