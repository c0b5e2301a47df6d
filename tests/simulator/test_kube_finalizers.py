"""Deletion with finalizers (NodeClaims, Nodes, Pods) and graceful pod deletion."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from simulator.kube_api import NODECLAIMS, PODS, TERMINATION_FINALIZER, KubeApiServer, KubeStore

GROUP, VERSION, PLURAL = "karpenter.sh", "v1", "nodeclaims"


def claim_body(name: str, finalizers: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {
            "name": name,
            "labels": {"karpenter.sh/nodepool": "gpu"},
            "finalizers": finalizers,
        },
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "x"}
        },
        "status": {"providerID": "ignored on create"},
    }


def test_nodeclaim_with_finalizer_waits_for_its_removal(custom: Any) -> None:
    created = custom.create_cluster_custom_object(
        GROUP, VERSION, PLURAL, claim_body("c1", [TERMINATION_FINALIZER])
    )
    assert "status" not in created  # the status subresource drops it on create
    assert created["metadata"]["generation"] == 1

    deleting = custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, "c1")
    assert deleting["metadata"]["deletionTimestamp"]
    still = custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, "c1")
    assert still["metadata"]["deletionTimestamp"] == deleting["metadata"]["deletionTimestamp"]

    # Deleting again is accepted and changes nothing.
    again = custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, "c1")
    assert again["metadata"]["resourceVersion"] == deleting["metadata"]["resourceVersion"]

    with pytest.raises(ApiException) as err:
        custom.patch_cluster_custom_object(
            GROUP,
            VERSION,
            PLURAL,
            "c1",
            {"metadata": {"finalizers": ["x/new", TERMINATION_FINALIZER]}},
        )
    assert err.value.status == 422  # no new finalizers on a deleting object

    custom.patch_cluster_custom_object(
        GROUP, VERSION, PLURAL, "c1", {"metadata": {"finalizers": None}}
    )
    with pytest.raises(ApiException) as err:
        custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, "c1")
    assert err.value.status == 404


def test_nodeclaim_without_finalizers_is_removed(custom: Any) -> None:
    custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, claim_body("c1", []))
    custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, "c1")
    assert custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"] == []


def test_nodeclaim_list_by_label_and_status_subresource(custom: Any, kube_store: KubeStore) -> None:
    kube_store.put_nodeclaim("a", node_pool="gpu", provider_id="aws:///z/i-1", node_name="n1")
    kube_store.put_nodeclaim("b", node_pool="cpu")
    listing = custom.list_cluster_custom_object(
        GROUP, VERSION, PLURAL, label_selector="karpenter.sh/nodepool=gpu"
    )
    assert [i["metadata"]["name"] for i in listing["items"]] == ["a"]
    assert listing["items"][0]["status"]["providerID"] == "aws:///z/i-1"
    patched = custom.patch_cluster_custom_object_status(
        GROUP, VERSION, PLURAL, "b", {"status": {"nodeName": "n9"}, "spec": {"expireAfter": "1h"}}
    )
    assert patched["status"]["nodeName"] == "n9"
    assert patched["spec"]["expireAfter"] == "720h"
    # Spec changes bump the generation; status changes do not.
    assert patched["metadata"]["generation"] == 1
    bumped = custom.patch_cluster_custom_object(
        GROUP, VERSION, PLURAL, "b", {"spec": {"expireAfter": "1h"}}
    )
    assert bumped["metadata"]["generation"] == 2


def test_python_finalizer_removal_deletes(kube_store: KubeStore) -> None:
    kube_store.put_nodeclaim("c1", node_pool="gpu")
    obj, gone = kube_store.delete_object(NODECLAIMS, "c1")
    assert not gone
    assert obj["metadata"]["deletionTimestamp"]
    assert kube_store.remove_finalizers(NODECLAIMS, "c1") is None
    assert not kube_store.exists(NODECLAIMS, "c1")


def test_node_and_pod_finalizers(core: Any, kube_store: KubeStore) -> None:
    kube_store.put_node("n1")
    core.patch_node("n1", {"metadata": {"finalizers": ["example.com/hold"]}})
    core.delete_node("n1")
    assert core.read_node("n1").metadata.deletion_timestamp is not None
    core.patch_node(
        "n1", {"metadata": {"$deleteFromPrimitiveList/finalizers": ["example.com/hold"]}}
    )
    assert core.list_node().items == []

    kube_store.put_pod("ns", "p1", node_name="n1", finalizers=["example.com/hold"])
    deleted = core.delete_namespaced_pod("p1", "ns")
    assert deleted.metadata.deletion_timestamp is not None
    kube_store.remove_finalizers(PODS, "p1", "ns")
    assert core.list_namespaced_pod("ns").items == []


def test_graceful_pod_deletion_when_enabled() -> None:
    store = KubeStore(pod_grace_scale=0.01)  # 30 s of grace last 0.3 s
    with KubeApiServer(store) as api, api.api_client() as client_:
        from kubernetes import client

        core = client.CoreV1Api(client_)
        store.put_pod("ns", "p1", node_name="n1")
        store.put_pod("ns", "unscheduled", phase="Pending", ready=False)
        deleted = core.delete_namespaced_pod("p1", "ns")
        assert deleted.metadata.deletion_timestamp is not None
        assert deleted.metadata.deletion_grace_period_seconds == 30
        core.delete_namespaced_pod("unscheduled", "ns")
        assert [p.metadata.name for p in core.list_namespaced_pod("ns").items] == ["p1"]
        deadline = time.monotonic() + 5
        while store.exists(PODS, "p1", "ns") and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not store.exists(PODS, "p1", "ns")
    store.close()
