"""The eviction subresource with PodDisruptionBudget semantics."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from simulator.kube_api import PODS, KubeApiServer, KubeStore

from .kube_helpers import status_of

NS = "ml"


def evict(core: Any, name: str, uid: str | None = None) -> Any:
    options = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid))
    body = client.V1Eviction(
        metadata=client.V1ObjectMeta(name=name, namespace=NS), delete_options=options
    )
    return core.create_namespaced_pod_eviction(name, NS, body)


def test_eviction_without_pdb_deletes_the_pod(
    core: Any, kube_api: KubeApiServer, kube_store: KubeStore
) -> None:
    pod = kube_store.put_pod(NS, "p1", node_name="n1")
    evict(core, "p1", pod["metadata"]["uid"])
    assert not kube_store.exists(PODS, "p1", NS)
    log = [(r.method, r.path, r.status) for r in kube_api.requests()]
    assert log == [("POST", f"/api/v1/namespaces/{NS}/pods/p1/eviction", 201)]


def test_pdb_blocks_until_a_pod_becomes_ready(
    core: Any, policy: Any, kube_store: KubeStore
) -> None:
    kube_store.put_pod(NS, "p1", node_name="n1", labels={"app": "a"})
    kube_store.put_pod(NS, "p2", node_name="n2", labels={"app": "a"}, ready=False)
    policy.create_namespaced_pod_disruption_budget(
        NS,
        {
            "metadata": {"name": "pdb"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "a"}}},
        },
    )
    status = policy.read_namespaced_pod_disruption_budget("pdb", NS).status
    assert (status.current_healthy, status.desired_healthy, status.disruptions_allowed) == (1, 1, 0)
    assert status.expected_pods == 2

    with pytest.raises(ApiException) as err:
        evict(core, "p1")
    assert err.value.status == 429
    body = status_of(err.value)
    assert body["reason"] == "TooManyRequests"
    assert body["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    assert body["details"]["causes"] == [
        {
            "reason": "DisruptionBudget",
            "message": "The disruption budget pdb needs 1 healthy pods and has 1 currently",
        }
    ]
    assert "Retry-After" not in err.value.headers

    kube_store.set_pod_ready(NS, "p2")
    assert policy.read_namespaced_pod_disruption_budget("pdb", NS).status.disruptions_allowed == 1
    evict(core, "p1")
    assert [p.metadata.name for p in core.list_namespaced_pod(NS).items] == ["p2"]
    status = policy.read_namespaced_pod_disruption_budget("pdb", NS).status
    assert (status.current_healthy, status.disruptions_allowed) == (1, 0)


def test_pdb_unblocks_when_another_pod_is_added(
    core: Any, policy: Any, kube_store: KubeStore
) -> None:
    kube_store.put_pod(NS, "p1", node_name="n1", labels={"app": "a"})
    kube_store.put_pdb(NS, "pdb", match_labels={"app": "a"}, max_unavailable=0)
    with pytest.raises(ApiException) as err:
        evict(core, "p1")
    assert err.value.status == 429
    policy.patch_namespaced_pod_disruption_budget(
        "pdb", NS, {"spec": {"maxUnavailable": None, "minAvailable": 1}}
    )
    with pytest.raises(ApiException):
        evict(core, "p1")
    kube_store.put_pod(NS, "p2", node_name="n2", labels={"app": "a"})
    evict(core, "p1")


def test_percent_max_unavailable_uses_workload_scale(policy: Any, kube_store: KubeStore) -> None:
    for i in range(3):
        kube_store.put_pod(
            NS, f"p{i}", node_name="n1", labels={"app": "a"}, owner=("StatefulSet", "db")
        )
    kube_store.set_workload_scale(NS, "StatefulSet", "db", 4)
    kube_store.put_pdb(NS, "pdb", match_labels={"app": "a"}, max_unavailable="25%")
    status = policy.read_namespaced_pod_disruption_budget("pdb", NS).status
    # 4 expected, 1 may be unavailable, 3 desired, 3 healthy: a replica is already missing.
    assert (status.expected_pods, status.desired_healthy, status.disruptions_allowed) == (4, 3, 0)


def test_two_pdbs_is_an_internal_error(core: Any, kube_store: KubeStore) -> None:
    kube_store.put_pod(NS, "p1", node_name="n1", labels={"app": "a", "team": "x"})
    kube_store.put_pdb(NS, "by-app", match_labels={"app": "a"}, max_unavailable=1)
    kube_store.put_pdb(NS, "by-team", match_labels={"team": "x"}, max_unavailable=1)
    with pytest.raises(ApiException) as err:
        evict(core, "p1")
    assert err.value.status == 500
    body = status_of(err.value)
    assert body["reason"] == "InternalError"
    assert body["message"] == (
        "Internal error occurred: This pod has more than one PodDisruptionBudget, which the "
        "eviction subresource does not support."
    )


def test_uid_precondition_mismatch_is_409(core: Any, kube_store: KubeStore) -> None:
    kube_store.put_pod(NS, "p1", node_name="n1")
    with pytest.raises(ApiException) as err:
        evict(core, "p1", uid="not-the-uid")
    assert err.value.status == 409
    assert (
        "Precondition failed: UID in precondition: not-the-uid" in status_of(err.value)["message"]
    )
    assert kube_store.exists(PODS, "p1", NS)


def test_gone_pod_is_404(core: Any) -> None:
    with pytest.raises(ApiException) as err:
        evict(core, "ghost")
    assert err.value.status == 404


def test_unready_and_pending_pods_ignore_the_budget(core: Any, kube_store: KubeStore) -> None:
    kube_store.put_pod(NS, "healthy", node_name="n1", labels={"app": "a"})
    kube_store.put_pod(NS, "pending", labels={"app": "a"}, phase="Pending", ready=False)
    kube_store.put_pod(NS, "unready", node_name="n1", labels={"app": "a"}, ready=False)
    kube_store.put_pdb(NS, "pdb", match_labels={"app": "a"}, min_available=1)
    evict(core, "pending")
    # IfHealthyBudget: the budget is met (1 healthy >= 1 desired), so the unready pod goes.
    evict(core, "unready")
    with pytest.raises(ApiException) as err:
        evict(core, "healthy")
    assert err.value.status == 429


def test_delete_pod_with_uid_precondition(core: Any, kube_store: KubeStore) -> None:
    pod = kube_store.put_pod(NS, "p1", node_name="n1")
    with pytest.raises(ApiException) as err:
        core.delete_namespaced_pod(
            "p1", NS, body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="x"))
        )
    assert err.value.status == 409
    deleted = core.delete_namespaced_pod(
        "p1",
        NS,
        grace_period_seconds=0,
        body=client.V1DeleteOptions(
            preconditions=client.V1Preconditions(uid=pod["metadata"]["uid"])
        ),
    )
    assert deleted.kind == "Pod"
    assert core.list_namespaced_pod(NS).items == []
