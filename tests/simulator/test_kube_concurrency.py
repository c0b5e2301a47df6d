"""Optimistic concurrency: stale resourceVersions get 409 Conflict; retries lose nothing."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from simulator.kube_api import NODES, KubeApiServer, KubeStore

from .kube_helpers import status_of


def test_replace_with_stale_resource_version_conflicts(core: Any, kube_store: KubeStore) -> None:
    kube_store.put_node("n1")
    stale = core.read_node("n1")
    core.patch_node("n1", {"metadata": {"labels": {"other": "writer"}}})
    stale.spec.unschedulable = True
    with pytest.raises(ApiException) as err:
        core.replace_node("n1", stale)
    assert err.value.status == 409
    body = status_of(err.value)
    assert body["reason"] == "Conflict"
    assert body["message"] == (
        'Operation cannot be fulfilled on nodes "n1": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )
    assert body["details"] == {"name": "n1", "kind": "nodes"}


def test_patch_carrying_stale_resource_version_conflicts(core: Any, kube_store: KubeStore) -> None:
    kube_store.put_node("n1")
    rv = core.read_node("n1").metadata.resource_version
    kube_store.set_node_ready("n1", False)  # another writer (the kubelet) moves it on
    with pytest.raises(ApiException) as err:
        core.patch_node(
            "n1", {"metadata": {"resourceVersion": rv}, "spec": {"unschedulable": True}}
        )
    assert err.value.status == 409
    fresh = core.read_node("n1").metadata.resource_version
    patched = core.patch_node(
        "n1", {"metadata": {"resourceVersion": fresh}, "spec": {"unschedulable": True}}
    )
    assert patched.spec.unschedulable is True


def test_custom_objects_require_resource_version_on_replace(
    custom: Any, kube_store: KubeStore
) -> None:
    kube_store.put_nodeclaim("c1", node_pool="gpu")
    body = custom.get_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", "c1")
    del body["metadata"]["resourceVersion"]
    with pytest.raises(ApiException) as err:
        custom.replace_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", "c1", body)
    assert err.value.status == 422


def test_concurrent_writers_with_retries_lose_no_update(kube_api: KubeApiServer) -> None:
    kube_api.store.put_node("n1")
    writers, per_writer = 4, 10
    conflicts = []

    def writer(index: int) -> None:
        with kube_api.api_client() as api:
            core = client.CoreV1Api(api)
            for n in range(per_writer):
                while True:
                    node = core.read_node("n1")
                    taints = list(node.spec.taints or [])
                    taints.append(client.V1Taint(key=f"w{index}-{n}", effect="NoSchedule"))
                    node.spec.taints = taints
                    try:
                        core.replace_node("n1", node)
                        break
                    except ApiException as exc:
                        if exc.status != 409:
                            raise
                        conflicts.append(exc.status)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    taints = kube_api.store.get(NODES, "n1")["spec"]["taints"]
    assert sorted(t["key"] for t in taints) == sorted(
        f"w{i}-{n}" for i in range(writers) for n in range(per_writer)
    )
    assert conflicts, "the writers never raced; the test proves nothing"
