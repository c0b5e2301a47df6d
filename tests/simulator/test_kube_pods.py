"""Pod create/status/delete rules and PodDisruptionBudget CRUD through the official client."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from simulator.kube_api import KubeStore

from .kube_helpers import pod_body


def test_create_resets_status_and_fills_defaults(core: Any) -> None:
    body = pod_body("p1", node="n1")
    body["status"] = {"phase": "Running"}
    pod = core.create_namespaced_pod("ns", body)
    assert pod.status.phase == "Pending"
    assert pod.metadata.namespace == "ns"
    assert pod.spec.termination_grace_period_seconds == 30
    assert pod.spec.restart_policy == "Always"


def test_status_subresource_sets_phase_and_readiness(core: Any) -> None:
    core.create_namespaced_pod("ns", pod_body("p1", node="n1"))
    patched = core.patch_namespaced_pod_status(
        "p1",
        "ns",
        {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}},
    )
    assert patched.status.phase == "Running"
    assert core.list_namespaced_pod("ns", field_selector="status.phase=Running").items


def test_generate_name_and_namespace_mismatch(core: Any) -> None:
    body = pod_body("")
    body["metadata"] = {"generateName": "drain-"}
    pod = core.create_namespaced_pod("ns", body)
    assert pod.metadata.name.startswith("drain-")
    assert len(pod.metadata.name) == len("drain-") + 5
    other = pod_body("p2")
    other["metadata"]["namespace"] = "elsewhere"
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("ns", other)
    assert err.value.status == 400


def test_pod_without_containers_is_invalid(core: Any) -> None:
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("ns", {"metadata": {"name": "p"}, "spec": {}})
    assert err.value.status == 422


def test_delete_collection_by_label(core: Any, kube_store: KubeStore) -> None:
    kube_store.put_pod("ns", "a1", labels={"app": "a"})
    kube_store.put_pod("ns", "a2", labels={"app": "a"})
    kube_store.put_pod("ns", "b1", labels={"app": "b"})
    core.delete_collection_namespaced_pod("ns", label_selector="app=a")
    assert [p.metadata.name for p in core.list_namespaced_pod("ns").items] == ["b1"]


def test_pdb_crud_and_validation(policy: Any, kube_store: KubeStore) -> None:
    kube_store.put_pod("ns", "p1", node_name="n1", labels={"app": "a"})
    kube_store.put_pod("ns", "p2", node_name="n1", labels={"app": "a"})
    created = policy.create_namespaced_pod_disruption_budget(
        "ns",
        {
            "metadata": {"name": "pdb"},
            "spec": {"minAvailable": "50%", "selector": {"matchLabels": {"app": "a"}}},
        },
    )
    assert created.status.desired_healthy == 1
    assert created.status.disruptions_allowed == 1
    assert created.status.conditions[0].type == "DisruptionAllowed"
    assert [
        p.metadata.name for p in policy.list_pod_disruption_budget_for_all_namespaces().items
    ] == ["pdb"]
    patched = policy.patch_namespaced_pod_disruption_budget(
        "pdb", "ns", {"spec": {"minAvailable": 2}}
    )
    assert patched.metadata.generation == 2
    assert patched.status.observed_generation == 2
    assert patched.status.disruptions_allowed == 0
    with pytest.raises(ApiException) as err:
        policy.patch_namespaced_pod_disruption_budget("pdb", "ns", {"spec": {"maxUnavailable": 1}})
    assert err.value.status == 422  # minAvailable and maxUnavailable both set
    policy.delete_namespaced_pod_disruption_budget("pdb", "ns")
    assert policy.list_namespaced_pod_disruption_budget("ns").items == []
