"""Node CRUD, Status error bodies, and status subresource separation."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from simulator.kube_api import KubeStore

from .kube_helpers import status_of


def node_body(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"pool": "gpu"}},
        "spec": {"providerID": f"aws:///us-west-2a/i-{name}"},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def test_create_get_list_delete(core: Any) -> None:
    created = core.create_node(node_body("n1"))
    assert created.metadata.uid
    assert created.metadata.creation_timestamp is not None
    assert int(created.metadata.resource_version) > 0
    # Nodes keep the status given at creation, like the real registry.
    assert created.status.conditions[0].type == "Ready"

    got = core.read_node("n1")
    assert got.metadata.resource_version == created.metadata.resource_version
    listing = core.list_node()
    assert [n.metadata.name for n in listing.items] == ["n1"]
    assert int(listing.metadata.resource_version) >= int(created.metadata.resource_version)

    core.delete_node("n1")
    with pytest.raises(ApiException) as err:
        core.read_node("n1")
    assert err.value.status == 404


def test_not_found_and_already_exists_bodies(core: Any) -> None:
    with pytest.raises(ApiException) as err:
        core.read_node("missing")
    assert status_of(err.value) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'nodes "missing" not found',
        "reason": "NotFound",
        "details": {"name": "missing", "kind": "nodes"},
        "code": 404,
    }
    core.create_node(node_body("n1"))
    with pytest.raises(ApiException) as err:
        core.create_node(node_body("n1"))
    assert err.value.status == 409
    assert status_of(err.value)["reason"] == "AlreadyExists"
    assert status_of(err.value)["message"] == 'nodes "n1" already exists'


def test_invalid_bodies(core: Any, api_client: Any) -> None:
    with pytest.raises(ApiException) as err:
        core.create_node({"metadata": {"name": "Not_A_Valid_Name"}})
    assert err.value.status == 422
    assert status_of(err.value)["reason"] == "Invalid"
    with pytest.raises(ApiException) as err:
        core.create_node({"metadata": {}})
    assert err.value.status == 422
    with pytest.raises(ApiException) as err:
        api_client.call_api(
            "/api/v1/nodes",
            "POST",
            body="{not json",
            header_params={"Content-Type": "application/json"},
            _preload_content=False,
        )
    assert err.value.status == 400


def test_writes_to_the_node_do_not_change_status(core: Any, kube_store: KubeStore) -> None:
    kube_store.put_node("n1", ready=True)
    node = core.read_node("n1")
    body = core.api_client.sanitize_for_serialization(node)
    body["spec"]["unschedulable"] = True
    body["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    replaced = core.replace_node("n1", body)
    assert replaced.spec.unschedulable is True
    ready = [c for c in replaced.status.conditions if c.type == "Ready"]
    assert ready[0].status == "True"


def test_writes_to_status_do_not_change_the_node(core: Any, kube_store: KubeStore) -> None:
    kube_store.put_node("n1", labels={"a": "1"})
    patched = core.patch_node_status(
        "n1",
        {
            "metadata": {"labels": {"a": "2"}},
            "spec": {"unschedulable": True},
            "status": {"conditions": [{"type": "GpuHealthy", "status": "False"}]},
        },
    )
    assert patched.metadata.labels["a"] == "1"
    assert not patched.spec.unschedulable
    assert any(c.type == "GpuHealthy" for c in patched.status.conditions)
    assert core.read_node_status("n1").status.conditions == patched.status.conditions


def test_replace_status_keeps_spec(core: Any, kube_store: KubeStore) -> None:
    kube_store.put_node("n1", unschedulable=True)
    body = core.api_client.sanitize_for_serialization(core.read_node_status("n1"))
    body["spec"]["unschedulable"] = False
    body["status"]["nodeInfo"]["bootID"] = "new-boot"
    replaced = core.replace_node_status("n1", body)
    assert replaced.spec.unschedulable is True
    assert replaced.status.node_info.boot_id == "new-boot"


def test_python_mutations_bump_resource_version(core: Any, kube_store: KubeStore) -> None:
    kube_store.put_node("n1", boot_id="boot-1")
    before = core.read_node("n1").metadata.resource_version
    kube_store.set_node_boot_id("n1", "boot-2")
    after = core.read_node("n1")
    assert after.status.node_info.boot_id == "boot-2"
    assert int(after.metadata.resource_version) > int(before)


def test_no_op_patch_keeps_resource_version(core: Any, kube_store: KubeStore) -> None:
    kube_store.put_node("n1", labels={"a": "1"})
    before = core.read_node("n1").metadata.resource_version
    after = core.patch_node("n1", {"metadata": {"labels": {"a": "1"}}})
    assert after.metadata.resource_version == before


def test_discovery_and_version(api_client: Any) -> None:
    from kubernetes import client

    assert client.VersionApi(api_client).get_code().major == "1"
    core_resources = client.CoreV1Api(api_client).get_api_resources()
    names = {r.name for r in core_resources.resources}
    assert {"nodes", "nodes/status", "pods", "pods/eviction", "events"} <= names
    groups = client.ApisApi(api_client).get_api_versions()
    assert {g.name for g in groups.groups} >= {"policy", "batch", "karpenter.sh"}
    karpenter = client.CustomObjectsApi(api_client).get_api_resources("karpenter.sh", "v1")
    assert "nodeclaims" in {r.name for r in karpenter.resources}
