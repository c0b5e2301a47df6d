"""Watches through ``kubernetes.watch.Watch``: order, resume, bookmarks, selectors, 410."""

from __future__ import annotations

import json
import queue
import threading
import time
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from simulator.kube_api import NODECLAIMS, NODES, KubeApiServer, KubeStore


def test_replay_from_resource_version_in_order(core: Any, kube_store: KubeStore) -> None:
    rv = core.list_node().metadata.resource_version
    core.create_node({"metadata": {"name": "n1"}})
    core.patch_node("n1", {"spec": {"unschedulable": True}})
    core.delete_node("n1")
    w = watch.Watch()
    seen = []
    for event in w.stream(core.list_node, resource_version=rv, timeout_seconds=2):
        seen.append(
            (event["type"], event["object"].metadata.name, event["object"].spec.unschedulable)
        )
        if event["type"] == "DELETED":
            w.stop()
    assert seen == [("ADDED", "n1", None), ("MODIFIED", "n1", True), ("DELETED", "n1", True)]
    versions = [int(v) for v in [w.resource_version]]
    assert versions[0] > int(rv)


def test_live_events_while_other_requests_proceed(kube_api: KubeApiServer, core: Any) -> None:
    kube_api.store.put_node("n1")
    rv = core.list_node().metadata.resource_version
    events: queue.Queue[tuple[str, str]] = queue.Queue()

    def follow() -> None:
        with kube_api.api_client() as api:
            w = watch.Watch()
            for ev in w.stream(
                client.CoreV1Api(api).list_node, resource_version=rv, timeout_seconds=5
            ):
                events.put((ev["type"], ev["object"].metadata.name))
                if ev["type"] == "DELETED":
                    w.stop()

    t = threading.Thread(target=follow)
    t.start()
    core.patch_node("n1", {"metadata": {"labels": {"a": "b"}}})  # served while watching
    kube_api.store.set_node_ready("n1", False)
    core.delete_node("n1")
    t.join(timeout=5)
    assert not t.is_alive()
    got = [events.get_nowait() for _ in range(events.qsize())]
    assert got == [("MODIFIED", "n1"), ("MODIFIED", "n1"), ("DELETED", "n1")]


def test_watch_without_resource_version_starts_with_current_state(
    core: Any, kube_store: KubeStore
) -> None:
    kube_store.put_node("a")
    kube_store.put_node("b")
    w = watch.Watch()
    names = []
    for ev in w.stream(core.list_node, timeout_seconds=1):
        names.append((ev["type"], ev["object"].metadata.name))
        if len(names) == 2:
            w.stop()
    assert names == [("ADDED", "a"), ("ADDED", "b")]


def test_resume_from_last_seen_resource_version(core: Any, kube_store: KubeStore) -> None:
    start = kube_store.resource_version
    for name in ("a", "b", "c"):
        kube_store.put_node(name)
    w = watch.Watch()
    first = next(iter(w.stream(core.list_node, resource_version=start, timeout_seconds=1)))
    w.stop()
    resume_at = first["object"].metadata.resource_version
    rest = [
        ev["object"].metadata.name
        for ev in watch.Watch().stream(
            core.list_node, resource_version=resume_at, timeout_seconds=0.5
        )
    ]
    assert first["object"].metadata.name == "a"
    assert rest == ["b", "c"]


def test_bookmarks_arrive_and_carry_the_resource_version(core: Any, kube_store: KubeStore) -> None:
    kube_store.put_node("n1")
    w = watch.Watch()
    types = []
    for ev in w.stream(core.list_node, allow_watch_bookmarks=True, timeout_seconds=3):
        types.append(ev["type"])
        if ev["type"] == "BOOKMARK":
            assert ev["raw_object"]["metadata"]["resourceVersion"] == kube_store.resource_version
            w.stop()
    assert types == ["ADDED", "BOOKMARK"]
    assert w.resource_version == kube_store.resource_version


def test_selectors_turn_transitions_into_added_and_deleted(
    core: Any, kube_store: KubeStore
) -> None:
    kube_store.put_node("n1")
    rv = kube_store.resource_version
    core.patch_node("n1", {"metadata": {"labels": {"state": "quarantined"}}})
    core.patch_node("n1", {"spec": {"unschedulable": True}})
    core.patch_node("n1", {"metadata": {"labels": {"state": None}}})
    kube_store.put_node("other")
    got = [
        ev["type"]
        for ev in watch.Watch().stream(
            core.list_node,
            resource_version=rv,
            label_selector="state=quarantined",
            timeout_seconds=0.5,
        )
    ]
    assert got == ["ADDED", "MODIFIED", "DELETED"]


def test_pod_watch_by_node_field_selector(core: Any, kube_store: KubeStore) -> None:
    rv = kube_store.resource_version
    kube_store.put_pod("ns", "on-n1", node_name="n1")
    kube_store.put_pod("ns", "on-n2", node_name="n2")
    got = [
        ev["object"].metadata.name
        for ev in watch.Watch().stream(
            core.list_pod_for_all_namespaces,
            resource_version=rv,
            field_selector="spec.nodeName=n1",
            timeout_seconds=0.5,
        )
    ]
    assert got == ["on-n1"]


@pytest.fixture
def expired_rv(kube_store: KubeStore) -> str:
    """A resourceVersion that fell out of a three-change window."""
    kube_store.set_history_size(3)
    old = kube_store.resource_version
    for i in range(5):
        kube_store.put_node(f"n{i}")
    return old


