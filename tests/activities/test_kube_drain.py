"""Stopping GPU work like kubectl drain, against the emulator's eviction API."""

import threading

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.kubernetes import KubernetesActivities
from gpu_remediation.contracts import DrainGpuPodsInput
from simulator.kube_api import PODS, KubeApiServer, KubeStore

ENV = ActivityEnvironment()


def drain(timeout_s: float = 5.0) -> DrainGpuPodsInput:
    return DrainGpuPodsInput(node="gpu-1", incident_id="i", timeout_s=timeout_s)


def pod_names(store: KubeStore) -> set[str]:
    items, _ = store.list_objects(PODS)
    return {p["metadata"]["name"] for p in items}


async def test_only_gpu_pods_are_evicted_and_daemonsets_and_mirror_pods_stay(
    store: KubeStore, kube_activities: KubernetesActivities
) -> None:
    store.put_node("gpu-1")
    trainer = store.put_pod("ml", "trainer-0", node_name="gpu-1", gpus=8)
    store.put_pod("ml", "cpu-sidecar", node_name="gpu-1")
    store.put_pod(
        "kube-system", "dcgm-exporter", node_name="gpu-1", gpus=1, owner=("DaemonSet", "dcgm")
    )
    store.put_pod(
        "kube-system",
        "static",
        node_name="gpu-1",
        gpus=1,
        annotations={"kubernetes.io/config.mirror": "x"},
    )
    store.put_pod("ml", "elsewhere", node_name="gpu-2", gpus=8)
    result = await ENV.run(kube_activities.drain_gpu_pods, drain())
    assert result.evicted_uids == [trainer["metadata"]["uid"]]
    assert result.remaining == []
    assert pod_names(store) == {"cpu-sidecar", "dcgm-exporter", "static", "elsewhere"}


async def test_a_drain_blocked_by_a_pdb_waits_until_the_budget_allows(
    kube: KubeApiServer, store: KubeStore, kube_activities: KubernetesActivities
) -> None:
    store.put_node("gpu-1")
    store.put_pod("ml", "worker-0", node_name="gpu-1", gpus=8, labels={"app": "train"})
    store.put_pod("ml", "worker-1", node_name="gpu-2", gpus=8, labels={"app": "train"})
    store.put_pdb("ml", "train", match_labels={"app": "train"}, min_available=2)
    # A third replica comes up a little later and frees one disruption.
    threading.Timer(
        0.3,
        lambda: store.put_pod("ml", "worker-2", node_name="gpu-3", gpus=8, labels={"app": "train"}),
    ).start()
    result = await ENV.run(kube_activities.drain_gpu_pods, drain())
    assert len(result.evicted_uids) == 1
    assert "worker-0" not in pod_names(store)
    statuses = [r.status for r in kube.faults.requests() if r.path.endswith("/worker-0/eviction")]
    assert 429 in statuses
    assert statuses[-1] == 201


async def test_a_drain_that_never_gets_past_the_budget_reports_what_is_left(
    store: KubeStore, kube_activities: KubernetesActivities
) -> None:
    store.put_node("gpu-1")
    store.put_pod("ml", "worker-0", node_name="gpu-1", gpus=8, labels={"app": "train"})
    store.put_pdb("ml", "train", match_labels={"app": "train"}, min_available=1)
    result = await ENV.run(kube_activities.drain_gpu_pods, drain(timeout_s=0.5))
    assert result.evicted_uids == []
    assert result.remaining == ["ml/worker-0"]


async def test_a_pod_under_two_budgets_is_a_clear_non_retryable_error(
    store: KubeStore, kube_activities: KubernetesActivities
) -> None:
    store.put_node("gpu-1")
    store.put_pod("ml", "worker-0", node_name="gpu-1", gpus=8, labels={"app": "train"})
    store.put_pdb("ml", "a", match_labels={"app": "train"}, max_unavailable=1)
    store.put_pdb("ml", "b", match_labels={"app": "train"}, max_unavailable=1)
    with pytest.raises(ApplicationError, match="more than one PodDisruptionBudget") as err:
        await ENV.run(kube_activities.drain_gpu_pods, drain())
    assert err.value.type == "PdbMisconfigured"
    assert err.value.non_retryable


async def test_api_errors_during_a_drain_surface_as_retryable_activity_errors(
    kube: KubeApiServer, store: KubeStore, kube_activities: KubernetesActivities
) -> None:
    store.put_node("gpu-1")
    store.put_pod("ml", "worker-0", node_name="gpu-1", gpus=8)
    kube.faults.inject(r"^/api/v1/pods$", method="GET", status=503)
    with pytest.raises(ApplicationError, match="503") as err:
        await ENV.run(kube_activities.drain_gpu_pods, drain())
    # Temporal retries the activity with the rung's retry policy.
    assert not err.value.non_retryable


async def test_an_eviction_the_api_server_forbids_is_left_running_and_reported_not_retried(
    kube: KubeApiServer, store: KubeStore, kube_activities: KubernetesActivities
) -> None:
    # deploy/worker-admission.yaml refuses the worker's evictions in system namespaces.
    store.put_node("gpu-1")
    trainer = store.put_pod("ml", "trainer-0", node_name="gpu-1", gpus=8)
    store.put_pod("kube-system", "gpu-probe", node_name="gpu-1", gpus=1)
    kube.faults.inject(
        r"^/api/v1/namespaces/kube-system/pods/[^/]+/eviction$",
        method="POST",
        status=403,
        message="ValidatingAdmissionPolicy 'gpu-remediation-worker-evictions' denied request",
    )
    result = await ENV.run(kube_activities.drain_gpu_pods, drain(timeout_s=30))
    assert result.evicted_uids == [trainer["metadata"]["uid"]]
    assert result.remaining == ["kube-system/gpu-probe"]
    statuses = [r.status for r in kube.faults.requests() if r.path.endswith("/gpu-probe/eviction")]
    assert statuses == [403]
