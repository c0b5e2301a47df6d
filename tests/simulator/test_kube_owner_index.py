"""Cascading deletion finds dependents by owner uid, however and whenever they got it."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from simulator.kube_api import JOBS, PODS, KubeStore
from simulator.kube_api.owners import OwnerIndex

OWNER_KIND = "Job"


def _job(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "ops"},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox"}],
                }
            }
        },
    }


def _owner_ref(name: str, uid: str) -> list[dict[str, Any]]:
    return [{"apiVersion": "batch/v1", "kind": OWNER_KIND, "name": name, "uid": uid}]


def test_a_pod_given_an_owner_later_goes_with_it(
    batch: Any, core: Any, kube_store: KubeStore
) -> None:
    uid = batch.create_namespaced_job("ops", _job("j1")).metadata.uid
    kube_store.put_pod("ops", "adopted", node_name="n1")
    kube_store.put_pod("ops", "bystander", node_name="n1")
    core.patch_namespaced_pod(
        "adopted", "ops", {"metadata": {"ownerReferences": _owner_ref("j1", uid)}}
    )

    batch.delete_namespaced_job("j1", "ops", propagation_policy="Background")

    assert [p.metadata.name for p in core.list_namespaced_pod("ops").items] == ["bystander"]


def test_a_pod_whose_owner_reference_was_dropped_stays(
    batch: Any, core: Any, kube_store: KubeStore
) -> None:
    uid = batch.create_namespaced_job("ops", _job("j2")).metadata.uid
    kube_store.put_pod("ops", "freed", node_name="n1")
    core.patch_namespaced_pod(
        "freed", "ops", {"metadata": {"ownerReferences": _owner_ref("j2", uid)}}
    )

    def drop_owner(pod: dict[str, Any]) -> None:
        pod["metadata"]["ownerReferences"] = []

    kube_store.mutate(PODS, "freed", "ops", drop_owner)

    batch.delete_namespaced_job("j2", "ops", propagation_policy="Background")

    assert [p.metadata.name for p in core.list_namespaced_pod("ops").items] == ["freed"]
    with pytest.raises(ApiException) as gone:
        batch.read_namespaced_job("j2", "ops")
    assert gone.value.status == 404
    assert kube_store.dependents(uid) == []
    assert not kube_store.exists(JOBS, "j2", "ops")
    assert kube_store.exists(PODS, "freed", "ops")


def test_the_index_follows_writes_and_deletions() -> None:
    index = OwnerIndex()
    key = ("ops", "p")
    owned = {"metadata": {"ownerReferences": [{"uid": "a"}, {"uid": "b"}]}}
    index.update("pods", key, None, owned)
    assert index.owned("a") == index.owned("b") == [("pods", key)]
    index.update("pods", key, owned, {"metadata": {"ownerReferences": [{"uid": "b"}]}})
    assert index.owned("a") == []
    assert index.owned("b") == [("pods", key)]
    index.update("pods", key, {"metadata": {"ownerReferences": [{"uid": "b"}]}}, None)
    assert index.owned("b") == []
