"""Events (create, list by involved object) and Jobs (create, status, cascading delete)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from simulator.kube_api import JOBS, PODS, KubeStore


def node_event(name: str, node: str, reason: str) -> Any:
    return client.CoreV1Event(
        metadata=client.V1ObjectMeta(name=name, namespace="default"),
        involved_object=client.V1ObjectReference(kind="Node", name=node, api_version="v1"),
        reason=reason,
        message=f"{reason} on {node}",
        type="Normal",
        source=client.V1EventSource(component="gpu-remediation"),
    )


def test_events_create_and_list_by_involved_object(core: Any) -> None:
    core.create_namespaced_event("default", node_event("n1.1", "n1", "Cordoned"))
    core.create_namespaced_event("default", node_event("n1.2", "n1", "Drained"))
    core.create_namespaced_event("default", node_event("n2.1", "n2", "Cordoned"))
    listing = core.list_namespaced_event(
        "default", field_selector="involvedObject.kind=Node,involvedObject.name=n1"
    )
    assert [e.reason for e in listing.items] == ["Cordoned", "Drained"]
    everywhere = core.list_event_for_all_namespaces(field_selector="involvedObject.name=n2")
    assert [e.metadata.name for e in everywhere.items] == ["n2.1"]
    assert core.list_namespaced_event("default", field_selector="reason=Cordoned").items[0].message


def job_body(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "nodeName": "n1",
                    "containers": [{"name": "reset", "image": "nvidia/cuda", "command": ["true"]}],
                }
            }
        },
    }


def test_job_create_status_and_background_delete(
    batch: Any, core: Any, kube_store: KubeStore
) -> None:
    job = batch.create_namespaced_job("ops", job_body("gpu-reset"))
    uid = job.metadata.uid
    assert job.spec.selector.match_labels == {"batch.kubernetes.io/controller-uid": uid}
    assert job.spec.template.metadata.labels["job-name"] == "gpu-reset"
    assert job.spec.backoff_limit == 6

    pod = kube_store.add_job_pod("ops", "gpu-reset", node_name="n1")
    assert batch.read_namespaced_job_status("gpu-reset", "ops").status.active == 1
    pods = core.list_namespaced_pod(
        "ops", label_selector=f"batch.kubernetes.io/controller-uid={uid}"
    )
    assert [p.metadata.name for p in pods.items] == [pod["metadata"]["name"]]

    kube_store.finish_job("ops", "gpu-reset", succeeded=True)
    done = batch.read_namespaced_job("gpu-reset", "ops")
    assert done.status.succeeded == 1
    assert any(c.type == "Complete" and c.status == "True" for c in done.status.conditions)

    batch.delete_namespaced_job("gpu-reset", "ops", propagation_policy="Background")
    assert batch.list_namespaced_job("ops").items == []
    assert core.list_namespaced_pod("ops").items == []


def test_job_delete_without_policy_orphans_pods(batch: Any, kube_store: KubeStore) -> None:
    batch.create_namespaced_job("ops", job_body("j1"))
    pod = kube_store.add_job_pod("ops", "j1")
    batch.delete_namespaced_job("j1", "ops")
    orphan = kube_store.get(PODS, pod["metadata"]["name"], "ops")
    assert orphan["metadata"]["ownerReferences"] == []
    assert not kube_store.exists(JOBS, "j1", "ops")


def test_job_validation(batch: Any) -> None:
    body = job_body("bad")
    body["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    with pytest.raises(ApiException) as err:
        batch.create_namespaced_job("ops", body)
    assert err.value.status == 422
