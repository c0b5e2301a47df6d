"""PATCH flavours: strategic merge (merge keys, directives), JSON merge, JSON patch."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from simulator.kube_api import KubeStore
from simulator.kube_api.patching import json_patch, merge_patch, strategic_merge_patch
from simulator.kube_api.resources import NODES


def test_node_conditions_merge_by_type(core: Any, kube_store: KubeStore) -> None:
    kube_store.put_node("n1", ready=True)
    patched = core.patch_node_status(
        "n1",
        {"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "Xid"}]}},
    )
    types = [c.type for c in patched.status.conditions]
    assert types == ["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"]
    ready = patched.status.conditions[-1]
    assert (ready.status, ready.reason) == ("False", "Xid")
    # Fields of the merged element not named by the patch are kept.
    assert ready.message == "kubelet is posting ready status"


def test_taints_are_replaced_not_merged(core: Any, kube_store: KubeStore) -> None:
    kube_store.put_node("n1", taints=[{"key": "a", "effect": "NoSchedule"}])
    patched = core.patch_node(
        "n1", {"spec": {"taints": [{"key": "b", "value": "x", "effect": "NoSchedule"}]}}
    )
    assert [t.key for t in patched.spec.taints] == ["b"]


def test_finalizers_union_and_delete_from_primitive_list(core: Any, kube_store: KubeStore) -> None:
    kube_store.put_node("n1")
    core.patch_node("n1", {"metadata": {"finalizers": ["a/x"]}})
    node = core.patch_node("n1", {"metadata": {"finalizers": ["b/y"]}})
    assert node.metadata.finalizers == ["a/x", "b/y"]
    node = core.patch_node("n1", {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a/x"]}})
    assert node.metadata.finalizers == ["b/y"]


def test_merge_patch_replaces_lists_and_null_deletes(core: Any, kube_store: KubeStore) -> None:
    kube_store.put_node("n1", labels={"drop": "me"})
    patched = core.patch_node(
        "n1",
        {"metadata": {"labels": {"drop": None, "keep": "1"}}},
        _content_type="application/merge-patch+json",
    )
    assert "drop" not in patched.metadata.labels
    assert patched.metadata.labels["keep"] == "1"
    patched = core.patch_node_status(
        "n1",
        {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
        _content_type="application/merge-patch+json",
    )
    assert [c.type for c in patched.status.conditions] == ["Ready"]


def test_json_patch_and_failed_test_is_422(core: Any, kube_store: KubeStore) -> None:
    kube_store.put_node("n1")
    patched = core.patch_node(
        "n1",
        [
            {"op": "add", "path": "/metadata/annotations/gpu~1state", "value": "quarantined"},
            {"op": "add", "path": "/spec/taints", "value": [{"key": "q", "effect": "NoSchedule"}]},
        ],
    )
    assert patched.metadata.annotations["gpu/state"] == "quarantined"
    assert patched.spec.taints[0].key == "q"
    with pytest.raises(ApiException) as err:
        core.patch_node("n1", [{"op": "test", "path": "/spec/taints/0/key", "value": "other"}])
    assert err.value.status == 422


def test_custom_resources_refuse_strategic_merge(api_client: Any, kube_store: KubeStore) -> None:
    kube_store.put_nodeclaim("c1", node_pool="gpu")
    with pytest.raises(ApiException) as err:
        api_client.call_api(
            "/apis/karpenter.sh/v1/nodeclaims/c1",
            "PATCH",
            body={"metadata": {"labels": {"a": "b"}}},
            header_params={"Content-Type": "application/strategic-merge-patch+json"},
            _preload_content=False,
        )
    assert err.value.status == 415


def test_strategic_merge_directives() -> None:
    keys = NODES.merge_keys
    assert keys is not None
    original = {
        "status": {
            "conditions": [{"type": "A", "status": "True"}, {"type": "B", "status": "True"}],
            "addresses": [{"type": "InternalIP", "address": "1"}],
        }
    }
    result = strategic_merge_patch(
        original,
        {
            "status": {
                "conditions": [{"type": "A", "$patch": "delete"}, {"type": "C", "status": "x"}],
                "addresses": [{"$patch": "replace"}, {"type": "Hostname", "address": "h"}],
            }
        },
        keys,
    )
    assert result["status"]["conditions"] == [
        {"type": "B", "status": "True"},
        {"type": "C", "status": "x"},
    ]
    assert result["status"]["addresses"] == [{"type": "Hostname", "address": "h"}]
    replaced = strategic_merge_patch(original, {"status": {"$patch": "replace"}}, keys)
    assert replaced["status"] == {}
    retained = strategic_merge_patch(
        {"spec": {"a": 1, "b": 2}}, {"spec": {"$retainKeys": ["a", "c"], "c": 3}}, keys
    )
    assert retained["spec"] == {"a": 1, "c": 3}


def test_merge_and_json_patch_units() -> None:
    assert merge_patch({"a": {"b": 1, "c": 2}}, {"a": {"b": None, "d": [1]}}) == {
        "a": {"c": 2, "d": [1]}
    }
    doc = {"a": [1, 2], "b": {"c": 1}}
    out = json_patch(
        doc,
        [
            {"op": "add", "path": "/a/-", "value": 3},
            {"op": "move", "from": "/b/c", "path": "/d"},
            {"op": "copy", "from": "/d", "path": "/e"},
            {"op": "replace", "path": "/a/0", "value": 0},
            {"op": "remove", "path": "/a/1"},
        ],
    )
    assert out == {"a": [0, 3], "b": {}, "d": 1, "e": 1}
    assert doc == {"a": [1, 2], "b": {"c": 1}}


def test_server_side_apply_is_unsupported(core: Any, kube_store: KubeStore) -> None:
    kube_store.put_node("n1")
    with pytest.raises(ApiException) as err:
        core.patch_node(
            "n1",
            "metadata:\n  labels:\n    a: b\n",
            field_manager="test",
            _content_type="application/apply-patch+yaml",
        )
    assert err.value.status == 415
