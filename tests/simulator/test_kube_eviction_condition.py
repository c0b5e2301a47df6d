"""An eviction marks the pod with DisruptionTarget before removing it, as the API server does."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from simulator.kube_api import PODS, KubeApiServer, KubeStore

NS = "ml"


def evict(core: Any, name: str, *, uid: str | None = None, rv: str | None = None) -> Any:
    options = client.V1DeleteOptions(
        preconditions=client.V1Preconditions(uid=uid, resource_version=rv)
    )
    body = client.V1Eviction(
        metadata=client.V1ObjectMeta(name=name, namespace=NS), delete_options=options
    )
    return core.create_namespaced_pod_eviction(name, NS, body)


def disruption_target(pod: Any) -> Any:
    """The pod's DisruptionTarget condition (official client model), or None."""
    return next(
        (c for c in pod.status.conditions or [] if c.type == "DisruptionTarget"),
        None,
    )


@pytest.fixture
def graceful() -> Iterator[tuple[KubeStore, Any]]:
    """An emulator whose scheduled pods stay terminating for their grace period (x 100 s)."""
    store = KubeStore(pod_grace_scale=100.0)
    with KubeApiServer(store) as server, server.api_client() as api:
        yield store, client.CoreV1Api(api)
    store.close()


def test_an_evicted_pod_gets_disruption_target_before_it_is_deleted(
    core: Any, kube_store: KubeStore
) -> None:
    pod = kube_store.put_pod(NS, "trainer-0", node_name="n1", gpus=8)
    start = pod["metadata"]["resourceVersion"]
    evict(core, "trainer-0", uid=pod["metadata"]["uid"])

    events = [
        (ev["type"], ev["object"])
        for ev in watch.Watch().stream(
            core.list_namespaced_pod, NS, resource_version=start, timeout_seconds=1
        )
    ]
    assert [kind for kind, _ in events] == ["MODIFIED", "DELETED"]
    for _, obj in events:
        condition = disruption_target(obj)
        assert condition is not None
        assert (condition.status, condition.reason, condition.message) == (
            "True",
            "EvictionByEvictionAPI",
            "Eviction API: evicting",
        )
        assert condition.last_transition_time is not None
    assert not kube_store.exists(PODS, "trainer-0", NS)


def test_a_terminating_evicted_pod_shows_the_condition_and_keeps_its_transition_time(
    graceful: tuple[KubeStore, Any],
) -> None:
    store, core = graceful
    store.put_pod(NS, "trainer-0", node_name="n1")
    evict(core, "trainer-0")
    first = core.read_namespaced_pod("trainer-0", NS)
    assert first.metadata.deletion_timestamp is not None
    condition = disruption_target(first)
    assert condition is not None
    assert condition.reason == "EvictionByEvictionAPI"
    # Ready and the other conditions stay as the kubelet wrote them.
    assert {c.type for c in first.status.conditions} == {
        "Ready",
        "ContainersReady",
        "DisruptionTarget",
    }

    # A terminating pod evicts freely (canIgnorePDB); the condition is not written twice.
    evict(core, "trainer-0")
    again = core.read_namespaced_pod("trainer-0", NS)
    assert again.metadata.resource_version == first.metadata.resource_version
    assert disruption_target(again).last_transition_time == condition.last_transition_time


def test_a_blocked_eviction_leaves_the_pod_unmarked(core: Any, kube_store: KubeStore) -> None:
    kube_store.put_pod(NS, "trainer-0", node_name="n1", labels={"app": "t"})
    kube_store.put_pdb(NS, "pdb", match_labels={"app": "t"}, max_unavailable=0)
    with pytest.raises(ApiException) as err:
        evict(core, "trainer-0")
    assert err.value.status == 429
    assert disruption_target(core.read_namespaced_pod("trainer-0", NS)) is None


def test_a_failed_precondition_leaves_the_pod_unmarked(core: Any, kube_store: KubeStore) -> None:
    pod = kube_store.put_pod(NS, "trainer-0", node_name="n1")
    for kwargs in ({"uid": "someone-else"}, {"rv": "1"}):
        with pytest.raises(ApiException) as err:
            evict(core, "trainer-0", **kwargs)
        assert err.value.status == 409
        assert "Precondition failed" in err.value.body
    after = core.read_namespaced_pod("trainer-0", NS)
    assert after.metadata.resource_version == pod["metadata"]["resourceVersion"]
    assert disruption_target(after) is None


def test_a_resource_version_precondition_follows_the_condition_write(
    core: Any, kube_store: KubeStore
) -> None:
    pod = kube_store.put_pod(NS, "trainer-0", node_name="n1")
    meta = pod["metadata"]
    evict(core, "trainer-0", uid=meta["uid"], rv=meta["resourceVersion"])
    assert not kube_store.exists(PODS, "trainer-0", NS)