def test_too_old_resource_version_raises_410_with_timeout(
    core: Any, expired_rv: str, kube_api: KubeApiServer
) -> None:
    with pytest.raises(ApiException) as err:
        list(watch.Watch().stream(core.list_node, resource_version=expired_rv, timeout_seconds=1))
    assert err.value.status == 410
    assert err.value.reason.startswith("Expired: too old resource version")
    watches = [r for r in kube_api.requests() if "watch=" in r.query]
    assert len(watches) == 1  # with timeout_seconds the client does not retry


def test_too_old_resource_version_retried_once_then_410(
    core: Any, expired_rv: str, kube_api: KubeApiServer
) -> None:
    with pytest.raises(ApiException) as err:
        list(watch.Watch().stream(core.list_node, resource_version=expired_rv))
    assert err.value.status == 410
    watches = [r for r in kube_api.requests() if "watch=" in r.query]
    assert len(watches) == 2  # Watch.stream retries a 410 once from the same version


def test_410_is_an_error_event_in_a_200_stream(api_client: Any, expired_rv: str) -> None:
    resp = api_client.call_api(
        "/api/v1/nodes",
        "GET",
        query_params=[("watch", "true"), ("resourceVersion", expired_rv)],
        _preload_content=False,
    )
    assert resp.status == 200
    lines = resp.data.decode().splitlines()
    assert len(lines) == 1
    event = json.loads(lines[0])
    assert event["type"] == "ERROR"
    assert event["object"]["code"] == 410
    assert event["object"]["reason"] == "Expired"
    assert event["object"]["kind"] == "Status"


def test_watch_falling_behind_the_window_gets_410(core: Any, kube_store: KubeStore) -> None:
    kube_store.set_history_size(2)
    rv = kube_store.resource_version
    kube_store.put_node("n1")
    w = watch.Watch()
    stream = w.stream(core.list_node, resource_version=rv, timeout_seconds=2)
    assert next(stream)["type"] == "ADDED"
    for i in range(5):  # more changes than the window while the client is not reading
        kube_store.set_node_boot_id("n1", f"boot-{i}")
    kube_store.compact()
    with pytest.raises(ApiException) as err:
        for _ in stream:
            pass
    assert err.value.status == 410


def test_stopping_the_server_ends_open_watches_cleanly() -> None:
    baseline = {t.ident for t in threading.enumerate()}
    store = KubeStore()
    api = KubeApiServer(store).start()
    received: list[str] = []
    first_event = threading.Event()

    def follow() -> None:
        with api.api_client() as c:
            for ev in watch.Watch().stream(
                client.CoreV1Api(c).list_node, resource_version="0", timeout_seconds=60
            ):
                received.append(ev["type"])
                first_event.set()

    store.put_node("n1")
    t = threading.Thread(target=follow)
    t.start()
    assert first_event.wait(5)
    started = time.monotonic()
    api.stop()
    assert time.monotonic() - started < 1
    t.join(5)
    assert not t.is_alive()
    assert received == ["ADDED"]  # the stream ended normally, without an exception
    leftover = [t for t in threading.enumerate() if t.ident not in baseline and t.is_alive()]
    assert leftover == []
    store.close()


def test_nodeclaim_watch_through_custom_objects_api(custom: Any, kube_store: KubeStore) -> None:
    rv = kube_store.resource_version
    kube_store.put_nodeclaim("c1", node_pool="gpu")
    custom.delete_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", "c1")
    kube_store.remove_finalizers(NODECLAIMS, "c1")
    got = [
        (ev["type"], bool(ev["object"]["metadata"].get("deletionTimestamp")))
        for ev in watch.Watch().stream(
            custom.list_cluster_custom_object,
            "karpenter.sh",
            "v1",
            "nodeclaims",
            resource_version=rv,
            timeout_seconds=0.5,
        )
    ]
    assert got == [("ADDED", False), ("MODIFIED", True), ("DELETED", True)]


def test_pdb_status_changes_are_watch_events(policy: Any, kube_store: KubeStore) -> None:
    kube_store.put_pod("ns", "p1", node_name="n1", labels={"app": "a"}, ready=False)
    kube_store.put_pdb("ns", "pdb", match_labels={"app": "a"}, max_unavailable=0)
    rv = kube_store.resource_version
    kube_store.set_pod_ready("ns", "p1")
    got = [
        (ev["type"], ev["object"].status.current_healthy)
        for ev in watch.Watch().stream(
            policy.list_namespaced_pod_disruption_budget,
            "ns",
            resource_version=rv,
            timeout_seconds=0.5,
        )
    ]
    assert got == [("MODIFIED", 1)]


def test_python_side_watch(kube_store: KubeStore) -> None:
    watcher = kube_store.watch(NODES, resource_version=kube_store.resource_version)
    kube_store.put_node("n1")
    events = watcher.poll(1.0)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "n1")]
    assert watcher.poll(0.05) == []


def test_fault_on_watch_requests_only(core: Any, kube_api: KubeApiServer) -> None:
    kube_api.faults.inject(r"^/api/v1/nodes$", query="watch=", status=503, times=1)
    core.list_node()
    with pytest.raises(ApiException) as err:
        list(watch.Watch().stream(core.list_node, timeout_seconds=0.2))
    assert err.value.status == 503
